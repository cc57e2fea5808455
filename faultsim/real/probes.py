"""The version probe (P4) in subprocess mode: a real crash state with every checkpoint
rewritten to a version no release knows, resumed in a child, must be refused loudly and
left untouched.

Part of the subprocess backend: may import `pipeline/`, the oracle, `pool`, `jobs`,
`crashes` and `judging`."""
from __future__ import annotations

import pickle

from ..core.crashmodel import CrashState
from ..killpoints import KillPoint
from ..judge.oracle import Golden, unknown_version_refused
from ..pipeline.probes import PROBE_VERSION, tamper_versions
from ..pipeline.sweep import Sweep
from ..reports.report import ResumeSummary, Verdict
from ..scenario import Scenario
from .crashes import Target, crash_targets
from .jobs import new_job, report_of
from .judging import crash_run_of
from .pool import ForkServers


def version_probe(pool: ForkServers, scenario: Scenario, golden: Golden) -> Verdict | None:
    """P4, as in-process: the crash state after the second completed turn with every
    checkpoint rewritten with a version no release can know (a file, an SQLite row, a Redis
    value) must be refused loudly and left untouched. None when there is none to rewrite."""
    marks = [e.index for e in golden.trace if e.kind == "mark.checkpoint.B"]
    index = marks[min(1, len(marks) - 1)] if marks else len(golden.trace) // 2
    point = KillPoint(index, None, "version-probe", "probe-unknown-version",
                      f"#{index}, every checkpoint rewritten with version {PROBE_VERSION}")
    target = Target(("probe",), Sweep(golden, {}), [point])
    crash_targets(pool, [target], False, 0.0)
    world_bytes, files = target.crashed[point.id]
    changed = tamper_versions(files, golden.checkpoint)
    if not changed:
        return None
    state = CrashState.of("process", f"checkpoint version set to {PROBE_VERSION}",
                          {**files, **changed})
    result = pool.run([new_job(("probe",), files=state.as_dict(), world=world_bytes,
                               downtime=scenario.profile.downtime)])[("probe",)]
    report = report_of(result, "the version probe's resumed run")
    before = pickle.loads(world_bytes)
    crash_run = crash_run_of([point], state, report, result)
    world = crash_run.world
    applied = len(world.ledger.applied()) - len(before.ledger.applied())
    asked = (sum(1 for q in world.model.requests if q.ok) -
             sum(1 for q in before.model.requests if q.ok))
    violation = unknown_version_refused(crash_run, PROBE_VERSION, changed, applied, asked)
    violations = [violation] if violation is not None else []
    return Verdict(point, "process", "a checkpoint from a future release", violations, state,
                   ResumeSummary.of(crash_run) if violations else None, golden, 0)
