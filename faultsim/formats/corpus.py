"""A corpus on disk: a manifest, the scenario it was recorded on, and content-addressed
blobs (files and world snapshots), each stored once however many entries share it.

    CORPUS/manifest.json
    CORPUS/scenario.toml          the scenario as recorded (the world snapshots fit it)
    CORPUS/blobs/<sha256>         file contents and world snapshots

A corpus is read as untrusted input (it is committed, shared, downloaded): a blob name must
be a sha256 digest before anything is read by it, a file path of an entry must stay inside
the agent's workdir, every file read must be a regular file inside the corpus folder (no
link out of it, no device, no FIFO), and no file is read past its size bound. Each refusal
is one line naming the file and the field.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import stat
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..errors import UsageError
from ..reports.outfile import write_atomic

CORPUS_FORMAT = 1
MANIFEST = "manifest.json"
SCENARIO = "scenario.toml"
DIGEST = re.compile(r"[0-9a-f]{64}\Z")  # a blob's name: its sha256, lowercase hex
# Bounds on what one corpus file may hold, so a hostile manifest cannot make a check read
# without end (a blob linked to /dev/zero). A blob is one file of the agent's or one world
# snapshot: 256 MiB is far above any checkpoint (the hostile cases' "very large file" is
# 64 MiB) and still fits in memory; recording refuses a larger file, naming it.
MAX_BLOB = 256 * 1024 * 1024
MAX_MANIFEST = 64 * 1024 * 1024  # ~1 KiB an entry: tens of thousands of entries
MAX_SCENARIO = 16 * 1024 * 1024  # a scenario file is text written by hand or recorded


class CorpusError(UsageError, ValueError):
    """A corpus that cannot be read. Names the file and the field at fault."""

    def __init__(self, path: Path | str, field_name: str, problem: str) -> None:
        self.path, self.field = str(path), field_name
        super().__init__(f"{path}: {field_name}: {problem}")


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@dataclass
class CorpusEntry:
    id: str  # the first kill point that left this state
    kill_points: list[str]  # every kill point that left exactly this state (files + world)
    category: str
    format_version: Any  # the "version" of its checkpoint files (JSON ones), if they have one
    files: dict[str, str | None]  # path -> blob sha256, None for a directory
    world: str  # blob sha256 of the world snapshot (JSON)


@dataclass
class Corpus:
    path: Path
    scenario_id: str
    scenario_sha256: str
    agent: str  # the factory a check runs by default: the project's current agent
    recorded_by: str  # the factory that wrote the entries (an older release, or the same)
    agent_version: str
    format_versions: list[Any]
    faultsim_version: str
    entries: list[CorpusEntry] = field(default_factory=list)

    # -- writing ---------------------------------------------------------------------------
    def put_blob(self, data: bytes) -> str:
        digest = sha256(data)
        target = self.path / "blobs" / digest
        if not target.exists():
            target.parent.mkdir(parents=True, exist_ok=True)
            write_atomic(target, data)
        return digest

    def write_manifest(self) -> None:
        data = {"faultsim_corpus": CORPUS_FORMAT, "scenario": {"id": self.scenario_id,
                                                              "sha256": self.scenario_sha256},
                "agent": self.agent, "recorded_by": self.recorded_by,
                "agent_version": self.agent_version, "format_versions": self.format_versions,
                "faultsim_version": self.faultsim_version,
                "entries": [asdict(e) for e in self.entries]}
        write_atomic(self.path / MANIFEST, json.dumps(data, indent=1, sort_keys=False) + "\n")

    # -- reading ---------------------------------------------------------------------------
    def blob(self, digest: str) -> bytes:
        if not isinstance(digest, str) or not DIGEST.match(digest):
            raise CorpusError(self.path / MANIFEST, "(blob)", f"expected a sha256 naming a "
                              f"blob, got {digest!r}")
        path = self.path / "blobs" / digest
        data = read_inside(self.path, path, "(blob)", MAX_BLOB, "missing from the corpus")
        if sha256(data) != digest:
            raise CorpusError(path, "(blob)", "its content does not match its sha256 name")
        return data

    @property
    def scenario_path(self) -> Path:
        return self.path / SCENARIO

    def show(self, agent: str | None = None) -> list[str]:
        """What a check of this corpus would import and run, read from its manifest alone
        (`faultsim formats check --show`): nothing is imported. `agent`: the one --agent
        names instead."""
        versions = ", ".join(map(str, self.format_versions)) or "none"
        points = sum(len(e.kill_points) for e in self.entries)
        return [f"{self.path}: a faultsim corpus (recorded with faultsim "
                f"{self.faultsim_version})",
                f"  agent it runs:   {agent} (--agent; the manifest names {self.agent})"
                if agent else
                f"  agent it runs:   {self.agent} (imported and run by `faultsim formats "
                "check` unless --agent names another)",
                f"  recorded by:     {self.recorded_by} {self.agent_version}",
                f"  scenario:        {self.scenario_id} ({self.scenario_path})",
                f"  states:          {len(self.entries)} ({points} kill points), "
                f"format version{'s' if len(self.format_versions) != 1 else ''} "
                f"{versions}"]

    @classmethod
    def open(cls, path: str | Path) -> "Corpus":
        path = Path(path)
        manifest = path / MANIFEST
        raw = read_inside(path, manifest, "(file)", MAX_MANIFEST,
                          "no manifest: not a faultsim corpus")
        try:
            data = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as exc:
            raise CorpusError(manifest, "(file)", f"not valid JSON ({exc})") from None
        if not isinstance(data, dict):
            raise CorpusError(manifest, "(top level)", "expected a JSON object")
        if data.get("faultsim_corpus") != CORPUS_FORMAT:
            raise CorpusError(manifest, "faultsim_corpus", f"expected {CORPUS_FORMAT}, got "
                              f"{data.get('faultsim_corpus')!r}: a corpus format this "
                              "faultsim does not read")

        def need(obj: dict, key: str, kind: type, where: str) -> Any:
            if not isinstance(obj.get(key), kind):
                raise CorpusError(manifest, f"{where}{key}", f"expected {kind.__name__}, got "
                                  f"{type(obj.get(key)).__name__}")
            return obj[key]

        def digest(value: Any, where: str, nullable: bool = False) -> Any:
            # checked here, before any read: a name such as ../../dev/zero is refused unread
            if (value is None and nullable) or (isinstance(value, str) and DIGEST.match(value)):
                return value
            raise CorpusError(manifest, where, "expected a sha256 (64 lowercase hex digits) "
                              f"naming a blob{' or null' if nullable else ''}, got {value!r}")

        scenario = need(data, "scenario", dict, "")
        entries = []
        for i, raw_entry in enumerate(need(data, "entries", list, "")):
            at = f"entries[{i}]."
            if not isinstance(raw_entry, dict):
                raise CorpusError(manifest, f"entries[{i}]", "expected an object")
            files = need(raw_entry, "files", dict, at)
            for p, blob in files.items():
                where = f"{at}files[{json.dumps(p)}]"
                problem = workdir_path_problem(p)
                if problem:
                    raise CorpusError(manifest, where, problem)
                digest(blob, where, nullable=True)
            kill_points = need(raw_entry, "kill_points", list, at)
            if not all(isinstance(k, str) for k in kill_points):
                raise CorpusError(manifest, f"{at}kill_points", "expected a list of strings")
            entries.append(CorpusEntry(
                id=need(raw_entry, "id", str, at), kill_points=kill_points,
                category=need(raw_entry, "category", str, at),
                format_version=raw_entry.get("format_version"), files=files,
                world=digest(need(raw_entry, "world", str, at), f"{at}world")))
        corpus = cls(path, need(scenario, "id", str, "scenario."),
                     need(scenario, "sha256", str, "scenario."), need(data, "agent", str, ""),
                     need(data, "recorded_by", str, ""), str(data.get("agent_version")),
                     list(data.get("format_versions") or []),
                     str(data.get("faultsim_version")), entries)
        source = read_inside(path, corpus.scenario_path, "(file)", MAX_SCENARIO,
                             "the recorded scenario is missing")
        if sha256(source) != corpus.scenario_sha256:
            raise CorpusError(corpus.scenario_path, "(file)", "changed since it was recorded "
                              "(its sha256 differs from the manifest's)")
        return corpus


def workdir_path_problem(path: str) -> str | None:
    """Why `path`, a file of an entry, could land outside the agent's workdir when the
    state is put on disk (None: it cannot): it must be relative, with no '..' part."""
    if not path or "\0" in path:
        return f"expected a file path inside the agent's workdir, got {path!r}"
    if path.startswith("/"):
        return f"expected a path relative to the agent's workdir, got the absolute {path!r}"
    if ".." in path.split("/"):
        return f"expected a path inside the agent's workdir, got {path!r} (a '..' part)"
    return None


def read_inside(root: Path, path: Path, field_name: str, limit: int, missing: str) -> bytes:
    """The bytes of `path`, a regular file inside the folder `root` once links are
    resolved, of at most `limit` bytes; else a CorpusError naming it and `field_name`.
    (Checked on the resolved path just before it is opened: a corpus swapped under a
    running check is beyond this.)"""
    real, inside = os.path.realpath(path), os.path.realpath(root)
    if os.path.commonpath([inside, real]) != inside:
        raise CorpusError(path, field_name, f"resolves outside the corpus folder (to {real})")
    try:
        # O_NONBLOCK: opening a FIFO must not wait for a writer (it is refused below)
        fd = os.open(real, os.O_RDONLY | os.O_NONBLOCK)
    except FileNotFoundError:
        raise CorpusError(path, field_name, missing) from None
    except OSError as exc:
        raise CorpusError(path, field_name, f"cannot be read ({exc.strerror})") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise CorpusError(path, field_name, "not a regular file")
        if info.st_size > limit:
            raise CorpusError(path, field_name, f"{info.st_size} bytes, over the "
                              f"{limit // 2 ** 20} MiB a corpus file may hold; not read")
        chunks, size = [], 0
        while size <= limit:
            chunk = os.read(fd, min(1 << 20, limit + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if size > limit:  # it grew while read
            raise CorpusError(path, field_name, f"over the {limit // 2 ** 20} MiB a corpus "
                              "file may hold; not read whole")
        return b"".join(chunks)
    finally:
        os.close(fd)
