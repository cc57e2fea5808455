"""`faultsim run`: outcomes, exit codes, one clear line per error."""
from __future__ import annotations

import pytest

from conftest import SCENARIOS
from faultsim.cli import main


def test_run_prints_the_outcome_and_exits_0(capsys):
    assert main(["run", str(SCENARIOS / "support_tickets.toml")]) == 0
    out = capsys.readouterr().out
    assert "outcome         completed" in out and "turns           13" in out
    assert "effects applied tickets 3, payments 1, email 2, records 3" in out


def test_a_mutant_without_a_crash_still_completes(capsys):
    # Its flaw needs a crash to show; a clean run must not be reported as a failure.
    assert main(["run", str(SCENARIOS), "--agent", "reference_agent.mutants.save_b_only"]) == 0


@pytest.mark.parametrize("args,message", [
    (["run", "no/such/place.toml"], "no/such/place.toml: no such scenario file or directory"),
    (["run", "--agent", "reference_agent.mutants.nope"],
     "no module named 'reference_agent.mutants.nope'"),
    (["run", "--agent", "reference_agent:no_factory"], "has no callable 'no_factory'"),
])
def test_usage_errors_are_one_line_and_exit_2(args, message, capsys):
    assert main(args) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


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


def test_an_agent_failure_exits_1_with_one_line(tmp_path, capsys):
    bad = tmp_path / "rocket.toml"
    bad.write_text('task = "x"\nexpected_final_answer = "y"\n'
                   '[[turns]]\ntool_calls = [{ name = "launch_rocket" }]\n'
                   '[[turns]]\nfinal = "y"\n')
    assert main(["run", str(bad)]) == 1
    err = capsys.readouterr().err
    assert "UnknownToolError" in err and "launch_rocket" in err and "Traceback" not in err
    assert main(["--debug", "run", str(bad)]) == 1
    assert "Traceback" in capsys.readouterr().err
