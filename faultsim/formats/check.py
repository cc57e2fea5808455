"""Check a corpus: every entry, loaded by the agent's current code in the world it was left
in, must resume to completion (or an explicit escalation) and pass the oracle."""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from .. import backends
from ..core.crashmodel import CrashState
from ..killpoints import KillPoint
from ..settings.options import FIXED_TIMEOUT
from ..judge.oracle import Violation
from ..pipeline.sweep import schedule_violations
from ..scenario import load_scenario
from ..world.snapshot import SnapshotError, restore_world
from .corpus import Corpus, CorpusEntry, CorpusError


@dataclass
class EntryVerdict:
    entry: CorpusEntry
    violations: list[Violation]
    resume: Any  # ResumeSummary of a failing entry: its ledger, outcome, error

    @property
    def ok(self) -> bool:
        return not self.violations

    def describe(self) -> str:
        e = self.entry
        lines = [f"entry {e.id} (format version {e.format_version}, {e.category}; "
                 f"{len(e.kill_points)} kill point{'s' if len(e.kill_points) > 1 else ''})"]
        lines += [f"VIOLATED {v.invariant} ({v.rule}): {v.explanation}"
                  for v in self.violations]
        if self.resume is not None:
            if self.resume.error:
                lines.append(f"resumed run failed: {self.resume.error}")
            elif self.resume.outcome is not None:
                lines.append(f"resumed run ended: {self.resume.outcome.status}")
        return "\n".join(lines)


def check_corpus(make_agent: Callable, corpus: str | Path | Corpus, *, seed: str = "0",
                 timeout: float | None = FIXED_TIMEOUT,
                 progress: Callable[[int, int], None] | None = None) -> list[EntryVerdict]:
    corpus = corpus if isinstance(corpus, Corpus) else Corpus.open(corpus)
    scenario = load_scenario(corpus.scenario_path)
    # Read everything first: inside the explorer the fake filesystem stands in for the disk.
    loaded = []
    for entry in corpus.entries:
        files = {p: None if d is None else corpus.blob(d) for p, d in entry.files.items()}
        try:
            world = json.loads(corpus.blob(entry.world))
        except ValueError as exc:
            raise CorpusError(corpus.path / "blobs" / entry.world, f"entry {entry.id}",
                              f"its world is not JSON: {exc}") from None
        loaded.append((entry, files, world))
    verdicts = []
    # the in-process backend's sandbox (faultsim.inprocess.formats_job), through the seam
    with backends.formats(make_agent, scenario, seed=seed, timeout=timeout,
                          name=corpus.agent) as sandbox:
        # what the current code does clean: the oracle's reference (every service aside)
        golden = sandbox.golden()
        for n, (entry, files, stored_world) in enumerate(loaded):
            state = CrashState.of("process", f"recorded at {entry.id}", files)
            try:
                world = restore_world(scenario.build_world(), stored_world)
            except (SnapshotError, KeyError, TypeError, ValueError) as exc:
                raise CorpusError(corpus.path / "blobs" / entry.world, f"entry {entry.id}",
                                  f"its world does not restore: {exc}") from None
            point = KillPoint(0, None, entry.category, entry.id, "a recorded state")
            result = sandbox.judge(golden, world, state, point)
            violations = schedule_violations(golden, [point], state, result, [])
            verdicts.append(EntryVerdict(entry, violations, result.summary))
            if progress is not None:
                progress(n + 1, len(loaded))
    return verdicts
