"""--horizon H (faultsim.inprocess.convergence, "The horizon"): past its first H model
requests after recovery a resumed run is cut where its request, the effects applied so
far and the services equal the clean run's at one request, and the rest is taken from the
clean run's course. It must cut (counted and said), raise no false alarm on any mutant,
see every violation that shows before the cut, and miss only what it says it misses:
violations found in the final files alone. Subprocess mode and commands refuse it."""
from __future__ import annotations

import importlib
import json

import pytest

from conftest import DATA
from faultsim.cli import main
from faultsim.inprocess.explore import explore
from faultsim.inprocess import convergence, fingerprints
from faultsim.reports.text import coverage_lines

TINY = str(DATA / "tiny.toml")
# invariants judged on the files a run ends with: under a horizon they are the clean
# run's, so a violation only they show is not seen (guarantees.md)
FINAL_FILES = {"counters_continue", "progress_recorded_once", "outputs_match"}


def found(name, horizon, model="all"):
    module = importlib.import_module(f"reference_agent.mutants.{name}")
    report = explore(module.make_agent, TINY, crashes=1, crash_model=model, horizon=horizon,
                     workers=2, agent_name=name)
    return ({(run.crash_model, v.kill_point.id, x.invariant)
             for run in report.runs for v in run.failures for x in v.violations},
            sum(run.at_horizon for run in report.runs))


def test_the_reference_agent_passes_and_the_run_says_what_it_cut(tmp_path, capsys):
    out = tmp_path / "r.json"
    code = main(["run", TINY, "--crash-model", "process", "--crashes", "1", "--horizon", "1",
                 "--json", str(out)])
    assert code == 0
    run = json.loads(out.read_text())["runs"][0]
    assert run["horizon"]["requests"] == 1
    assert 0 < run["horizon"]["crash_states_cut"] <= run["crash_states_resumed"]
    text = capsys.readouterr().out
    assert f"horizon 1: {run['horizon']['crash_states_cut']} of " \
           f"{run['crash_states_resumed']} resumed runs were cut" in text
    # without a horizon: no block, no line, nothing cut at a horizon
    report = explore(importlib.import_module("reference_agent").make_agent, TINY,
                     crashes=1, crash_model="process", workers=2)
    assert report.runs[0].at_horizon == 0 and "horizon" not in report.runs[0].to_json()
    assert not [line for line in coverage_lines(report.runs) if "horizon" in line]


# (mutant, what a horizon of one request sees of its exhaustive violations)
SEEN = ["key_after_effect", "orphan_tool_use", "blind_without_intent"]


@pytest.mark.parametrize("name", SEEN)
def test_a_violation_shown_before_the_cut_is_seen_and_none_is_invented(name):
    whole, _ = found(name, None)
    cut, cuts = found(name, 1)
    assert cuts > 0  # the horizon cut runs here: the equality below is not vacuous
    assert cut == whole != set()


@pytest.mark.parametrize("name", ["counters_reset", "save_b_only",
                                  "reask_instead_of_reconcile"])
def test_what_a_horizon_misses_is_only_what_the_final_files_alone_show(name):
    """counters_reset's reset counters, and the progress entry the other two record twice
    after power loss, are in the files the resumed run ends with, which a cut takes from
    the clean run: those violations are missed where the run is cut, stated; every other
    is seen, none is invented, and each mutant is still caught."""
    whole, _ = found(name, None)
    cut, cuts = found(name, 1)
    missed = whole - cut
    assert cuts > 0 and missed and cut <= whole and cut
    assert {invariant for _, _, invariant in missed} <= FINAL_FILES


def test_a_cut_needs_the_same_effects_and_services_not_only_the_same_request(monkeypatch):
    """A resume that re-asks a turn the clean run asked before its tool call, after the
    crashed incarnation made that call: with the request alone as the key, the clean
    remainder makes the call once more and the run is judged a duplicate that the agent's
    own records would have prevented (a false alarm); the effects in the key prevent it."""
    whole, _ = found("save_b_only", None, "process")
    honest, _ = found("save_b_only", 0, "process")
    assert honest <= whole
    monkeypatch.setattr(convergence, "horizon_key",
                        lambda world, request: fingerprints.request_key(request))
    loose, cuts = found("save_b_only", 0, "process")
    assert cuts > 0 and loose - whole  # invented duplicates


@pytest.mark.parametrize("args,message", [
    (["--horizon", "-1"], "--horizon -1: expected an integer >= 0 (model requests)"),
    (["--horizon", "1", "--mode", "subprocess"],
     "--horizon: subprocess mode runs every resumed run to its end"),
])
def test_a_horizon_that_cannot_apply_is_refused_in_one_line(args, message, capsys):
    assert main(["run", TINY, *args]) == 2
    assert message in capsys.readouterr().err


def test_a_reasked_turns_fresh_ids_read_as_the_first_askings_at_any_position():
    """The fake gives a re-asked turn fresh tool-use ids (`toolu_TAG_NN_I_rK`); past the
    99th turn NN has three digits (a horizon that read only two cut no re-asked run of a
    200-step task past its 99th turn: 54 of 300 ran to their end)."""
    from types import SimpleNamespace

    world = SimpleNamespace(ledger=SimpleNamespace(entries=[]), services={}, durable={})

    def key(body):
        return fingerprints.horizon_key(world, SimpleNamespace(
            method="POST", url=SimpleNamespace(path="/v1/messages"), content=body))

    for n in ("07", "102"):
        first = f'{{"id": "toolu_lookups_{n}_1"}}'.encode()
        assert key(first) == key(first.replace(b'_1"', b'_1_r2"')) != key(b"{}")
    assert key(b'{"id": "toolu_t_07_1"}') != key(b'{"id": "toolu_t_08_1"}')


def pairs(name):
    """A representative two-crash run of `name` on TINY under a horizon of one request:
    (its run, the failing pairs as (first kill point, second kill point, invariant))."""
    module = importlib.import_module(
        "reference_agent" if name == "reference" else f"reference_agent.mutants.{name}")
    report = explore(module.make_agent, TINY, crashes=2, crash_model="process", horizon=1,
                     coverage="representative", workers=2, agent_name=name)
    (run,) = report.runs
    return run, {(v.earlier[0].point.id, v.kill_point.id, x.invariant)
                 for v in run.deep_failures for x in v.violations}


@pytest.mark.parametrize("name", ["reference", "reconcile_in_place"])
def test_a_pair_runs_first_crashes_are_cut_at_the_horizon_and_recovery_pairs_still_judged(
        name, monkeypatch):
    """Under --horizon with two crashes (representative), the single-crash sweep's runs,
    kept for the pair stage, are cut at the horizon too (main ran every one to its end:
    `at_horizon` 0), and the second crashes past a cut are counted as taken from the clean
    run (`schedules_past_cut`), not crashed (pairs.within_horizon). Second crashes in the
    recovery are still crashed: the reference agent passes, and reconcile_in_place (its
    in-place save, only on the recovery path, torn by a second crash) fails at the
    pairs the long way finds, with every first crash's run to its end (main's code; also
    checked under power loss, and for repeat_before_save, when this was built)."""
    run, failing = pairs(name)
    block = run.to_json()["horizon"]
    assert 0 < run.at_horizon == block["crash_states_cut"] <= run.judged
    assert block["schedules_past_cut"]["2"] > 0
    assert "second-crash kill point(s) past such cuts" in run.horizon_line()
    assert not [v for v in run.verdicts if not v.ok]  # one crash shows neither
    if name == "reference":
        assert failing == set() and not run.deep_failures
    else:
        assert {invariant for _, _, invariant in failing} == {
            "checkpoint_whole", "completes_or_escalates"}
        # a second crash inside the recovery's own save, after its first crash
        assert all("checkpoint" in second for _, second, _ in failing)
        monkeypatch.setattr(importlib.import_module("faultsim.inprocess.explore"),
                            "HORIZON_KEPT", False)  # the long way
        whole, long_way = pairs(name)
        assert whole.at_horizon == 0 and long_way == failing
