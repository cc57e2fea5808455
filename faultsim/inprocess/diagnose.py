"""A diagnostic of convergence (faultsim.inprocess.convergence), off unless asked for: why
resumed runs do not meet the clean run.

With FAULTSIM_CONVERGENCE_DIAG=<file> in the environment, the clean run records the parts
of its state at each model request, and every resumed run compares its own at each of its
model requests with the nearest clean request (the one whose conversation has as many
messages; else the one with the fewest parts apart), appending one JSON line per request
to <file> (written with `posix`, below pyfakefs; forked workers append to it too):

  run      which resumed run (pid:counter)     at     the clean request compared with
  cut      true on the request where the run was cut (its other lines come before)
  differs  the parts apart: "file:<path>", "world:<part>" (requests, clock, answered,
           faulted, paused, cache, service:<name>), "request", "open_files",
           "memory:<frame or module>" (or "memory:refused"), in that order
  renamed  the same, with the fake's fresh tool-use ids of re-asked turns
           (`toolu_..._rK`) read as the first asking's, and the fake's per-turn answer
           counts capped at one: what a cut up to that renaming would still see apart

Nothing of it changes what is run or judged; `bench/convergence_causes.py` tabulates it.
"""
from __future__ import annotations

import json
import os
import posix
import re
import sys
from typing import Any

FRESH = re.compile(rb"(toolu_[A-Za-z0-9_]*?_\d+_\d+)_r\d+")
_runs = [0]


def path() -> str | None:
    return os.environ.get("FAULTSIM_CONVERGENCE_DIAG") or None


def install() -> None:
    """Hooks the diagnostic into convergence when the environment asks for it (a sweep's
    clean run calls this), and unhooks it when not."""
    from . import convergence
    convergence.diagnostic = sys.modules[__name__] if path() else None


def _digest(data: bytes) -> str:
    import hashlib
    return hashlib.blake2b(data, digest_size=8).hexdigest()


def parts(ex: Any, world: Any, request: Any, frame: Any, renamed: bool) -> dict:
    """The state at a model request, part by part (digests), for comparing."""
    from ..world.ledger import canonical
    from .fingerprints import Refused, file_meta, fingerprint, open_files, world_parts

    sub = (lambda b: FRESH.sub(rb"\1", b)) if renamed else (lambda b: b)
    out: dict = {}
    ip = ex.interposer
    for name, data in sorted(ip.snapshot().items()):
        out["file:" + name] = _digest(sub(data)) if data is not None else "absent"
    for path, meta in file_meta(ip):
        out["filemeta:" + path] = meta
    for part, text in world_parts(world):
        if part == "store":
            out["world:service:" + text.split("[", 1)[0].split("(", 1)[0][:40]] = \
                _digest(sub(text.encode()))
        elif part == "answered" and renamed:  # a re-asked turn's count read as one
            out["world:answered"] = canonical(
                [(k, min(v, 1)) for k, v in sorted(world.model._answered.items())])
        elif part == "cache":
            out["world:cache"] = _digest(sub(text.encode()))
        else:
            out["world:" + part] = text
    out["request"] = _digest(sub(request.method.encode() + b" " + request.url.path.encode()
                                 + b"\n" + (request.content or b"")))
    out["open_files"] = str(open_files(ip))
    memory: dict = {}
    try:
        fingerprint(frame, memory)
    except Refused:
        memory = {"refused": "refused"}
    for k, v in memory.items():
        out["memory:" + k] = v
    return out


def messages(request: Any) -> int | None:
    try:
        return len(json.loads(request.content or b"{}").get("messages", []))
    except (ValueError, AttributeError):
        return None


_ORDER = ("file:", "filemeta:", "world:", "request", "open_files", "memory:")


def apart(a: dict, b: dict) -> list[str]:
    keys = sorted(set(a) | set(b), key=lambda k: (next(i for i, p in enumerate(_ORDER)
                                                       if k.startswith(p)), k))
    return [k for k in keys if a.get(k) != b.get(k)]


class Clean:
    """The clean run's parts at each model request (kept on the Course)."""

    def __init__(self) -> None:
        self.exact: list[dict] = []
        self.renamed: list[dict] = []
        self.sizes: list[int | None] = []
        self.files: list[dict] = []  # the sandbox's bytes (to show how a file differs)

    def record(self, ex: Any, world: Any, request: Any, frame: Any) -> None:
        self.exact.append(parts(ex, world, request, frame, False))
        self.renamed.append(parts(ex, world, request, frame, True))
        self.sizes.append(messages(request))
        self.files.append(ex.interposer.snapshot())


class Probe:
    """One resumed run's comparisons, appended to the diagnostic's file."""

    def __init__(self, clean: Clean) -> None:
        self.clean = clean
        _runs[0] += 1
        self.run = f"{posix.getpid()}:{_runs[0]}"

    def __call__(self, ex: Any, world: Any, request: Any, frame: Any, cut: bool,
                 key: str) -> None:
        exact = parts(ex, world, request, frame, False)
        renamed = parts(ex, world, request, frame, True)
        size = messages(request)
        same = [n for n, s in enumerate(self.clean.sizes) if s == size]
        candidates = same or range(len(self.clean.exact))
        at = min(candidates, key=lambda n: (len(apart(exact, self.clean.exact[n])), n),
                 default=None)
        line = {"run": self.run, "at": at, "cut": cut, "messages": size, "key": key,
                "differs": apart(exact, self.clean.exact[at]) if at is not None else ["?"],
                "renamed": apart(renamed, self.clean.renamed[at]) if at is not None
                else ["?"]}
        first = next((p for p in line["renamed"] if p.startswith("file:")), None)
        if first is not None:  # how the first file still apart after renaming differs
            line["diff"] = _diff(self.clean.files[at].get(first[5:]),
                                 ex.interposer.snapshot().get(first[5:]))
        fd = posix.open(path(), posix.O_WRONLY | posix.O_APPEND | posix.O_CREAT, 0o644)
        try:
            posix.write(fd, (json.dumps(line) + "\n").encode())
        finally:
            posix.close(fd)


def _diff(clean: bytes | None, own: bytes | None) -> str:
    """The first stretch where two texts part (a few characters either side)."""
    a, b = clean or b"", own or b""
    n = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    return (f"at {n}: clean {a[max(0, n - 60):n + 100]!r} / resumed "
            f"{b[max(0, n - 60):n + 100]!r}")
