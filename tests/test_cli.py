"""`faultsim run`: the sweep from the command line, its report, exit codes, one clear line
per error."""
from __future__ import annotations

import io
import os
import signal
import threading
import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from conftest import DATA
from faultsim.cli import main
from faultsim.cli.exits import Terminated, sigterm_unwinds
from faultsim.cli.console import Progress
from faultsim.reports.report import SEVERITY

TINY = str(DATA / "tiny.toml")

# `memo_backend` (tests/shared_runs.py): the tests of what `faultsim run` and `list` do
# with a report take it from a real sweep made once per session (tiny.toml's sweep of both
# crash models serves three of them); the tests of the sweep itself run their own.


def test_reference_agent_passes_and_the_json_report_has_the_contract(tmp_path, capsys,
                                                                    memo_backend):
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


def test_a_caught_mutant_exits_1_and_its_replay_reproduces_it(tmp_path, capsys, memo_backend):
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
    (["run", "--agent", "nowhere/my_agent.py"], "agent 'nowhere/my_agent.py': no such file "
                                                "'nowhere/my_agent.py'"),
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
    # a scripted tool the agent does not offer: the scenario's mistake (exit 2), told in one
    # line naming it, whatever the agent made of the API's refusal
    assert main(["run", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "turn 1: the scripted turn calls 'launch_rocket', a tool the request does not " \
           "offer" in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert main(["--debug", "run", str(bad)]) == 2
    assert "Traceback" in capsys.readouterr().err


def test_kill_point_takes_several_ids_after_one_flag_or_the_flag_repeated(tmp_path, capsys):
    report = tmp_path / "r.json"
    for ids in (["--kill-point", "k0-start", "k1-start-runs#1"],
                ["--kill-point", "k0-start", "--kill-point", "k1-start-runs#1"]):
        assert main(["run", TINY, *ids, "--crashes", "1", "--json", str(report)]) == 0
        assert json.loads(report.read_text())["runs"][0]["kill_points_explored"] == 2
    capsys.readouterr()
    # every word up to the next option is an id: a scenario written after them is refused
    with pytest.raises(SystemExit) as info:
        main(["run", "--kill-point", "k0-start", TINY])
    assert info.value.code == 2
    assert "is a scenario, not a kill point id: give the scenarios before --kill-point" \
        in capsys.readouterr().err


def test_progress_bar_only_on_a_terminal(capsys):
    assert main(["run", TINY, "--kill-point", "k0-start", "--crashes", "1"]) == 0
    err = capsys.readouterr().err
    assert "ETA" not in err  # not a tty: no bar, only the plan and its forecast
    plan, costs = err.splitlines()
    # and the sweep's forecast (pipeline/forecast.py), of the one kill point asked for
    assert re.fullmatch(r"tiny: 1 of 315 kill points, 1 crash state to judge \(1 process\); "
                        r"single-crash forecast: about \d+ s of CPU \(representative: "
                        r"about \d+ s, 1 kill points\)", plan), plan
    # the one kill point is before any write: no write's torn kill points to name
    assert re.fullmatch(r"tiny: largest costs: a clean incarnation took [\d.]+ s; a crash "
                        r"run counts as hung after [\d.]+ s", costs), costs


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_bar_on_a_terminal_shows_done_total_and_eta():
    stream = _Terminal()
    progress = Progress("tiny", stream)
    progress(10, 40)  # under a second: no bar yet
    assert stream.getvalue() == ""
    progress.started -= 2.0  # two seconds in
    progress(10, 40)
    bar = stream.getvalue()
    assert bar.startswith("\rtiny [#######") and "10/40 kill points" in bar
    assert "5.0/s" in bar and "ETA 6s" in bar
    progress(0, 7, stage="pairs (power)")
    assert "\ntiny: 7 distinct first crash states (power) to crash again" in stream.getvalue()
    progress.close()


def test_the_plan_counts_what_the_run_then_judges(tmp_path, capsys, memo_backend):
    out_json = tmp_path / "r.json"
    assert main(["run", TINY, "--crash-model", "all", "--crashes", "1", "--json",
                 str(out_json)]) == 0
    runs = {r["crash_model"]: r for r in json.loads(out_json.read_text())["runs"]}
    plan, costs = capsys.readouterr().err.splitlines()
    total = runs["process"]["crash_states"] + runs["power"]["crash_states"]
    assert plan.startswith(
        f"tiny: {runs['process']['kill_points_total']} kill points, {total} crash "
        f"states to judge ({runs['process']['crash_states']} process, "
        f"{runs['power']['crash_states']} power); single-crash forecast: about ")
    assert costs.startswith("tiny: largest costs: ")


def test_summary_table_per_scenario_and_crash_model(capsys, memo_backend):
    assert main(["run", TINY, "--crash-model", "all", "--crashes", "1"]) == 0
    out = capsys.readouterr().out
    table = out[out.index("scenario  crash model"):].splitlines()
    # columns two spaces or more apart (a sweep of 100 s or more widens the time column)
    assert re.split(r"\s{2,}", table[0].strip()) == [
        "scenario", "crash model", "kill points", "passed", "failed", "failed with 2+ crashes",
        "time"]
    assert [row.split()[:6] for row in table[1:3]] == [["tiny", "process", "315", "315", "0", "-"],
                                                       ["tiny", "power", "315", "315", "0", "-"]]
    assert table[3] == "1 scenario, 2 runs: all passed"


def test_junit_has_a_case_per_scenario_crash_model_and_invariant(tmp_path, capsys,
                                                                  memo_backend):
    xml, out_json = tmp_path / "r.xml", tmp_path / "r.json"
    agent = "reference_agent.mutants.blind_without_intent"
    assert main(["run", TINY, "--agent", agent, "--crash-model", "all", "--crashes", "1",
                 "--junit", str(xml), "--json", str(out_json)]) == 1
    report = json.loads(out_json.read_text())
    root = ET.parse(xml).getroot()
    assert root.tag == "testsuites"
    suites = root.findall("testsuite")
    assert [s.get("name") for s in suites] == ["tiny [process]", "tiny [power]"]
    for suite, run in zip(suites, report["runs"]):
        cases = suite.findall("testcase")
        assert len(cases) == len(SEVERITY) == int(suite.get("tests"))
        failed = {c.get("name").split()[0]: c.find("failure") for c in cases
                  if c.find("failure") is not None}
        violated = {v["invariant"] for v in run["violations"]}
        assert set(failed) == violated and violated
        assert int(suite.get("failures")) == len(violated)
        for invariant, failure in failed.items():
            n = sum(1 for v in run["violations"] if v["invariant"] == invariant)
            assert failure.get("message").startswith(f"{n} crash states violate {invariant}")
            assert "faultsim replay fs1_" in failure.text  # the counterexample, replayable
    assert int(root.get("tests")) == 2 * len(SEVERITY)


def test_list_gives_turns_services_kill_points_and_crash_states(tmp_path, capsys,
                                                                  memo_backend):
    out_json = tmp_path / "r.json"
    assert main(["run", TINY, "--crash-model", "all", "--crashes", "1", "--json",
                 str(out_json)]) == 0
    runs = {r["crash_model"]: r for r in json.loads(out_json.read_text())["runs"]}
    capsys.readouterr()
    assert main(["list", TINY]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"tiny  {TINY}"
    assert out[1] == "  turns        5 (4 with tool calls, 1 of them parallel)"
    assert out[2] == ("  services     payments (keyed), email (blind), "
                      "records (queryable), orders (readonly)")
    assert out[3] == (f"  kill points  {runs['process']['kill_points_total']}: crash states "
                      f"process {runs['process']['crash_states']}, power "
                      f"{runs['power']['crash_states']}")
    # the forecast of the sweep `run` would make (pipeline/forecast.py), each coverage
    # the pause model's schedules: its pause points (the boundary points but the start)
    from faultsim.inprocess.explore import survey
    from faultsim.scenario import load_scenario
    from faultsim.settings.loading import factory_for

    points = survey(factory_for("reference_agent", TINY), load_scenario(TINY))[0]
    pauses = sum(1 for p in points if p.offset is None and p.index > 0)
    assert 0 < pauses < len(points)
    assert out[5] == (f"  pause        {pauses} pause points (the boundary kill points after "
                      "the first event), each woken at the new incarnation's first model "
                      "request, after each of its checkpoint saves, and at its end")
    assert re.fullmatch(r"  forecast     single-crash forecast: about \d+ s of CPU "
                        r"\(representative: about \d+ s, \d+ kill points\)", out[6]), out[6]
    assert out[7] == ("  profile      crash models process; 2 crashes; downtime 0s; "
                      "API faults none")


def test_an_agent_module_that_fails_to_import_is_one_line(tmp_path, monkeypatch, capsys):
    (tmp_path / "broken_agent.py").write_text("import json\nraise ImportError('no licence key')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert main(["run", TINY, "--agent", "broken_agent"]) == 2
    err = capsys.readouterr().err
    assert err == ("faultsim: error: agent 'broken_agent': importing it failed: ImportError: "
                   "no licence key\n")


def test_an_agent_given_as_a_file(tmp_path, capsys):
    (tmp_path / "helpers_of_mine.py").write_text("from reference_agent import make_agent\n")
    (tmp_path / "my_agent.py").write_text("from helpers_of_mine import make_agent as build\n")
    assert main(["run", TINY, "--agent", f"{tmp_path}/my_agent.py:build", "--crashes", "1",
                 "--kill-point", "k0-start"]) == 0
    assert f"tiny · {tmp_path}/my_agent.py:build · process: ok" in capsys.readouterr().out


def test_an_agent_typed_on_the_command_line_wins_over_a_scenarios_langgraph_graph(
        tmp_path, capsys):
    """`--agent FILE.py:ATTR` on a scenario with a [langgraph] table runs that agent, not the
    table's graph (which it once did silently, under all three durability modes)."""
    graphs = Path(__file__).resolve().parent.parent / "scenarios" / "langgraph" / "graphs.py"
    scenario = tmp_path / "tiny_graph.toml"
    scenario.write_text((DATA / "tiny.toml").read_text()
                        + f'\n[langgraph]\ngraph = "{graphs}:react_payments"\n')
    (tmp_path / "my_agent.py").write_text("from reference_agent import make_agent as build\n")
    spec, out_json = f"{tmp_path}/my_agent.py:build", tmp_path / "report.json"
    assert main(["run", str(scenario), "--agent", spec, "--crashes", "1",
                 "--kill-point", "k0-start", "--json", str(out_json)]) == 0
    out = capsys.readouterr().out
    assert f"tiny · {spec} · process: ok" in out
    assert "[langgraph:" not in out and "LangGraph, per scenario" not in out  # no graph run
    assert [run["agent"] for run in json.loads(out_json.read_text())["runs"]] == [spec]
    assert main(["list", str(scenario), "--agent", spec]) == 0  # its kill points, not the graph's
    listed = capsys.readouterr().out
    assert "  langgraph    " not in listed and "checkpoint-mid-write" in listed


def test_a_worker_that_dies_is_its_kill_points_finding_and_the_sweep_goes_on(capsys):
    """An agent that SIGKILLs its own process on every resume: each point with a state to
    resume is a kill_point_judged finding naming the point and the signal, and the sweep
    goes on to the end. Exit 1, no traceback."""
    assert main(["run", TINY, "--agent", "tests.broken_agents:dies_on_resume",
                 "--crashes", "1"]) == 1
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err and "Traceback" not in captured.out
    assert "kill_point_judged" in captured.out
    # the version probe resumes too: in a forked child, so its death is the probe's finding
    assert "probe-unknown-version: VIOLATED" in captured.out
    assert re.search(r"the process judging kill point k\d+-\S+ was killed by SIGKILL "
                     r"\(out of memory\?\) before it sent a verdict", captured.out), \
        captured.out


def _cancel_swallowed_once(sig, kind) -> bool:
    """A cancel whose first delivery a `__del__` swallows must still end the run (raise
    `kind`); True when the run went on past that first delivery."""
    class Cancelled:
        def __del__(self):
            os.kill(os.getpid(), sig)
            for _ in range(1000):  # the handler runs in here, and what it raises is swallowed
                pass

    landed = False
    # As from a terminal: a shell starts a background job (`.ci/run &`) with SIGINT ignored,
    # and an xdist worker inherits that; ignored, there is no cancel to swallow.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(kind):
            with sigterm_unwinds():
                Cancelled()
                landed = True
                for _ in range(10_000_000):  # the signal sent again ends this loop
                    pass
    finally:
        signal.signal(signal.SIGINT, previous)
    return landed


@pytest.mark.parametrize("sig, kind", [(signal.SIGTERM, Terminated),
                                       (signal.SIGINT, KeyboardInterrupt)])
def test_a_cancel_that_lands_where_python_swallows_exceptions_still_ends_the_run(sig, kind):
    """Seen in CI: SIGTERM landed in an at-fork hook while a worker started, Python printed
    "Exception ignored" and the run went on. A `__del__` swallows the same way."""
    assert _cancel_swallowed_once(sig, kind)  # swallowed once, the run went on, then ended


@pytest.mark.parametrize("sig, kind", [(signal.SIGTERM, Terminated),
                                       (signal.SIGINT, KeyboardInterrupt)])
def test_a_resent_cancel_that_lands_inside_the_hook_is_sent_again(sig, kind, monkeypatch):
    """Seen in CI: on a busy machine the main thread stayed in the unraisable hook past the
    resend, the handler ran there and what it raised was swallowed as well. Held there
    50 ms on purpose, the resend lands in the hook every time."""
    import time

    start = threading.Thread.start

    def slow_start(self):
        start(self)
        deadline = time.monotonic() + 0.05  # the only thread started here is the resender
        while time.monotonic() < deadline:  # the handler runs in here, in the hook
            pass

    monkeypatch.setattr(threading.Thread, "start", slow_start)
    assert _cancel_swallowed_once(sig, kind)  # swallowed once, the run went on, then ended


def test_the_command_exits_with_mains_code_without_a_last_collection(monkeypatch):
    """`faultsim` (and `python -m faultsim`) is `entry`: main's exit code, and the heap
    frozen first, so the interpreter's last collection does not walk a sweep's heap."""
    import faultsim.cli as cli
    import tomllib

    frozen = []
    monkeypatch.setattr(cli, "main", lambda: 3)
    monkeypatch.setattr(cli, "exiting_now", lambda: frozen.append(True))
    with pytest.raises(SystemExit) as exc:
        cli.entry()
    assert exc.value.code == 3 and frozen == [True]
    project = tomllib.loads((Path(__file__).parent.parent / "pyproject.toml").read_text())
    assert project["project"]["scripts"]["faultsim"] == "faultsim.cli:entry"
