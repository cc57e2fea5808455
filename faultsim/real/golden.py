"""The clean run in subprocess mode: two real runs of the agent, checked to agree
(`golden_checked`), giving the kill points and the oracle's `Golden`; their durations set
the resumed runs' time limit.

Part of the subprocess backend: may import `pipeline/`, the oracle, `pool` and `jobs`."""
from __future__ import annotations

import pickle

from ..killpoints import register_phases
from ..judge.oracle import Golden
from ..pipeline.golden import CleanRun, golden_checked, routed_only
from ..pipeline.incarnation import resumed_limit
from ..scenario import Scenario
from .jobs import new_job, report_of, with_refused
from .pool import ForkServers


def golden_of(pool: ForkServers, scenario: Scenario) -> Golden:
    results = pool.run([new_job(("golden", 1), timed=True),
                        new_job(("golden", 2), timed=True)])

    def clean_run(n: int) -> CleanRun:
        result = results[("golden", n)]
        report = report_of(result, "the clean run")
        register_phases(report.get("phases", {}))  # read its trace as the agent's process would
        outcome = report["outcome"] if report["kind"] == "done" else None  # else killed
        return CleanRun(outcome, report.get("error"), report["events"],
                        (report["world"], result.files), details=report.get("details", ""),
                        world=with_refused(pickle.loads(report["world"]), result),
                        files=result.files, left_behind=tuple(result.left_behind),
                        escapes=report.get("escapes", []),
                        contract=report.get("contract"))

    first = golden_checked(scenario, clean_run, pool.workdir)
    pool.timeout = resumed_limit(pool.asked_timeout,
                                 [results[("golden", n)].report.get("seconds", 0.0)
                                  for n in (1, 2)])
    world, files = first.kept
    world = pickle.loads(world)
    routed_only(scenario, world, first.outcome)
    return Golden.of(first.outcome, world, files, first.events, scenario.checkpoint,
                     scenario.profile.torn_cuts)
