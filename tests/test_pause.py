"""The pause crash model (issue 55): an incarnation frozen at a kill point, a new one run
on the same files and world, the frozen one woken at the new one's first request, after
each of its checkpoint saves or at its end. Proven on agents written as users write them
(tests/pause_agents.py): one that trusts it is the only writer fails, one with a lease and
a fencing token passes."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

import faultsim
from faultsim.inprocess.pause import Driver, Wake, explore_pause, pause_points
from faultsim.inprocess.sandbox import Explorer
from faultsim.settings.options import crash_models
from faultsim.scenario import load_scenario

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
import pause_agents  # noqa: E402

SCENARIO = HERE / "data" / "pause_charge.toml"


def _explore(agent):
    with Explorer(agent, load_scenario(SCENARIO)) as ex:
        golden = ex.golden()
        return golden, explore_pause(ex, golden, golden.kill_points())


def test_all_is_process_and_power_and_pause_is_asked_by_name():
    assert crash_models("all") == ["process", "power"]
    assert crash_models("pause") == ["pause"]
    with pytest.raises(ValueError, match="process, power, pause or all"):
        crash_models("freeze")


def test_the_pause_lands_and_both_incarnations_run():
    """The paused incarnation holds at its point (the new one runs meanwhile) and is
    woken where asked: counted before anything is judged."""
    with Explorer(pause_agents.naive, load_scenario(SCENARIO)) as ex:
        golden = ex.golden()
        point = next(p for p in golden.kill_points() if p.id == "k4-start-state.json#1")
        run = Driver(ex, golden).run(point, Wake("request"))
    # the paused one stopped exactly at the point: its trace up to it is the clean run's
    assert [e.kind for e in run.paused.events[:4]] == [e.kind for e in golden.trace[:4]]
    assert run.woke and run.held_at == 0  # the new one was held at its first request
    assert run.paused.done and run.new.done
    # the woken one's events after the point came after the new one was held
    assert run.paused.events[4].kind == "model.response"
    assert len(run.world.ledger.entries) == 2  # both charged: each asked the model


def test_naive_agent_fails_with_both_traces_side_by_side():
    golden, judged = _explore(pause_agents.naive)
    failed = {v.invariant for _, vs in judged for v in vs}
    assert {"effects_exactly_once", "checkpoint_not_rolled_back"} <= failed
    text = next(v.explanation for _, vs in judged for v in vs
                if v.invariant == "checkpoint_not_rolled_back")
    assert "paused incarnation (woken)" in text and "| new incarnation" in text
    assert "---- PAUSED at" in text and "---- WOKEN at the new one's" in text
    # wake points enumerated: the first request, each save, the end
    wakes = {r.wake.kind for r, _ in judged}
    assert wakes == {"request", "save", "end"}


def test_fenced_agent_passes_every_schedule():
    golden, judged = _explore(pause_agents.fenced)
    assert judged and all(not vs for _, vs in judged), [
        (r.point.id, r.wake.label, vs[0].explanation) for r, vs in judged if vs][:1]
    # a woken incarnation that lost its lease stopped: a legal end, and it happened
    assert any((r.paused.result.error or "").startswith("LeaseLost") for r, _ in judged)
    assert len({r.point.id for r, _ in judged}) == len(pause_points(golden.kill_points()))


def test_same_schedules_same_verdicts():
    a = [(r.point.id, r.wake.label, [v.explanation for v in vs])
         for r, vs in _explore(pause_agents.naive)[1]]
    b = [(r.point.id, r.wake.label, [v.explanation for v in vs])
         for r, vs in _explore(pause_agents.naive)[1]]
    assert a == b


def test_explore_runs_pause_beside_process():
    report = faultsim.explore(pause_agents.naive, str(SCENARIO),
                              crash_model=["process", "pause"], workers=0)
    runs = {r.crash_model: r for r in report.runs}
    assert not [v for v in runs["process"].verdicts if v.violations]
    assert [v for v in runs["pause"].verdicts if v.violations]


# -- the reference agent and its P13 mutants (tests/data/pause_ref.toml) -------------------
REF = HERE / "data" / "pause_ref.toml"


def _ref(module: str):
    import importlib

    with Explorer(importlib.import_module(module).make_agent, load_scenario(REF)) as ex:
        golden = ex.golden()
        return explore_pause(ex, golden, golden.kill_points())


def test_reference_agent_passes_every_pause_schedule():
    judged = _ref("reference_agent.agent")
    assert len(judged) > 400 and not [vs for _, vs in judged if vs], next(
        (r.point.id, r.wake.label, vs[0].explanation) for r, vs in judged if vs)
    # its stale incarnations did stop as superseded (the check was exercised, and won)
    stopped = [r for r, _ in judged if r.paused.result.outcome is not None
               and r.paused.result.outcome.status == "superseded"]
    assert stopped


@pytest.mark.parametrize("mutant", ["no_ownership", "unfenced_save", "fenced_effect_only"])
def test_each_ownership_mutant_fails_with_both_traces(mutant):
    judged = _ref(f"reference_agent.mutants.{mutant}")
    failed = [v for _, vs in judged for v in vs]
    assert {"checkpoint_not_rolled_back"} <= {v.invariant for v in failed}
    assert all("paused incarnation (woken)" in v.explanation for v in failed)


def test_ownership_mutants_pass_a_process_crash():
    """P13's mutants break nothing a crash that ends the old incarnation can see."""
    from reference_agent.mutants import unfenced_save

    report = faultsim.explore(unfenced_save.make_agent, str(REF), crash_model="process",
                              workers=0)
    assert not [v for r in report.runs for v in r.verdicts if v.violations]


def test_a_store_without_owns_counts_as_owning(tmp_path):
    """A user's store class written before P13 (tests/broken_agents.py's SQLite ones) has
    no `owns`: the reference agent's check counts it as owning (unguarded, as before P13)
    instead of failing every step with an AttributeError. The reference store, by
    contrast, refuses once another writer moved the checkpoint on."""
    from types import SimpleNamespace

    from reference_agent.agent import Agent
    from reference_agent.checkpoint import Checkpoint, CheckpointStore, OwnershipLost

    class OwnStore:  # load and save only, as users wrote them before P13
        def load(self):
            return None

        def save(self, checkpoint):
            pass

    env = SimpleNamespace(client=None, clock=None, task="t", task_id="t1",
                          workdir=str(tmp_path))
    agent = Agent(env)
    agent.store = OwnStore()
    agent.owns("effect")  # no AttributeError, no OwnershipLost
    agent.store = CheckpointStore(tmp_path / "checkpoint.json")
    assert agent.store.load() is None
    agent.owns("effect")  # nothing saved since this one read: still its own
    other = CheckpointStore(tmp_path / "checkpoint.json")
    other.load()
    other.save(Checkpoint.new("t"))  # another incarnation saves
    with pytest.raises(OwnershipLost):
        agent.owns("effect")


def test_a_pause_counterexample_replays_from_its_token():
    """The token carries the pause point and the wake point (its `order`): a replay runs
    that one schedule and finds the sweep's violations; on the fenced agent (a fix) the
    same schedule passes."""
    from faultsim.token import ReplayToken

    report = faultsim.explore(pause_agents.naive, str(SCENARIO), crash_model="pause",
                              workers=0)
    (run,) = report.runs
    failed = [v for v in run.verdicts if v.violations]
    assert failed
    doc = run.to_json()
    assert doc["violations"] and all(
        v["token"] and v["replay"] == f"faultsim replay {v['token']}"
        for v in doc["violations"])
    for verdict in failed:
        token = verdict.token(run)
        assert ReplayToken.decode(token).crash_model == "pause"
        again = faultsim.replay(token, make_agent=pause_agents.naive)
        assert again.verdict.order == verdict.order
        assert again.verdict.kill_point.id == verdict.kill_point.id
        assert {v.invariant for v in again.violations} == \
            {v.invariant for v in verdict.violations}, (verdict.kill_point.id, verdict.order)
        assert faultsim.replay(token, make_agent=pause_agents.fenced).ok
    shown = "\n".join(ReplayToken.decode(failed[0].token(run)).show("x"))
    assert "woken at the new incarnation's" in shown


# -- --shard and --coverage representative (issue 55, item 5) -----------------------------
def _pause_run(scenario, **kw):
    (run,) = faultsim.explore(pause_agents.naive, str(scenario), crash_model="pause",
                              workers=0, **kw).runs
    return run


def _schedules(run):
    return [(v.kill_point.id, v.order, sorted(x.invariant for x in v.violations))
            for v in run.verdicts]


def test_shards_partition_the_pause_schedules():
    """Each shard runs the schedules of its share of the pause points; no verdict is
    shared between schedules, so the shards' union is the whole run's, schedule by
    schedule (the long way beside the short)."""
    whole = _pause_run(SCENARIO)
    shards = [_pause_run(SCENARIO, shard=(i, 3)) for i in (1, 2, 3)]
    parts = [_schedules(s) for s in shards]
    assert all(parts) and sorted(sum(parts, [])) == sorted(_schedules(whole))
    points = [{p for p, _, _ in part} for part in parts]
    assert not (points[0] & points[1] or points[0] & points[2] or points[1] & points[2])
    assert all(s.to_json()["shard"]["by"] == "kill point" for s in shards)


def test_representative_coverage_runs_the_schedules_of_its_points():
    """Representative coverage keeps the pause points of the kill points it covers (fewer
    on a four-turn task), and each of their schedules is judged as the whole run judges
    it; the run says what it covered."""
    long = HERE / "data" / "pause_long.toml"
    whole = _pause_run(long)
    rep = _pause_run(long, coverage="representative", per_class=0)
    assert rep.coverage is not None and rep.coverage.mode == "representative"
    chosen = {p.id for p in rep.explored}
    assert 0 < len(chosen) < len(whole.explored)
    assert _schedules(rep) == [s for s in _schedules(whole) if s[0] in chosen]
    assert [v for v in rep.verdicts if v.violations]  # the naive agent still fails


def test_a_collection_inside_the_hold_window_does_not_crash_the_interpreter():
    """On CPython 3.11 a garbage collection run while `hold_on_return`'s profile function is
    installed crashed the interpreter (SIGSEGV in the profile function at a "return"
    event): first seen under pytest on the no_ownership mutant's pause sweep of
    pause_ref_small.toml. A low collection threshold makes a collection land in that window
    every time (this script died with signal 11 before the fix); faultsim keeps the
    collector off for the window. Run in a child process, so a crash fails this test
    instead of the worker."""
    import subprocess

    root = Path(__file__).resolve().parents[1]
    script = (
        "import gc, faultsim\n"
        "from reference_agent.mutants import no_ownership\n"
        "gc.set_threshold(50)\n"
        "r = faultsim.explore(no_ownership.make_agent, 'tests/data/pause_ref_small.toml',\n"
        "                     crash_model='pause', workers=0)\n"
        "print(len(r.runs[0].verdicts),\n"
        "      sum(1 for v in r.runs[0].verdicts if v.violations))\n")
    proc = subprocess.run([sys.executable, "-c", script], cwd=root, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-2000:])
    schedules, failed = map(int, proc.stdout.split())
    # the sweep ran its schedules (the window was entered) and still finds the mutant
    assert schedules > 100 and failed > 0, proc.stdout
