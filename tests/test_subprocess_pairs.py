"""Subprocess mode's crashes during recovery: schedules of two crashes (each resumed run
killed again at every kill point of its own course, on real processes), the version probe
(P4) on a real directory and in a real SQLite database, and replay tokens that replay on
real processes.

Every pair sweep first proves its second kills landed (counted SIGKILLs, one per second
crash state) before its verdicts count. Runs are narrowed to one first crash with `only`
(a pair sweep of a whole scenario takes minutes); the runs shared by several tests are
module fixtures.
"""
from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

import faultsim
from faultsim.settings.loading import load_factory
from faultsim.pipeline.probes import PROBE_VERSION, tamper_versions
from faultsim.real.explore import SubprocessModeError, explore_subprocess
from faultsim.replayer import replay
from faultsim.token import ReplayToken

from conftest import DATA, ROOT

MUTANT = "reference_agent.mutants.recovery_two_writes"
# the first crash: just after the refund's effect, its call pending, so that the resumed
# run reconciles it and completes the turn with the recovery path's own save
FIRST = {"sqlite": "k57-after-effect-payments.submit#1",
         "redis": "k60-after-effect-payments.submit#1"}
# where the mutant's recovery save is split: between its two writes
SPLIT = {"sqlite": "sqlite.exec DELETE", "redis": "redis.set"}


def _pairs(agent: str, store: str, workers: int = 2) -> tuple:
    scenario = faultsim.load_scenario(DATA / f"tiny_{store}.toml")
    stats: dict = {}
    report = explore_subprocess(agent, scenario, workers=workers, crashes=2, stats=stats,
                                only=lambda p: p.id == FIRST[store])
    return report, stats


def _failing(run) -> list[tuple]:
    return sorted((tuple(p.id for p in v.schedule),
                   tuple(sorted(x.invariant for x in v.violations)))
                  for v in run.verdicts + run.deep_failures if v.violations)


@pytest.fixture(scope="module")
def mutant_sqlite():
    return _pairs(MUTANT, "sqlite")


@pytest.fixture(scope="module")
def mutant_redis(redis_server):  # skip without redis-server
    return _pairs(MUTANT, "redis")


def _assert_second_kills_landed(run, stats) -> None:
    # every second crash state judged is a SIGKILL the server saw, before any verdict counts
    assert stats["pair_kills_landed"] == stats["pairs_explored"] == run.depth(2).explored
    assert run.depth(2).explored > 100
    assert run.depth(2).resumed < run.depth(2).explored  # equal states shared a verdict
    assert stats["kills_landed"] == len(run.verdicts) == 1


@pytest.mark.parametrize("store", ["sqlite", "redis"])
def test_recovery_two_writes_is_caught_by_a_crash_during_recovery(store, request):
    report, stats = request.getfixturevalue(f"mutant_{store}")
    (run,) = report.runs
    _assert_second_kills_landed(run, stats)
    assert all(v.ok for v in run.verdicts)  # the single crash there passes ...
    assert run.deep_failures  # ... the second crash inside the recovery's save does not
    for v in run.deep_failures:
        first, second = v.schedule
        assert first.id == FIRST[store]
        assert SPLIT[store] in second.where, second.where
    invariants = {x.invariant for v in run.deep_failures for x in v.violations}
    assert invariants & {"completes_or_escalates", "effects_exactly_once"}


@pytest.mark.parametrize("store", ["sqlite", "redis"])
def test_recovery_two_writes_passes_every_single_crash(store, request):
    """The other half of "caught only by pairs": the whole single-crash sweep passes, so
    no crash of the first run can see the mutant (it differs only on the recovery path)."""
    if store == "redis":
        request.getfixturevalue("redis_server")
    stats: dict = {}
    report = explore_subprocess(MUTANT, faultsim.load_scenario(DATA / f"tiny_{store}.toml"),
                                workers=2, crashes=1, stats=stats)
    (run,) = report.runs
    assert stats["kills_landed"] == len(run.explored) == len(run.verdicts) > 200
    assert report.ok, report.counterexamples(limit=1)
    assert not run.depths and stats["pair_kills_landed"] == 0


def test_the_reference_agent_passes_the_same_pairs(redis_server):
    report, stats = _pairs("reference_agent", "redis")
    (run,) = report.runs
    _assert_second_kills_landed(run, stats)
    assert report.ok, report.counterexamples(limit=1)


def test_pair_verdicts_do_not_depend_on_the_worker_count(mutant_sqlite):
    one, _ = _pairs(MUTANT, "sqlite", workers=1)
    two, _ = mutant_sqlite

    def comparable(report):
        doc = report.to_json()
        for run in doc["runs"]:
            run.pop("seconds")
            for depth in run["schedules"].values():
                depth.pop("seconds")
        return doc

    assert comparable(one) == comparable(two)


def test_pairs_agree_with_the_in_process_mode():
    """From one first crash, both modes kill the resumed run at the same kill points and
    find the same failing schedules (a mutant broken only on the recovery path)."""
    agent = "reference_agent.mutants.reconcile_in_place"
    scenario = faultsim.load_scenario(DATA / "pair.toml")
    first = "k32-after-model-response-checkpoint.json#2"
    stats: dict = {}
    real = explore_subprocess(agent, scenario, workers=2, crashes=2, stats=stats,
                              only=lambda p: p.id == first)
    model = faultsim.explore(load_factory(agent), scenario, crash_model="process",
                             crashes=2, workers=2, only=lambda p: p.id == first)
    (run,), (mrun,) = real.runs, model.runs
    assert stats["pair_kills_landed"] == run.depth(2).explored == mrun.depth(2).explored > 50
    assert _failing(run) == _failing(mrun) != []


def test_more_than_two_crashes_are_refused_in_words():
    with pytest.raises(SubprocessModeError, match="at most 2 crashes"):
        explore_subprocess("reference_agent", faultsim.load_scenario(DATA / "tiny_sqlite.toml"),
                           crashes=3)


# -- the version probe (P4) ------------------------------------------------------------
def _probe(agent: str, scenario: str):
    # the probe runs with every full run's shard 1; kept small: a representative choice of
    # kill points (each class's first and last), of whose states shard 1 of many resumes
    # next to none
    report = explore_subprocess(agent, faultsim.load_scenario(DATA / scenario), workers=1,
                                shard=(1, 10_000), coverage="representative", per_class=0)
    (run,) = report.runs
    return run.probes


@pytest.mark.parametrize("scenario,correct,hopeful", [
    ("tiny.toml", "reference_agent", "reference_agent.mutants.unknown_version_parsed"),
    ("tiny_sqlite.toml", "reference_agent", "tests.broken_agents:sqlite_version_parsed"),
])
def test_the_version_probe_runs_in_subprocess_mode(scenario, correct, hopeful):
    (probe,) = _probe(correct, scenario)
    assert probe.ok and probe.kill_point.id == "probe-unknown-version"
    if scenario == "tiny_sqlite.toml":  # the checkpoint it tampered lives in the database
        assert list(tamper_versions(probe.state.as_dict())) == ["store.db"]
    (caught,) = _probe(hopeful, scenario)
    assert [v.invariant for v in caught.violations] == ["unknown_version_refused"]
    assert f"unknown version {PROBE_VERSION}" in caught.violations[0].explanation


def test_tampering_finds_checkpoints_in_files_redis_values_and_sqlite_rows(tmp_path):
    import sqlite3

    db = tmp_path / "store.db"
    conn = sqlite3.connect(db)
    conn.execute("CREATE TABLE checkpoints (namespace TEXT PRIMARY KEY, data BLOB)")
    conn.execute("INSERT INTO checkpoints VALUES ('a', ?)", (b'{"version": 2, "turns": 3}',))
    conn.execute("INSERT INTO checkpoints VALUES ('b', ?)", (b'not json',))
    conn.commit()
    conn.close()
    files = {"runs/x/checkpoint.json": b'{"version": 2}', "runs/x/plan.json": b'{"version": 2}',
             "@redis/faultsim/x/checkpoint": b'{"version": 2, "task": "t"}',
             "@redis/faultsim/x/steps": b'{"list": []}', "store.db": db.read_bytes()}
    changed = tamper_versions(files)
    assert sorted(changed) == ["@redis/faultsim/x/checkpoint", "runs/x/checkpoint.json",
                               "store.db"]
    assert json.loads(changed["runs/x/checkpoint.json"])["version"] == PROBE_VERSION
    db.write_bytes(changed["store.db"])
    rows = dict(sqlite3.connect(db).execute("SELECT namespace, data FROM checkpoints"))
    assert json.loads(rows["a"]) == {"version": PROBE_VERSION, "turns": 3}
    assert rows["b"] == b"not json"
    assert tamper_versions({"store.db": files["store.db"].replace(b'"version"', b'"vers1on"')}
                           ) == {}


# -- replay tokens of subprocess runs ------------------------------------------------------
def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "faultsim.cli", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)


def test_the_printed_replay_command_of_a_subprocess_pair_reproduces_it(tmp_path):
    """On refunds_sqlite, the scenario the mutant is written for: the run prints a replay
    command; run as printed it exits 1 (the violation reproduces, on real processes), and on
    the reference agent 0 (fixed)."""
    out = tmp_path / "r.json"
    run = _cli("run", "scenarios/stores/refunds_sqlite.toml", "--agent", MUTANT,
               "--mode", "subprocess", "--crashes", "2", "--workers", "2",
               "--kill-point", "k57-after-effect-payments.submit#1", "--json", str(out))
    assert run.returncode == 1, run.stderr[-2000:]
    commands = re.findall(r"^replay: (faultsim replay \S+)$", run.stdout, re.M)
    assert commands, run.stdout[-2000:]
    (violation, *_) = json.loads(out.read_text())["runs"][0]["violations"]
    assert len(violation["schedule"]) == 2
    assert ReplayToken.decode(violation["token"]).mode == "subprocess"
    assert commands[0] == f"faultsim replay {violation['token']}"
    again = _cli(*commands[0].split()[1:])
    assert again.returncode == 1, again.stdout[-2000:] + again.stderr[-2000:]
    assert "schedule of 2 crashes:" in again.stdout
    assert SPLIT["sqlite"] in again.stdout
    fixed = _cli(*commands[0].split()[1:], "--agent", "reference_agent")
    assert fixed.returncode == 0, fixed.stdout[-2000:] + fixed.stderr[-2000:]
    assert "no longer violates" in fixed.stdout


def test_a_single_crash_subprocess_token_replays_on_real_processes():
    scenario = faultsim.load_scenario(DATA / "tiny_sqlite.toml")
    report = explore_subprocess("tests.broken_agents:sqlite_two_transactions", scenario, workers=1,
                                only=lambda p: "sqlite.exec DELETE" in p.where)
    (run,) = report.runs
    (verdict, *_) = run.failures
    token = verdict.token(run)
    assert run.replay_command(verdict) == f"faultsim replay {token}"
    result = replay(token)
    assert not result.ok and result.schedule[0].id == verdict.kill_point.id
    assert {v.invariant for v in result.violations} == {v.invariant for v in verdict.violations}
    assert replay(token, agent="reference_agent").ok
