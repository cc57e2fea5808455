"""One kill point faultsim cannot judge does not end the sweep (issue 51 item 13): the
real-process backends' kill-point loop (faultsim.pipeline.crashes) tries a crash run that
missed its point or whose kill could not be proven landed once more, and a point that
fails twice is that point's finding (`kill_point_judged`: reported, counted, replayable);
the other points are judged as usual. The backend here is a stand-in with the loop's
interface: which points miss, and how often, is what is tested."""
from __future__ import annotations

import pytest

from faultsim.agent import Outcome
from faultsim.core.crashmodel import CrashState
from faultsim.killpoints import KillPoint
from faultsim.judge.oracle import Golden
from faultsim.pipeline.crashes import Found, Kill, sweep
from faultsim.pipeline.sweep import ResumeResult
from faultsim.world.ledger import Ledger

POINTS = [KillPoint(n, None, "after-write", f"k{n}-after-write", "") for n in (1, 2, 3)]


class Backend:
    """k2 never lands (the agent's course differs there each time: a second `mkdir` of a
    folder that exists fails); k3 misses its first try only (a kill under load)."""

    where = "scenario.toml: "

    def __init__(self, misses: dict[str, int]) -> None:
        self.misses, self.tries = misses, {}

    def crash(self, point):
        n = self.tries[point.id] = self.tries.get(point.id, 0) + 1
        if n <= self.misses.get(point.id, 0):
            return Kill(None, None, reached=False, landed=False, met="k1-after-write",
                        error="FileExistsError: [Errno 17] File exists: 'out'")
        return Kill(None, None, reached=True, landed=True)

    def states(self, point, kill):
        return [Found(CrashState.of("process", "every completed write", {}), ("process",),
                      "process")]

    def key(self, point, kill, found):
        return found.state, "world"

    def resume(self, point, kill, found):
        return ResumeResult([], None, None)

    def engine_point(self, point):
        return point


def test_a_point_that_misses_twice_is_its_finding_and_the_sweep_goes_on():
    golden = Golden(Outcome("completed", "Done."), Ledger(), {}, 0, [])
    backend = Backend({"k2-after-write": 99, "k3-after-write": 1})
    swept = sweep(backend, POINTS, golden)
    assert backend.tries == {"k1-after-write": 1, "k2-after-write": 2, "k3-after-write": 2}
    by_point = {j.point.id: j for j in swept.judged}
    assert list(by_point) == ["k1-after-write", "k2-after-write", "k3-after-write"]
    assert not by_point["k1-after-write"].violations
    assert not by_point["k3-after-write"].violations  # landed on its second try
    (finding,) = by_point["k2-after-write"].violations
    assert finding.invariant == "kill_point_judged"
    assert finding.explanation == (
        "scenario.toml: k2-after-write: the crash run never reached its kill point (it met "
        "k1-after-write; FileExistsError: [Errno 17] File exists: 'out'): the run is not "
        "deterministic (on a second try too)")
    assert swept.resumes == 1 and [p.id for p in swept.landed] == [  # k3 shares k1's run
        "k1-after-write", "k3-after-write"]  # the finding resumed nothing


# -- the in-process and subprocess backends: the same, on an agent ---------------------
ONE_CHARGE = "tests/data/one_charge.toml"
FLAKY_AT = "k9-after-model-response-state.json#2"  # a point in the middle of the run


def _flaky_at(monkeypatch, starts: int) -> None:
    """The agent's crash runs at FLAKY_AT (and only there) find a leftover folder on their
    first `starts` fresh starts: they end before the point comes."""
    import unjudged_agents

    from faultsim.inprocess.sandbox import Explorer

    monkeypatch.setitem(unjudged_agents.LEFTOVER, "starts", 0)  # none left after the test
    real, tries = Explorer.crash, []

    def crash(self, point, model, start=None):
        if point.id != FLAKY_AT:
            unjudged_agents.LEFTOVER["starts"] = 0
        elif not tries:  # its first crash run; a retry takes what is left
            unjudged_agents.LEFTOVER["starts"] = starts
        tries.extend([point.id] if point.id == FLAKY_AT else [])
        return real(self, point, model, start)

    monkeypatch.setattr(Explorer, "crash", crash)


def _failing(report) -> dict:
    (run,) = report.runs
    return {v.kill_point.id: [(x.invariant, x.explanation) for x in v.violations]
            for v in run.verdicts if v.violations}


def test_a_crash_run_that_misses_its_point_twice_in_process_is_its_finding(monkeypatch):
    from unjudged_agents import makes_its_folder

    from faultsim.inprocess.explore import explore

    _flaky_at(monkeypatch, 2)
    report = explore(makes_its_folder, ONE_CHARGE, workers=0)
    (run,) = report.runs
    assert len({v.kill_point.id for v in run.verdicts}) == len(run.kill_points)  # went on
    assert _failing(report) == {FLAKY_AT: [(
        "kill_point_judged", f"{FLAKY_AT} never came: the first incarnation ended with "
        "FileExistsError: [Errno 17] File exists: '/faultsim/sandbox'; the agent is not "
        "deterministic across runs (on a second try too)")]}


def test_a_crash_run_that_misses_its_point_once_is_judged_on_its_second_try(monkeypatch):
    from unjudged_agents import makes_its_folder

    from faultsim.inprocess.explore import explore

    _flaky_at(monkeypatch, 1)
    report = explore(makes_its_folder, ONE_CHARGE, workers=0)
    assert _failing(report) == {}


DIES_AT = "k21-after-model-response-state.json#4"  # resumed, it finds the final answer


@pytest.mark.parametrize("workers", [1, 2])
def test_a_forked_child_that_dies_is_its_points_finding_in_process(workers):
    """In-process, a forked child that dies without a verdict is its point's finding,
    naming what the agent did, and the other points are judged, the same on any worker
    count (not retried in process: subprocess mode, below, retries in a fresh process)."""
    from unjudged_agents import ends_its_process

    from faultsim.inprocess.explore import explore

    report = explore(ends_its_process, ONE_CHARGE, workers=workers)
    (run,) = report.runs
    assert len({v.kill_point.id for v in run.verdicts}) == len(run.kill_points)
    assert _failing(report) == {DIES_AT: [(
        "kill_point_judged", f"the process judging kill point {DIES_AT} exited with status 3 "
        "(did the agent end the process?) before it sent a verdict")]}


@pytest.mark.parametrize("workers", [0, 1, 2])
def test_a_subprocess_worker_that_dies_twice_is_its_points_finding(workers):
    """Subprocess mode: the resumed child SIGKILLs itself from one state, twice; the point
    is reported, the others judged, the same on any worker count."""
    from faultsim.real.explore import explore_subprocess
    from faultsim.scenario import load_scenario

    report = explore_subprocess("unjudged_agents:kills_itself", load_scenario(ONE_CHARGE),
                                workers=workers)
    (run,) = report.runs
    assert len({v.kill_point.id for v in run.verdicts}) == len(run.kill_points)
    assert _failing(report) == {DIES_AT: [(
        "kill_point_judged", "the resumed run after k21-after-model-response-state.json#4: "
        "the child process died without reporting: it ended by signal 9 (on a second try "
        "too)")]}


@pytest.mark.parametrize("workers", [0, 2])
def test_a_subprocess_kill_that_does_not_land_twice_is_its_points_finding(monkeypatch,
                                                                          workers):
    """Subprocess mode: the kill at one point is not proven landed (its copy, then its
    replay, did not die by SIGKILL: a machine under load); that point is reported after
    its second try, the others judged, the same on any worker count."""
    import dataclasses

    from faultsim.real.explore import explore_subprocess, survey_subprocess
    from faultsim.real.pool import ForkServers
    from faultsim.scenario import load_scenario

    real = ForkServers.run
    scenario = load_scenario(ONE_CHARGE)
    place = {p.id: (p.index, p.offset)
             for p in survey_subprocess("user_agents:make_agent", scenario)}

    def run(self, jobs, done=None):
        def unlanded(job, result):  # the kill at FLAKY_AT, seen as not landed
            if job.get("kill") == place[FLAKY_AT]:
                result = dataclasses.replace(result, how="exit", code=0)
            result.crashes = [dict(m, sigkilled=False) if tuple(m["point"]) ==
                              place[FLAKY_AT] else m for m in result.crashes]
            if done is not None:
                done(job, result)
            return result

        return {k: unlanded(next(j for j in jobs if j["id"] == k), r)
                for k, r in real(self, jobs, None).items()}

    monkeypatch.setattr(ForkServers, "run", run)
    report = explore_subprocess("user_agents:make_agent", scenario, workers=workers)
    (run_,) = report.runs
    assert len({v.kill_point.id for v in run_.verdicts}) == len(run_.kill_points)
    assert _failing(report) == {FLAKY_AT: [(
        "kill_point_judged", f"{FLAKY_AT}: the child reported a kill but ended by exit 0, "
        "not SIGKILL (on a second try too)")]}
