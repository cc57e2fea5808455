"""Every command a failing run prints reproduces what it stands for: each `replay:` and
`or:` line of the text report is run as printed (it carries the mode, crash model, seed
and any non-default timeout; the scenario file carries the downtime; the worker count
decides nothing) and must exit 1 with the same violations at the same schedule."""
from __future__ import annotations

import json
import re
import shlex

import pytest

from conftest import DATA
from faultsim.cli import main
from test_same_path import AGENT, SCENARIO

PAIR = str(DATA / "pair.toml")
COMMAND = re.compile(r"^(?:replay: |\s+or: )(faultsim (?:run|replay) .+)$", re.M)


def _violations(report: dict) -> dict[tuple, set]:
    out: dict[tuple, set] = {}
    for run in report["runs"]:
        for v in run["violations"]:
            out.setdefault((run["crash_model"], tuple(v["schedule"])), set()).add(
                v["invariant"])
    return out


@pytest.fixture(scope="module")
def pay(tmp_path_factory):
    folder = tmp_path_factory.mktemp("printed")
    (folder / "path_agent.py").write_text(AGENT)
    (folder / "pay.toml").write_text(SCENARIO)
    return folder


@pytest.mark.parametrize("args", [
    # in-process, both crash models, schedules of two crashes (their tokens), a seed and a
    # timeout that are not the defaults, two workers (the printed commands run with the
    # default worker count)
    ["--agent", "reference_agent.mutants.save_b_only", "--crash-model", "all",
     "--crashes", "2", "--seed", "7", "--timeout", "20", "--workers", "2", "--examples", "4"],
    ["--agent", "reference_agent.mutants.rename_without_fsync", "--crash-model", "power",
     "--crashes", "1", "--seed", "7", "--workers", "2"],
    # subprocess mode: the narrowed real run
    ["--agent", "reference_agent.mutants.save_b_only", "--mode", "subprocess",
     "--seed", "7", "--workers", "2"],
    # a user's agent whose course depends on the seed: passes with seed 0, fails with 7
    ["--agent", "PAY/path_agent.py:make_sometimes", "--seed", "7", "--crashes", "1"],
    ["--agent", "PAY/path_agent.py:make_sometimes", "--seed", "7", "--crashes", "1",
     "--mode", "subprocess"],
], ids=["in-process-pairs", "in-process-power", "subprocess", "seeded-names",
        "seeded-names-subprocess"])
def test_every_printed_command_reproduces_its_counterexample(args, pay, tmp_path, capsys):
    out_json = tmp_path / "report.json"
    scenario = PAIR
    if any(a.startswith("PAY/") for a in args):
        args = [a.replace("PAY", str(pay)) for a in args]
        scenario = str(pay / "pay.toml")
    assert main(["run", scenario, *args, "--json", str(out_json)]) == 1
    text = capsys.readouterr().out
    report = json.loads(out_json.read_text())
    found = _violations(report)
    by_replay: dict[str, dict] = {}  # one verdict's command -> its violations
    for run in report["runs"]:
        for v in run["violations"]:
            by_replay.setdefault(v["replay"], {}).setdefault(
                (run["crash_model"], tuple(v["schedule"])), set()).add(v["invariant"])
    commands = COMMAND.findall(text)
    assert commands, text
    for command in commands:
        argv = shlex.split(command)
        assert argv[0] == "faultsim"
        again = tmp_path / "again.json"
        assert main(argv[1:] + ["--json", str(again)]) == 1, command
        capsys.readouterr()
        reproduced = _violations(json.loads(again.read_text()))
        if argv[1] == "replay":  # exactly the schedule it names
            assert reproduced == by_replay[command], command
        else:  # the run narrowed to one kill point: its states, the same verdicts
            point = argv[argv.index("--kill-point") + 1]
            model = argv[argv.index("--crash-model") + 1]
            if "subprocess" in args:
                assert "--mode subprocess" in command
            assert reproduced == {k: s for k, s in found.items()
                                  if k[0] == model and k[1] == (point,)}, command
    if "--timeout" in args:
        assert all("--timeout 20" in c for c in commands), commands
