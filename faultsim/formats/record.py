"""Record a corpus: one clean run of the agent, and at each kill point the durable state as
a killed process would leave it (the agent's files) and the world as it stands then.

The corpus is built in a fresh folder beside `out` and renamed into place whole; an
existing `out` is replaced only if it is a corpus (its manifest says so) or empty: any
other folder is refused before the run, and kept as it is."""
from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Callable

from .. import backends
from ..core.checkpoints import CheckpointSpec
from ..errors import UsageError
from ..killpoints import KillPoint
from ..settings.options import FIXED_TIMEOUT
from ..reports.outfile import OutputError, check_replaceable, replace_folder, write_atomic
from ..scenario import Scenario
from .corpus import (MANIFEST, MAX_BLOB, MAX_MANIFEST, SCENARIO, Corpus, CorpusEntry,
                     CorpusError, read_inside, sha256)


def check_out(out: str | Path, what: str = "--out") -> None:
    """Refuse, before any run, a corpus folder that cannot be written or must not be
    replaced: a file, a folder in a missing or read-only folder, or a folder holding files
    that are not a corpus (a manifest.json of something else included)."""
    out = Path(out)
    if check_replaceable(out, MANIFEST, what) and (out / MANIFEST).exists():
        try:  # read as any corpus is: bounded, never through a link out of the folder
            doc = json.loads(read_inside(out, out / MANIFEST, "(file)", MAX_MANIFEST, ""))
            ours = isinstance(doc, dict) and "faultsim_corpus" in doc
        except (CorpusError, ValueError):
            ours = False
        if not ours:
            raise OutputError(f"{what} {out}: its {MANIFEST} is not a faultsim corpus's; "
                              "not replaced: name a new or empty folder")


def _format_version(files: dict[str, bytes | None], spec: CheckpointSpec) -> Any:
    versions = set()
    for path, data in files.items():
        if spec.matches(path) and spec.format_of(path) == "json" and data:
            try:
                doc = json.loads(data)
            except ValueError:
                continue
            if isinstance(doc, dict) and "version" in doc:
                versions.add(json.dumps(doc["version"]))
    found = [json.loads(v) for v in sorted(versions)]
    return found[0] if len(found) == 1 else (found or None)


def record_corpus(make_agent: Callable, scenario: Scenario, out: str | Path, *,
                  agent: str, recorded_by: str | None = None, agent_version: str = "unknown",
                  seed: str = "0", timeout: float | None = FIXED_TIMEOUT,
                  only: Callable[[KillPoint], bool] | None = None) -> Corpus:
    """Write a corpus of `make_agent`'s durable state at each kill point of `scenario` to
    `out` (replacing an earlier corpus there, atomically; see `check_out`). `agent` is the
    factory later checks run by default (the project's agent); `recorded_by` the one that
    ran here, if another."""
    out = Path(out)
    check_out(out)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.recording-", dir=out.parent))
    try:
        umask = os.umask(0)
        os.umask(umask)
        staging.chmod(0o777 & ~umask)  # a folder to commit and share: not mkdtemp's 0700
        corpus = _record(make_agent, scenario, staging, agent=agent, recorded_by=recorded_by,
                         agent_version=agent_version, seed=seed, timeout=timeout, only=only)
        replace_folder(staging, out, MANIFEST, what="--out")
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)  # made above: nothing is left behind
        raise
    corpus.path = out
    return corpus


def _record(make_agent: Callable, scenario: Scenario, staging: Path, *, agent: str,
            recorded_by: str | None, agent_version: str, seed: str, timeout: float | None,
            only: Callable[[KillPoint], bool] | None) -> Corpus:
    from .._version import __version__ as faultsim_version

    source = Path(scenario.path).read_bytes()
    write_atomic(staging / SCENARIO, source)
    corpus = Corpus(staging, scenario.id, sha256(source), agent, recorded_by or agent,
                    agent_version, [], faultsim_version)
    # Collected in memory: during the run the fake filesystem stands in for the real one.
    blobs: dict[str, bytes] = {}
    seen: dict[tuple, CorpusEntry] = {}
    too_large: dict[str, int] = {}  # said after the run: raised here, the agent would see it

    def put(data: bytes, path: str) -> str:
        if len(data) > MAX_BLOB:  # a check would refuse to read it (formats.corpus)
            too_large[path] = len(data)
        digest = sha256(data)
        blobs.setdefault(digest, data)
        return digest

    def take(point: KillPoint, files: dict, world: dict) -> None:
        names = {p: None if data is None else put(data, p)
                 for p, data in sorted(files.items())}
        world_blob = put(json.dumps(world, sort_keys=True).encode(), "the world snapshot")
        key = (tuple(names.items()), world_blob)
        if key in seen:
            seen[key].kill_points.append(point.id)
            return
        entry = CorpusEntry(point.id, [point.id], point.category,
                            _format_version(files, scenario.checkpoint), names, world_blob)
        seen[key] = entry
        corpus.entries.append(entry)

    # the in-process backend's sandbox (faultsim.inprocess.formats_job), through the seam
    with backends.formats(make_agent, scenario, seed=seed, timeout=timeout,
                          name=recorded_by or agent) as sandbox:
        error = sandbox.record(only, take)
    if error is not None:
        raise RuntimeError(f"{scenario.path}: the recording run failed: {error}")
    if too_large:
        path, size = next(iter(too_large.items()))
        raise UsageError(f"{scenario.path}: the agent's {path} reached {size} bytes, over the "
                         f"{MAX_BLOB // 2 ** 20} MiB a corpus file may hold: not recorded")
    for data in blobs.values():
        corpus.put_blob(data)
    versions = {json.dumps(e.format_version) for e in corpus.entries
                if e.format_version is not None}
    corpus.format_versions = [json.loads(v) for v in sorted(versions)]
    corpus.write_manifest()
    return corpus
