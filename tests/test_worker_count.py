"""The in-process report does not depend on the worker count: the same JSON (timings
removed) with `--workers 0` (one after another, the replaying executor), 1 and 2 (forked
children). Before issue 19 it did: a class of equal first crash states was represented
by whichever state a child happened to resume, equal states of the two crash models in
one child counted two resumes, and with two workers more (and other) pairs were explored.
The kill points are narrowed to a stretch where those differed, to keep the test short."""
from __future__ import annotations

import json
import sys
from pathlib import Path

from conftest import DATA
from faultsim.cli import main

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
from same_json import strip  # noqa: E402  (the bench's own rule for what is a timing)

POINTS = ["k8.1-mid-write-plan.json.tmp#2@1", "k8.38-mid-write-plan.json.tmp#2@38",
          "k8.76-mid-write-plan.json.tmp#2@76", "k8-start-plan.json.tmp#2",
          "k9-start-plan.json.tmp#3", "k10-start-plan.json#1", "k11-start-pair#2",
          "k12-start-checkpoint.json.tmp#1",
          "k13.1-checkpoint-mid-write-checkpoint.json.tmp#2@1",
          "k13.94-checkpoint-mid-write-checkpoint.json.tmp#2@94",
          "k13.188-checkpoint-mid-write-checkpoint.json.tmp#2@188",
          "k13-start-checkpoint.json.tmp#2"]


def test_the_same_report_with_any_worker_count(tmp_path, capsys):
    reports = {}
    for workers in ("0", "1", "2"):
        out = tmp_path / f"w{workers}.json"
        code = main(["run", str(DATA / "pair.toml"), "--agent",
                     "reference_agent.mutants.save_b_only", "--crash-model", "all",
                     "--crashes", "2", "--workers", workers, "--json", str(out)]
                    + [arg for p in POINTS for arg in ("--kill-point", p)])
        assert code == 1, capsys.readouterr().out
        reports[workers] = strip(json.loads(out.read_text()))
    runs = reports["0"]["runs"]
    # the narrowing holds: every point explored, and pairs explored after them
    assert [r["kill_points_explored"] for r in runs] == [len(POINTS)] * 2
    assert all(r["schedules"]["2"]["explored"] > 100 for r in runs)
    assert reports["1"] == reports["0"]
    assert reports["2"] == reports["0"]
