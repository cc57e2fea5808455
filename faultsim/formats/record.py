"""Record a corpus: one clean run of the agent, and at each kill point the durable state as
a killed process would leave it (the agent's files) and the world as it stands then."""
from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any, Callable

from ..inprocess.sandbox import Explorer
from ..killpoints import KillPoint
from ..options import FIXED_TIMEOUT
from ..scenario import Scenario
from ..world.snapshot import world_to_json
from .corpus import SCENARIO, Corpus, CorpusEntry, sha256


def _format_version(files: dict[str, bytes | None]) -> Any:
    versions = set()
    for path, data in files.items():
        if path.rsplit("/", 1)[-1] == "checkpoint.json" and data:
            try:
                doc = json.loads(data)
            except ValueError:
                continue
            if isinstance(doc, dict) and "version" in doc:
                versions.add(json.dumps(doc["version"]))
    found = [json.loads(v) for v in sorted(versions)]
    return found[0] if len(found) == 1 else (found or None)


class _RecordAt:
    """Tracer policy: at each kill point, hand the state over; kill nothing."""

    def __init__(self, ex: Explorer, world, points: list[KillPoint],
                 take: Callable[[KillPoint, dict, dict], None]) -> None:
        from ..pipeline.sweep import by_event

        self.ex, self.world, self.take = ex, world, take
        self.boundary, self.torn = by_event(points)

    def after(self, tracer, event) -> None:
        point = self.boundary.get(event.index)
        if point is not None:
            self.take(point, self.ex.interposer.snapshot(), world_to_json(self.world))

    def before_write(self, tracer, write) -> bytes | None:
        points = self.torn.get(tracer.next_index, ())
        if points:
            base, world = self.ex.interposer.snapshot(), world_to_json(self.world)
            for point in points:
                self.take(point, {**base, write.path: write.torn(point.offset)}, world)
        return None


def record_corpus(make_agent: Callable, scenario: Scenario, out: str | Path, *,
                  agent: str, recorded_by: str | None = None, agent_version: str = "unknown",
                  seed: str = "0", timeout: float | None = FIXED_TIMEOUT,
                  only: Callable[[KillPoint], bool] | None = None) -> Corpus:
    """Write a corpus of `make_agent`'s durable state at each kill point of `scenario` to
    `out` (replacing what was there, atomically). `agent` is the factory later checks run
    by default (the project's agent); `recorded_by` the one that ran here, if another."""
    from .._version import __version__ as faultsim_version

    out = Path(out)
    staging = out.with_name(out.name + ".recording")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    source = Path(scenario.path).read_bytes()
    (staging / SCENARIO).write_bytes(source)
    corpus = Corpus(staging, scenario.id, sha256(source), agent, recorded_by or agent,
                    agent_version, [], faultsim_version)
    # Collected in memory: during the run the fake filesystem stands in for the real one.
    blobs: dict[str, bytes] = {}
    seen: dict[tuple, CorpusEntry] = {}

    def put(data: bytes) -> str:
        digest = sha256(data)
        blobs.setdefault(digest, data)
        return digest

    def take(point: KillPoint, files: dict, world: dict) -> None:
        names = {p: None if data is None else put(data) for p, data in sorted(files.items())}
        world_blob = put(json.dumps(world, sort_keys=True).encode())
        key = (tuple(names.items()), world_blob)
        if key in seen:
            seen[key].kill_points.append(point.id)
            return
        entry = CorpusEntry(point.id, [point.id], point.category, _format_version(files),
                            names, world_blob)
        seen[key] = entry
        corpus.entries.append(entry)

    with Explorer(make_agent, scenario, agent_name=recorded_by or agent, timeout=timeout,
                  seed=seed) as ex:
        points = [p for p in ex.golden().kill_points()
                  if p.index > 0 and (only is None or only(p))]
        ex.reset_sandbox()
        world = ex.new_world()
        run = ex.incarnation(world, _RecordAt(ex, world, points, take))
    if run.error is not None:
        raise RuntimeError(f"{scenario.path}: the recording run failed: {run.error}")
    for data in blobs.values():
        corpus.put_blob(data)
    versions = {json.dumps(e.format_version) for e in corpus.entries
                if e.format_version is not None}
    corpus.format_versions = [json.loads(v) for v in sorted(versions)]
    corpus.write_manifest()
    if out.exists():
        shutil.rmtree(out)
    staging.replace(out)
    corpus.path = out
    return corpus
