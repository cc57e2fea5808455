"""The pause crash model in subprocess mode (issue 55): two real incarnations of the agent,
children of one fork server, the first SIGSTOPped at its point, the second run on the same
directory and the same world, the first SIGCONTed at the second's wake point
(faultsim/real/pause.py, faultsim/real/pause_server.py).

Each claim is counted before it is trusted: the stops that landed (each incarnation proven
stopped at its point) come first; then the verdicts, schedule by schedule against the
in-process model on the same scenario; then that no process, stopped or alive, outlives a
schedule on any of its exit paths, faultsim's own death included.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid

import pytest

import faultsim
from faultsim.errors import KillDidNotLand, StopCameLate, WorkerDied
from faultsim.killpoints import KillPoint
from faultsim.pipeline.pause import Wake, pause_points
from faultsim.real.explore import explore_subprocess
from faultsim.real.pool import MARKER, ForkServers, JobResult
from faultsim.scenario import load_scenario

from conftest import DATA, ROOT

sys.path.insert(0, str(ROOT / "tests"))
import pause_agents  # noqa: E402

REF = DATA / "pause_ref_small.toml"
MUTANTS = DATA / "pause_ref.toml"  # test_pause.py's: the in-process sweep of each mutant
CHARGE = DATA / "pause_charge.toml"
linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="uses /proc")


def _by_schedule(run) -> dict:
    return {(v.kill_point.id, v.order): sorted(x.invariant for x in v.violations)
            for v in run.verdicts}


def _in_process(agent, scenario, only=None):
    report = faultsim.explore(agent, str(scenario), crash_model="pause", workers=0,
                              only=only)
    return report.runs[0]


def _subprocess(spec, scenario, only=None):
    stats: dict = {}
    report = explore_subprocess(spec, load_scenario(scenario), crash_model="pause",
                                workers=2, only=only, stats=stats)
    (run,) = report.runs
    assert run.crash_model == "pause" and run.mode == "subprocess"
    return run, stats


def _stops_landed(run, stats) -> None:
    """Counted first: every schedule stopped its paused incarnation at its point (one
    SIGSTOP each, proven), and each schedule held at a wake point stopped the new one too;
    no group was left behind."""
    judged = len(run.verdicts)
    woken_at_end = sum(1 for v in run.verdicts if v.order == Wake("end").order)
    assert stats["pause_schedules"] >= judged > 0
    assert stats["pause_stops"] == stats["pause_schedules"] + (judged - woken_at_end)
    assert stats["pause_left"] == 0
    assert any("SIGSTOPs landed" in note for note in run.notes)


# -- the reference agent passes, its ownership mutants fail, as in process --------------
@linux
def test_reference_agent_passes_every_pause_schedule_as_in_process():
    from reference_agent.agent import make_agent

    run, stats = _subprocess("reference_agent.agent:make_agent", REF)
    _stops_landed(run, stats)
    assert len(run.explored) == len(pause_points(run.kill_points))
    assert not [v for v in run.verdicts if v.violations], next(
        v.violations[0].explanation for v in run.verdicts if v.violations)
    # the same schedules, judged the same, as the in-process model's
    assert _by_schedule(run) == _by_schedule(_in_process(make_agent, REF))


def _failing_points(run, n: int = 2) -> list[str]:
    points = []
    for v in run.verdicts:
        if v.violations and v.kill_point.id not in points:
            points.append(v.kill_point.id)
    return points[:n]


@linux
# no_ownership only: unfenced_save and fenced_effect_only cost a minute more each here
# (their schedule-for-schedule agreement on every schedule of pause_ref_small.toml was
# checked by hand with this file's helpers; the report of branch h-spause5 says so)
@pytest.mark.parametrize("mutant", ["no_ownership"])
def test_the_ownership_mutant_fails_with_both_traces_as_in_process(mutant):
    import importlib

    module = importlib.import_module(f"reference_agent.mutants.{mutant}")
    # on pause_ref.toml, as test_pause.py (the in-process sweep of a mutant on
    # pause_ref_small.toml dies by SIGSEGV under pytest, in inprocess/pause.py's profile
    # hook: an in-process matter, left to its own fix)
    inproc = _in_process(module.make_agent, MUTANTS)
    # the first pause points where the in-process model finds it out (the whole sweep of
    # each mutant costs minutes here; the reference agent's covers the machinery)
    chosen = _failing_points(inproc)
    assert chosen
    only = lambda kp: kp.id in chosen  # noqa: E731
    run, stats = _subprocess(f"reference_agent.mutants.{mutant}:make_agent", MUTANTS, only)
    _stops_landed(run, stats)
    failed = [x for v in run.verdicts for x in v.violations]
    assert "checkpoint_not_rolled_back" in {x.invariant for x in failed} or \
        "effects_exactly_once" in {x.invariant for x in failed}
    text = failed[0].explanation
    assert "paused incarnation (woken)" in text and "| new incarnation" in text
    assert "---- PAUSED at" in text and "---- WOKEN at the new one's" in text
    expected = {k: v for k, v in _by_schedule(inproc).items() if k[0] in chosen}
    assert _by_schedule(run) == expected


@linux
def test_an_agent_written_as_users_write_them_is_judged_as_in_process():
    """tests/pause_agents.py's naive agent (no lease) on its own scenario: every pause
    schedule, the same verdicts as in process, both rules it breaks found."""
    run, stats = _subprocess("pause_agents:naive", CHARGE)
    _stops_landed(run, stats)
    found = _by_schedule(run)
    assert found == _by_schedule(_in_process(pause_agents.naive, CHARGE))
    assert {"effects_exactly_once", "checkpoint_not_rolled_back"} <= {
        i for v in found.values() for i in v}


@linux
def test_a_pause_counterexample_replays_from_its_token():
    from faultsim.replayer import replay

    run, _ = _subprocess("pause_agents:naive", CHARGE,
                         lambda kp: kp.id == "k4-start-state.json#1")
    verdict = next(v for v in run.verdicts if v.violations)
    again = replay(verdict.token(run))
    assert again.verdict.kill_point.id == verdict.kill_point.id
    assert again.verdict.order == verdict.order
    assert sorted(x.invariant for x in again.violations) == \
        sorted(x.invariant for x in verdict.violations)


def test_the_backend_no_longer_refuses_pause_and_lists_it():
    from faultsim.backends import Agent, backend
    from faultsim.settings.options import ExploreOptions

    scenario = load_scenario(CHARGE)
    assert backend("subprocess").refuses(
        Agent("pause_agents:naive"), scenario,
        ExploreOptions(crash_model="pause", mode="subprocess"), "explore") is None
    resolved = ExploreOptions(crash_model=["process", "pause"],
                              mode="subprocess").resolve(scenario)
    assert resolved.models == ["process", "pause"]
    with pytest.raises(faultsim.errors.SubprocessModeError, match="power"):
        ExploreOptions(crash_model="all", mode="subprocess").resolve(scenario)


# -- the proofs: a stop not proven at its point is never judged -----------------------------
def _result(out: dict) -> JobResult:
    return JobResult(out, "exit", 0, {})


def _held(n: int, **extra) -> dict:
    from faultsim.core.trace import Event

    return {"kind": "held", "where": f"after event #{n}", "saves": [],
            "events": [Event(i, "fs.write", "x") for i in range(1, n + 1)], **extra}


def _report(reports: dict, error=None) -> dict:
    return {"kind": "pause", "reports": reports, "error": error, "stops": 1, "woke": True,
            "held_at": None, "left": 0}


@pytest.mark.parametrize("case", ["past", "late", "not-stopped", "never", "crashed"])
def test_a_stop_not_proven_at_its_point_is_an_error_never_a_verdict(case):
    from faultsim.real.pause import run_of

    point = KillPoint(3, None, "x", "k3", "x")
    scenario = load_scenario(CHARGE)
    reports = {"paused": [_held(3)]}
    error = None
    expected: type = StopCameLate
    if case == "past":  # its report ran past the point before it stopped
        reports = {"paused": [_held(4)]}
    elif case == "late":  # a thread of its own traced an event between report and stop
        reports = {"paused": [_held(3), {"kind": "done", "late": "1 events traced after"}]}
    elif case == "not-stopped":
        error = ("not-stopped", "a process of its group did not stop")
    elif case == "never":
        reports, error, expected = {"paused": [{"kind": "done", "events": []}]}, (
            "never-reached", "it ended"), KillDidNotLand
    else:
        reports, error, expected = {"paused": [{"kind": "crashed", "error": "boom"}]}, (
            "never-reached", "its process failed"), WorkerDied
    with pytest.raises(expected):
        run_of(point, Wake("end"), _result(_report(reports, error)), scenario)


# -- the world handed over with the turn ----------------------------------------------------
def test_a_world_adopts_another_in_place_keeping_what_the_agent_holds():
    import copy

    from faultsim.world.snapshot import world_to_json

    scenario = load_scenario(DATA / "tiny.toml")
    mine = scenario.build_world()
    held = mine.services["payments"]  # what an agent keeps
    seen = []
    mine.subscribe(lambda kind, **info: seen.append(kind))
    theirs = copy.deepcopy(mine)
    theirs.begin_incarnation()
    theirs.clock.advance(90)
    theirs.services["payments"].submit({"cents": 5}, key="k-1")
    theirs.services["records"].apply("CUST-1", {"refund": "ORD-7"})
    expected = world_to_json(theirs)
    mine.adopt(theirs)  # `theirs` is consumed (in the child: a copy just unpickled)
    assert world_to_json(mine) == expected
    assert mine.services["payments"] is held and held._world is mine
    # an effect through what the agent held lands in the adopted ledger, tagged with the
    # adopted incarnation, and is seen by this world's observers (its trace)
    held.submit({"cents": 7}, key="k-2")
    assert [e.key for e in mine.ledger.entries] == \
        [e["key"] for e in expected["ledger"]] + ["k-2"]
    assert mine.ledger.entries[-1].incarnation == theirs.incarnation
    assert seen and seen[-1] == "effect.applied"


# -- no process is left behind, stopped or alive --------------------------------------------
def _marked(marker: str) -> dict[int, str]:
    """Live processes carrying `marker`: pid -> scheduler state (T: stopped)."""
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                if f"{MARKER}={marker}".encode() not in f.read().split(b"\0"):
                    continue
            with open(f"/proc/{entry}/stat", "rb") as f:
                state = f.read().rsplit(b")", 1)[1].split()[0].decode()
        except OSError:
            continue
        if state != "Z":
            found[int(entry)] = state
    return found


@linux
def test_every_exit_path_of_a_schedule_leaves_no_process(monkeypatch):
    """A schedule that ran through, one whose wake point never came (the paused one left
    stopped: continued, then killed), one whose pause point never came: after each, only
    the fork server is left, and nothing is stopped."""
    from faultsim.real.golden import golden_of
    from faultsim.real.pause import pause_job, run_of

    marker = f"{os.environ.get(MARKER, 'test')}-{uuid.uuid4().hex[:8]}"
    monkeypatch.setenv(MARKER, marker)
    scenario = load_scenario(CHARGE)
    with ForkServers("pause_agents:naive", str(CHARGE), workers=1) as pool:
        golden = golden_of(pool, scenario)
        point = next(p for p in golden.kill_points() if p.id == "k4-start-state.json#1")
        beyond = KillPoint(10_000, None, "x", "k10000", "x")
        cases = [(point, Wake("request")), (point, Wake("save", 99)), (beyond, Wake("end"))]
        for p, wake in cases:
            job = pause_job(p, wake, scenario.profile.downtime)
            result = pool.run([job])[job["id"]]
            assert set(_marked(marker)) == set(pool.pids())
            assert "T" not in _marked(marker).values()
            if p is beyond:
                with pytest.raises(KillDidNotLand):
                    run_of(p, wake, result, scenario)
            else:
                r = run_of(p, wake, result, scenario)
                assert r.woke == (wake.kind == "request") and r.left == 0
                assert r.stops == (2 if r.woke else 1)
    assert _marked(marker) == {}


@linux
@pytest.mark.parametrize("how", [signal.SIGKILL, signal.SIGINT])
def test_faultsim_dying_while_an_incarnation_is_stopped_leaves_no_process(how):
    """faultsim killed (or interrupted) while a schedule's paused incarnation is stopped:
    its fork server continues and kills both incarnations, and exits."""
    marker = f"{os.environ.get(MARKER, 'test')}-{uuid.uuid4().hex[:8]}"
    env = {**os.environ, MARKER: marker,
           "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests")])}
    with tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "faultsim.cli", "run", str(CHARGE), "--agent",
             "pause_agents:naive", "--mode", "subprocess", "--crash-model", "pause",
             "--workers", "1"], cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=err,
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        try:
            deadline = time.monotonic() + 120
            while "T" not in _marked(marker).values():
                assert proc.poll() is None and time.monotonic() < deadline, \
                    "no incarnation was ever seen stopped"
                time.sleep(0.01)
            proc.send_signal(how)
            proc.wait(30)
            deadline = time.monotonic() + 20
            while _marked(marker) and time.monotonic() < deadline:
                time.sleep(0.05)
            assert _marked(marker) == {}
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
