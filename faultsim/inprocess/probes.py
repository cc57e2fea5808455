"""Tampered-checkpoint probes of the in-process mode: P4, a checkpoint whose version this
code cannot know must be refused loudly and left untouched."""
from __future__ import annotations

from ..core.crashmodel import CrashState
from ..killpoints import KillPoint
from ..judge.oracle import Golden, Violation, unknown_version_refused
from ..pipeline.probes import PROBE_VERSION, tamper_versions
from ..reports.report import ResumeSummary, Verdict
from .sandbox import Explorer

__all__ = ["PROBE_VERSION", "version_probe"]


def version_probe(ex: Explorer, golden: Golden, forked: bool = False) -> Verdict | None:
    """P4: a checkpoint whose version this code cannot know (a newer release wrote it, then
    a rollback) must be refused loudly and left untouched. Taken from the crash state after
    the second completed turn; skipped when the agent keeps no versioned checkpoint.json.
    `forked`: the resume runs in a forked child (`isolated`), as the sweep's do, so that an
    agent that ends its process on resume makes this probe's finding, not faultsim's end."""
    marks = [e.index for e in golden.trace if e.kind == "mark.checkpoint.B"]
    index = marks[min(1, len(marks) - 1)] if marks else len(golden.trace) // 2
    point = KillPoint(index, None, "version-probe", "probe-unknown-version",
                      f"#{index}, every checkpoint.json rewritten with version "
                      f"{PROBE_VERSION}")
    crashed = ex.crash(point, "process")
    world, files = crashed.world, crashed.states[0].as_dict()
    changed = tamper_versions(files, golden.checkpoint)
    if not changed:
        return None
    state = CrashState.of("process", f"checkpoint version set to {PROBE_VERSION}",
                          {**files, **changed})

    def judged() -> tuple[list[Violation], ResumeSummary | None]:
        effects_before = len(world.ledger.applied())
        asked_before = sum(1 for q in world.model.requests if q.ok)
        run = ex.resume(world, state, [point])
        applied = len(world.ledger.applied()) - effects_before
        asked = sum(1 for q in world.model.requests if q.ok) - asked_before
        violation = unknown_version_refused(run, PROBE_VERSION, changed, applied, asked)
        return ([violation], ResumeSummary.of(run)) if violation is not None else ([], None)

    if not forked:
        violations, summary = judged()
    else:
        from ..errors import WorkerDied
        from .isolated import death, in_child

        limit = 3 * ex.timeout + 5 if ex.timeout else None
        try:
            violations, summary = in_child(judged, limit)
        except WorkerDied as died:
            status = getattr(died, "status", 0)
            how = (f"the process judging kill point {point.id} did not finish within "
                   f"{limit:g} s and was stopped") if status == -1 else death(status, point)
            violations, summary = [Violation.of("kill_point_judged", how)], None
    return Verdict(point, "process", "a checkpoint from a future release", violations, state,
                   summary, golden, 0)
