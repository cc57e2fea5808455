"""CI integration: the GitHub Action's entry point run here as the action runs it (its inputs
and GitHub's files in the environment), the annotations' format, the Markdown summary, and
JUnit times that are measured, not apportioned."""
from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import yaml

from conftest import DATA
from faultsim.cli import ci_action
from faultsim.reports.ci import escape_data, escape_property
from faultsim.cli import main
from faultsim.reports.report import SEVERITY

ROOT = Path(__file__).resolve().parent.parent
TINY = str(DATA / "tiny.toml")
MUTANT = "reference_agent.mutants.blind_without_intent"
# ::error file=F,title=T::MESSAGE, with nothing unescaped that would end a part early
ANNOTATION = re.compile(r"::error file=([^,:\r\n]+),title=([^,:\r\n]+)::([^\r\n]+)")


def test_escaping_follows_githubs_workflow_commands():
    assert escape_data("100% done\r\nnext") == "100%25 done%0D%0Anext"
    assert escape_data("a: b, c") == "a: b, c"  # a message keeps colons and commas
    assert escape_property("faultsim: tiny, 50%\n") == "faultsim%3A tiny%2C 50%25%0A"


def _action_env(tmp_path: Path, **inputs: str) -> dict[str, str]:
    env = {"GITHUB_ACTIONS": "true", "GITHUB_WORKSPACE": str(ROOT),
           "GITHUB_STEP_SUMMARY": str(tmp_path / "summary.md"),
           "GITHUB_OUTPUT": str(tmp_path / "output.txt"),
           "INPUT_REPORT_DIR": str(tmp_path / "out")}
    env.update({f"INPUT_{k.upper()}": v for k, v in inputs.items()})
    return env


def _outputs(tmp_path: Path) -> dict[str, str]:
    lines = (tmp_path / "output.txt").read_text().splitlines()
    return dict(line.split("=", 1) for line in lines)


def test_the_actions_entry_point_on_a_failing_agent(tmp_path, capsys):
    env = _action_env(tmp_path, scenarios=TINY, agent=MUTANT, crash_model="all",
                      shard="2/2", args="--crashes 1 --workers 1 --examples 0")
    assert ci_action.main(env) == 1
    out = capsys.readouterr().out
    outputs = _outputs(tmp_path)
    assert outputs["exit-code"] == "1"
    assert outputs["artifact-name"] == "faultsim-report-shard-2-of-2"
    report = json.loads(Path(outputs["report"]).read_text())
    assert not report["ok"]
    # shard 2 of 2: every kill point, the crash states it owns
    assert [r["shard"] for r in report["runs"]] == \
        [{"index": 2, "of": 2, "by": "crash state"}] * len(report["runs"])
    assert [r["kill_points_explored"] for r in report["runs"]] == \
        [r["kill_points_total"] for r in report["runs"]]

    # one annotation per run x violated invariant, at the scenario file, replayable
    violated = [(r["crash_model"], inv) for r in report["runs"]
                for inv in SEVERITY if any(v["invariant"] == inv for v in r["violations"])]
    annotations = [line for line in out.splitlines() if line.startswith("::")]
    assert len(annotations) == len(violated) > 0
    for line, (model, invariant) in zip(annotations, violated):
        m = ANNOTATION.fullmatch(line)
        assert m, line
        assert m.group(1) == "tests/data/tiny.toml"  # relative to GITHUB_WORKSPACE
        assert m.group(2).startswith(f"faultsim%3A tiny [{model}] violates {invariant} (")
        message = m.group(3).split("%0A")
        assert re.match(rf"\d+ crash states? violates? {invariant} \(P", message[0])
        assert re.fullmatch(r"replay: faultsim replay fs1_\S+", message[1])

    # the job summary: a row per run, then each failing run's first counterexample
    summary = Path(env["GITHUB_STEP_SUMMARY"]).read_text()
    assert summary.startswith("## faultsim: 2 of 2 runs with violations\n")
    rows = [line for line in summary.splitlines() if line.startswith("| tiny |")]
    assert [row.split("|")[2] for row in rows] == [f" {r['crash_model']} "
                                                   for r in report["runs"]]
    for row, r in zip(rows, report["runs"]):
        points, passed, failed, deeper = row.split("|")[3:7]
        # a shard counts the kill points where it judged a crash state (its own), not the
        # kill points it crashed at
        judged = {state[1] for state in r["states"]}
        assert 0 < len(judged) < r["kill_points_total"]
        assert points == f" {len(judged)} of {r['kill_points_total']} "
        bad = {v["schedule"][0] for v in r["violations"]}
        assert int(passed) == len(judged) - len(bad)
        assert failed == f" **{len(bad)}** " and deeper == " - "  # one crash: none tried
    assert "shard 2/2: each row counts the kill points where this shard judged" in summary
    for model in ("process", "power"):
        part = summary[summary.index(f"### tiny [{model}]:"):]
        assert "VIOLATED" in part.split("```sh")[0]
        replay = part.split("```sh\n", 1)[1].split("\n```", 1)[0]
        assert replay.startswith("faultsim replay fs1_") and "\n" not in replay

    # JUnit: the measured time on one case, 0 on every other
    root = ET.parse(outputs["junit"]).getroot()
    times = [float(c.get("time")) for c in root.iter("testcase")]
    assert times[0] > 0 and times[1:] == [0.0] * (len(times) - 1)
    assert [float(s.get("time")) for s in root.findall("testsuite")] == [times[0], 0.0]
    assert float(root.get("time")) == times[0]


def test_the_actions_entry_point_on_a_passing_agent_appends_to_the_summary(tmp_path,
                                                                          capsys):
    env = _action_env(tmp_path, scenarios=TINY, agent="reference_agent",
                      args="--crashes 1 --workers 1", shard="2/3")
    Path(env["GITHUB_STEP_SUMMARY"]).write_text("earlier step\n")
    assert ci_action.main(env) == 0
    out = capsys.readouterr().out
    assert "::error" not in out
    assert out.splitlines()[0] == (
        f"faultsim run {TINY} --agent reference_agent --shard 2/3 --crashes 1 --workers 1 "
        f"--json {tmp_path}/out/report-shard-2-of-3.json --junit "
        f"{tmp_path}/out/junit-shard-2-of-3.xml --annotations --html "
        f"{tmp_path}/out/report-shard-2-of-3.html --summary-md {tmp_path}/summary.md")
    summary = Path(env["GITHUB_STEP_SUMMARY"]).read_text()
    assert summary.startswith("earlier step\n## faultsim: all passed\n")
    # the job summary points at the HTML page, which the upload step takes along
    html = _outputs(tmp_path)["html"]
    assert Path(html).read_text().startswith("<!DOCTYPE html>")
    assert "report-shard-2-of-3.html" in summary
    assert "###" not in summary
    assert _outputs(tmp_path)["exit-code"] == "0"


def test_annotations_follow_github_actions_unless_told(tmp_path, capsys, monkeypatch):
    args = ["run", TINY, "--agent", MUTANT, "--crashes", "1", "--workers", "1",
            "--kill-point", "k132-after-effect-email.send#1"]
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    assert main(args + ["--no-annotations"]) == 1
    assert "::error" not in capsys.readouterr().out
    monkeypatch.delenv("GITHUB_ACTIONS")
    assert main(args + ["--annotations"]) == 1
    assert "::error file=" in capsys.readouterr().out
    assert main(args) == 1
    assert "::error" not in capsys.readouterr().out


@pytest.mark.parametrize("shard", ["0/2", "3/2", "2", "a/b"])
def test_a_bad_shard_is_a_usage_error(shard, capsys):
    assert main(["run", TINY, "--shard", shard]) == 2
    assert f"--shard {shard}: expected I/N" in capsys.readouterr().err


def test_action_yml_runs_the_entry_point_with_every_input():
    action = yaml.safe_load((ROOT / "action.yml").read_text())
    steps = action["runs"]["steps"]
    run = next(s for s in steps if s.get("id") == "faultsim")
    assert run["run"] == "python -m faultsim.cli.ci_action"
    env = run["env"]
    for name in ("scenarios", "agent", "crash-model", "shard", "budget", "baseline", "args",
                 "report-dir", "html"):
        assert name in action["inputs"]
        assert env["INPUT_" + name.upper().replace("-", "_")] == "${{ inputs.%s }}" % name
        assert f"INPUT_{name.upper().replace('-', '_')}" in ci_action.__doc__
    upload = next(s for s in steps if "upload-artifact" in s.get("uses", ""))
    assert "steps.faultsim.outputs.report" in upload["with"]["path"]
    assert "steps.faultsim.outputs.html" in upload["with"]["path"]
    assert upload["if"].startswith("always()")


def test_budget_maps_to_the_search_time():
    args, _ = ci_action.command({"INPUT_BUDGET": "120"})
    assert args[args.index("--search-seconds") + 1] == "120"


def test_the_html_report_is_written_unless_the_input_says_false():
    args, outputs = ci_action.command({"INPUT_REPORT_DIR": "out"})
    assert args[args.index("--html") + 1] == outputs["html"] == str(Path("out/report.html"))
    args, outputs = ci_action.command({"INPUT_HTML": "false"})
    assert "--html" not in args and outputs["html"] == ""
