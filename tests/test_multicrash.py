"""Schedules of several crashes: the exhaustive pair sweep, the hypothesis search and
strategies, replay tokens. Each double-crash mutant survives every single crash and is
caught with a schedule of exactly two; the reference agent passes every pair."""
from __future__ import annotations

import importlib
import json

import pytest
from hypothesis import HealthCheck, given, settings

import reference_agent
from faultsim import (CATEGORIES, Crash, ReplayToken, Schedule, Session, TokenError, explore,
                      replay, search)
from faultsim import strategies as fst
from faultsim.cli import main
from faultsim.inprocess.pairs import sweep_pairs as _sweep_pairs
from faultsim.inprocess.replaying import sweep_replaying as _sweep_replaying
from faultsim.inprocess.sandbox import Explorer
from faultsim.pipeline.sweep import Sweep as _Sweep
from faultsim.killpoints import kill_points
from reference_agent.mutants import DOUBLE_CRASH_NAMES

from conftest import DATA

PAIR = str(DATA / "pair.toml")


def mutant(name):
    return importlib.import_module(f"reference_agent.mutants.{name}")


def deep(report):
    return [(v.invariant, [p.id for p in f.schedule]) for run in report.runs
            for f in run.failures for v in f.violations]


@pytest.fixture(scope="module")
def pair():
    from faultsim import load_scenario

    return load_scenario(PAIR)


# -- the exhaustive pair sweep -----------------------------------------------------------
def test_repeat_before_save_passes_one_crash_fails_two_and_repeats_exactly(pair):
    module = mutant("repeat_before_save")
    single = explore(module.make_agent, pair, crashes=1)
    assert single.ok and single.runs[0].depths == {}
    first = explore(module.make_agent, pair, crashes=2, seed="7")
    run = first.runs[0]
    assert not first.ok and all(v.ok for v in run.verdicts)  # singles pass: pairs catch it
    assert run.deep_failures and all(len(f.schedule) == 2 for f in run.deep_failures)
    assert {v.invariant for f in run.deep_failures for v in f.violations} == \
        {"effects_exactly_once"}
    text = first.counterexamples(limit=1)[0]
    assert "schedule of 2 crashes:" in text and "crash 2, in resumed run 1:" in text
    assert "email.send" in text and "applied 2 times, the clean run 1" in text
    assert "trace of resumed run 1 (its clean course) around crash 2:" in text
    assert "replay: faultsim replay fs1_" in text
    second = explore(module.make_agent, pair, crashes=2, seed="7")
    assert deep(second) == deep(first)
    assert second.counterexamples(limit=5) == first.counterexamples(limit=5)
    # the token replays exactly that schedule, with the same verdict and text
    verdict = run.deep_failures[0]
    again = replay(verdict.token(run))
    assert [p.id for p in again.schedule] == [p.id for p in verdict.schedule]
    assert [v.explanation for v in again.violations] == \
        [v.explanation for v in verdict.violations]
    assert again.counterexample() == run.counterexample(verdict)


def test_reference_passes_every_pair_under_both_models(pair):
    report = explore(reference_agent.make_agent, pair, crash_model="all", crashes=2)
    assert report.ok, "\n\n".join(report.counterexamples())
    for run in report.runs:
        stats = run.depths[2]
        # pairs were really run: more second crash states than first ones, and pruning
        # accounted for (every schedule counted, fewer explored, fewer still resumed)
        assert stats.total > stats.explored > len(run.verdicts)
        assert stats.explored > stats.resumed
        data = run.to_json()["schedules"]["2"]
        assert data["total"] == stats.total and data["explored"] == stats.explored
    # the power sweep may share every verdict with the process sweep (equal states)
    assert sum(run.depths[2].resumed for run in report.runs) > 0


def test_forking_and_replaying_pair_sweeps_agree(pair):
    """The replaying executor runs each schedule from scratch and raises if a kill does not
    land; the forking one must give the same second-crash verdicts."""
    module = mutant("reconcile_in_place")
    results = []
    for workers in (2, 0):
        with Explorer(module.make_agent, pair) as ex:
            golden = ex.golden()
            points = [p for p in kill_points(golden.trace) if p.category in
                      ("between-A-and-tool", "after-tool-before-B")][:6]
            from faultsim.reports.report import ModelRun

            runs = {"process": ModelRun(pair, "m", "process", points, points)}
            top = _Sweep(golden, runs, keep_traces=True)
            _sweep_replaying(ex, top, points, ["process"], None)
            position = {p.id: n for n, p in enumerate(points)}
            _sweep_pairs(ex, top, ["process"], position, workers, None)
            run = runs["process"]
            results.append((run.depths[2].explored,
                            [([p.id for p in f.schedule], f.order,
                              [v.invariant for v in f.violations])
                             for f in run.deep_failures]))
    assert results[0] == results[1]
    assert results[0][0] > 0 and results[0][1], "the window must hold failing pairs"


def test_cli_pairs_json_replay_and_a_fixed_agent(tmp_path, capsys):
    out = tmp_path / "r.json"
    agent = "reference_agent.mutants.reconcile_in_place"
    assert main(["run", PAIR, "--agent", agent, "--crashes", "1", "--json", str(out)]) == 0
    assert main(["run", PAIR, "--agent", agent, "--seed", "7", "--json", str(out)]) == 1
    text = capsys.readouterr().out
    assert "2 crashes" in text and "explored after pruning" in text
    data = json.loads(out.read_text())["runs"][0]
    assert data["crashes"] == 2 and data["seed"] == "7"
    assert data["schedules"]["2"]["explored"] > 0
    violations = data["violations"]
    assert violations and {len(v["schedule"]) for v in violations} == {2}
    assert "checkpoint_whole" in {v["invariant"] for v in violations}
    first = violations[0]
    assert first["replay"] == f"faultsim replay {first['token']}"
    assert main(["replay", first["token"], "--json", str(out)]) == 1
    shown = capsys.readouterr().out
    assert "schedule of 2 crashes:" in shown and "---- KILL ----" in shown
    again = json.loads(out.read_text())["runs"][0]["violations"]
    assert again[0]["schedule"] == first["schedule"]
    # the same schedule on the reference agent: the second kill lands at the same place
    assert main(["replay", first["token"], "--agent", "reference_agent"]) == 0
    assert "no longer violates" in capsys.readouterr().out


# -- the hypothesis search ---------------------------------------------------------------
@pytest.mark.parametrize("name", DOUBLE_CRASH_NAMES)
def test_search_catches_double_crash_mutants_with_two_crashes(name, pair):
    module = mutant(name)
    found = []
    for _ in range(2):
        with Session(module.make_agent, pair, agent_name=module.__name__) as session:
            result = search(session, max_crashes=2, examples=600, seed=7)
        assert not result.ok, f"{name}: not found in {result.tried} schedules"
        found.append(result)
    a, b = found
    assert len(a.failure.schedule) == 2  # shrunk: never one crash (none fails), never three
    assert [p.id for p in a.failure.schedule] == [p.id for p in b.failure.schedule]
    assert a.failure.counterexample() == b.failure.counterexample()
    assert a.tried == b.tried


def test_cli_search_instead_of_enumerating_pairs(tmp_path, capsys):
    out = tmp_path / "r.json"
    agent = "reference_agent.mutants.repeat_before_save"
    assert main(["run", PAIR, "--agent", agent, "--search", "200", "--seed", "7",
                 "--json", str(out)]) == 1
    assert "searched:" in capsys.readouterr().out
    data = json.loads(out.read_text())["runs"][0]
    assert "explored" not in data["schedules"]["2"] or data["schedules"]["2"]["explored"] == 0
    assert data["schedules"]["2"]["searched"] > 0
    assert [len(v["schedule"]) for v in data["violations"]] == [2]


def test_search_saves_its_failure_in_a_real_example_database(pair, tmp_path):
    from hypothesis.database import DirectoryBasedExampleDatabase

    module = mutant("reconcile_in_place")
    db = DirectoryBasedExampleDatabase(str(tmp_path / "examples"))
    with Session(module.make_agent, pair) as session:
        with pytest.raises(ValueError, match="only in random runs"):
            search(session, seed=7, database=db)
        first = search(session, examples=600, database=db, seed=None)  # random, as locally
        assert not first.ok
    # the database lives on the real disk, not in the session's fake filesystem
    assert any((tmp_path / "examples").rglob("*"))
    with Session(module.make_agent, pair) as session:
        again = search(session, examples=600, database=db, seed=None)
    assert not again.ok and again.examples <= 2  # replayed from the database first
    assert [p.id for p in again.failure.schedule] == [p.id for p in first.failure.schedule]


def test_search_stops_at_its_time_budget(pair):
    with Session(reference_agent.make_agent, pair) as session:
        result = search(session, examples=100_000, seconds=0.5)
    assert result.ok and result.stopped_by_time and result.tried < 1000


def test_three_crashes_are_searched_after_the_pair_sweep(pair):
    report = explore(reference_agent.make_agent, pair, crashes=3, search=15)
    assert report.ok
    run = report.runs[0]
    assert run.depths[2].explored > 0 and run.depths[3].searched >= 15


# -- strategies in a user's own @given test ------------------------------------------------
def test_strategies_compose_in_a_users_given_test(pair):
    with Session(reference_agent.make_agent, pair) as session:
        @settings(max_examples=25, deadline=None, database=None, derandomize=True,
                  suppress_health_check=list(HealthCheck))
        @given(fst.schedules(session, max_crashes=3))
        def check(schedule):
            assert 1 <= len(schedule) <= 3
            session.run(schedule).assert_ok()

        check()
        assert session.runs == 25


def test_a_failing_given_test_shows_the_counterexample(pair):
    module = mutant("blind_without_intent")
    with Session(module.make_agent, pair) as session:
        @settings(max_examples=300, deadline=None, database=None, derandomize=True,
                  suppress_health_check=list(HealthCheck))
        @given(fst.schedules(session, max_crashes=1))
        def check(schedule):
            session.run(schedule).assert_ok()

        with pytest.raises(AssertionError) as info:
            check()
    text = str(info.value)
    assert "VIOLATED effects_exactly_once" in text and "replay: faultsim replay fs1_" in text


def test_kill_point_strategy_respects_categories(pair):
    with Session(reference_agent.make_agent, pair) as session:
        seen = []

        @settings(max_examples=30, deadline=None, database=None, derandomize=True)
        @given(fst.kill_points(session, categories=["after-effect", "checkpoint-rename"]))
        def check(point):
            seen.append(point.category)

        check()
        assert seen and set(seen) <= {"after-effect", "checkpoint-rename"}
        with pytest.raises(ValueError, match="unknown kill-point categories"):
            fst.kill_points(session, categories=["after-lunch"])
    assert "after-effect" in CATEGORIES


def test_a_schedule_by_hand(pair):
    with Session(mutant("reconcile_in_place").make_agent, pair) as session:
        pending = [p for p in session.kill_points if p.category == "between-A-and-tool"][0]
        clean = session.run(Schedule((Crash(pending),)))
        assert clean.ok  # one crash: the mutant is fine
        tried = [session.run((Crash(pending), Crash(at, recovery=True)))
                 for at in range(0, 1 << 16, 1 << 11)]
        assert any(not r.ok for r in tried)  # a second crash inside recovery is not
        assert all(len(r.schedule) == 2 for r in tried)
        with pytest.raises(ValueError):
            Schedule(())


# -- tokens --------------------------------------------------------------------------------
def test_tokens_round_trip_and_damage_is_named():
    from faultsim.token import Step

    token = ReplayToken("scenarios/x.toml", "pkg.agent:make", "power", "7",
                        (Step(12, None, 0), Step(40, 512, 2)))
    text = token.encode()
    assert text.startswith("fs1_") and ReplayToken.decode(text) == token
    with pytest.raises(TokenError, match="damaged"):
        ReplayToken.decode(text[:-6])
    with pytest.raises(TokenError, match="not a faultsim replay token"):
        ReplayToken.decode("k12-after-effect")


def test_replay_of_a_token_whose_scenario_is_gone_is_a_usage_error(capsys):
    from faultsim.token import Step

    token = ReplayToken("no/such.toml", "reference_agent", "process", "0",
                        (Step(3, None, 0),)).encode()
    assert main(["replay", token]) == 2
    assert "no/such.toml" in capsys.readouterr().err
    assert main(["run", PAIR, "--crashes", "0"]) == 2


def test_a_class_is_explored_from_its_earliest_state_with_its_own_course():
    """Equivalent first crash states share a verdict but not their course (a state with one
    more file than the resumed one writes it without creating it): the pair sweep drives
    from the class's earliest state, reusing the resumed run's trace only when that state
    is the one resumed, else learning its own course. Which state was resumed depends on
    how the workers' children interleaved (issue 19: k111 with one worker, k110 with
    two); the representative must not."""
    from types import SimpleNamespace

    from faultsim.pipeline.sweep import FirstCrash as F, Judged as J, ResumeResult
    from faultsim.pipeline.sweep import first_crashes as _first_crashes

    p = [SimpleNamespace(id=f"k{i}") for i in range(3)]
    result = ResumeResult([], None, None, events=["course of the resumed state"])
    sweep = SimpleNamespace(
        instances=[J("power", p[0], 1, "state A", result, True, ("A", "w")),
                   J("power", p[1], 0, "state B", result, True, ("B", "w")),
                   J("process", p[2], 0, "state B", result, True, ("B", "w"))],
        resumed_from={id(result): ("B", "w")})
    position = {x.id: i for i, x in enumerate(p)}
    # in power, A comes first: it stands for the class, with a course of its own
    assert _first_crashes(sweep, "power", position) == [F(p[0], 1, "state A", None, 2)]
    sweep.resumed_from = {id(result): ("A", "w")}  # had A been the one resumed
    assert _first_crashes(sweep, "power", position) == [F(p[0], 1, "state A", result, 2)]
    sweep.resumed_from = {id(result): ("C", "w")}  # resumed for a state of another model
    assert _first_crashes(sweep, "power", position) == [F(p[0], 1, "state A", None, 2)]


def test_equal_states_resumed_twice_at_once_are_still_one_class():
    """Two children may resume equal states at the same time (with two workers, not one):
    two result objects for one state must not split its class (nor double its pairs)."""
    from types import SimpleNamespace

    from faultsim.pipeline.sweep import FirstCrash as F, Judged as J, ResumeResult
    from faultsim.pipeline.sweep import first_crashes as _first_crashes

    p = [SimpleNamespace(id=f"k{i}") for i in range(2)]
    first, second = (ResumeResult([], None, None, events=["course"]) for _ in range(2))
    sweep = SimpleNamespace(
        instances=[J("process", p[0], 0, "state", first, True, ("S", "w")),
                   J("process", p[1], 0, "state", second, True, ("S", "w"))],
        resumed_from={id(first): ("S", "w"), id(second): ("S", "w")})
    position = {x.id: i for i, x in enumerate(p)}
    assert _first_crashes(sweep, "process", position) == [F(p[0], 0, "state", first, 2)]
