"""`faultsim run`: the sweep from the command line, its report, exit codes, one clear line
per error."""
from __future__ import annotations

import json
import re

import pytest

from conftest import DATA
from faultsim.cli import main

TINY = str(DATA / "tiny.toml")


def test_reference_agent_passes_and_the_json_report_has_the_contract(tmp_path, capsys):
    out_json = tmp_path / "report.json"
    assert main(["run", TINY, "--crashes", "1", "--json", str(out_json)]) == 0
    out = capsys.readouterr().out
    assert "tiny · reference_agent · process: ok" in out
    data = json.loads(out_json.read_text())
    assert data["ok"] is True
    (run,) = data["runs"]
    assert {"scenario", "agent", "crash_model", "kill_points_total", "kill_points_explored",
            "categories", "seconds", "violations"} <= set(run)
    assert run["scenario"] == "tiny" and run["crash_model"] == "process"
    assert run["kill_points_explored"] == run["kill_points_total"] > 100
    assert run["violations"] == []


def test_a_caught_mutant_exits_1_and_its_replay_reproduces_it(tmp_path, capsys):
    out_json = tmp_path / "report.json"
    agent = "reference_agent.mutants.blind_without_intent"
    assert main(["run", TINY, "--agent", agent, "--crashes", "1", "--json",
                 str(out_json)]) == 1
    out = capsys.readouterr().out
    assert "VIOLATED effects_exactly_once (P8/P11)" in out
    violation = json.loads(out_json.read_text())["runs"][0]["violations"][0]
    assert set(violation) >= {"invariant", "rule", "schedule", "replay", "token",
                              "explanation"}
    replay = violation["replay"].split()
    assert replay == ["faultsim", "replay", violation["token"]]
    assert main(replay[1:] + ["--json", str(out_json)]) == 1
    again = json.loads(out_json.read_text())["runs"][0]
    assert again["violations"][0]["schedule"] == violation["schedule"]
    assert again["violations"][0]["explanation"] == violation["explanation"]
    # the narrowed run the counterexample also names finds the same state
    rerun = next(line for line in out.splitlines() if line.startswith("   or: faultsim run"))
    assert main(rerun.split()[2:] + ["--json", str(out_json)]) == 1
    narrowed = json.loads(out_json.read_text())["runs"][0]
    assert narrowed["kill_points_explored"] == 1
    assert narrowed["violations"][0]["schedule"] == violation["schedule"]


@pytest.mark.parametrize("args,message", [
    (["run", "no/such/place.toml"], "no/such/place.toml: no such scenario file or directory"),
    (["run", "--agent", "reference_agent.mutants.nope"],
     "no module named 'reference_agent.mutants.nope'"),
    (["run", "--agent", "reference_agent:no_factory"], "has no callable 'no_factory'"),
    (["run", TINY, "--kill-point", "k99999-nowhere"], "no kill point k99999-nowhere"),
])
def test_usage_errors_are_one_line_and_exit_2(args, message, capsys):
    assert main(args) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_bad_crash_model_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as info:
        main(["run", TINY, "--crash-model", "meteor"])
    assert info.value.code == 2
    assert "invalid choice: 'meteor'" in capsys.readouterr().err


def test_malformed_scenario_names_file_and_key(tmp_path, capsys):
    bad = tmp_path / "bad.toml"
    bad.write_text('task = "x"\n[[turns]]\ntool_calls = [{ input = {} }]\n')
    assert main(["run", str(bad)]) == 2
    err = capsys.readouterr().err
    assert f"{bad}: turns[0].tool_calls[0].name: expected a tool name (missing)" in err
    bad.write_text('task = "x"\n[model\nturns = 3\n')
    assert main(["run", str(bad)]) == 2
    err = capsys.readouterr().err
    assert str(bad) in err and "valid TOML" in err and "Traceback" not in err


def test_an_agent_that_fails_without_a_crash_is_one_clear_line(tmp_path, capsys):
    bad = tmp_path / "rocket.toml"
    bad.write_text('task = "x"\nexpected_final_answer = "y"\n'
                   '[[turns]]\ntool_calls = [{ name = "launch_rocket" }]\n'
                   '[[turns]]\nfinal = "y"\n')
    assert main(["run", str(bad)]) == 1
    err = capsys.readouterr().err
    assert "fails without any crash" in err and "launch_rocket" in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert main(["--debug", "run", str(bad)]) == 1
    assert "Traceback" in capsys.readouterr().err


def test_progress_bar_only_on_a_terminal(capsys):
    assert main(["run", TINY, "--kill-point", "k0-start", "--crashes", "1"]) == 0
    assert "kill points" not in capsys.readouterr().err  # not a tty: no bar


def test_summary_line_per_run(capsys):
    assert main(["run", TINY, "--crash-model", "all", "--crashes", "1"]) == 0
    out = capsys.readouterr().out
    lines = [l for l in out.splitlines() if re.match(r"tiny\s+reference_agent\s+(process|power)", l)]
    assert len(lines) == 2 and all(l.rstrip().endswith("ok") for l in lines)
