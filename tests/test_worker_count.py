"""The in-process report does not depend on the worker count: the same JSON (timings
removed) with `--workers 0` (one after another, the replaying executor), 1 and 2 (forked
children). Before issue 19 it did: a class of equal first crash states was represented
by whichever state a child happened to resume, equal states of the two crash models in
one child counted two resumes, and with two workers more (and other) pairs were explored.
The kill points are narrowed to a stretch where those differed, to keep the test short."""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

from conftest import DATA, ROOT
from faultsim.cli import main
from faultsim.inprocess import cpython

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


# Issue 54 item 2: the whole report, counts included, on any worker count and any timing of
# the children. Narrowed to kill points where the forking executor once counted otherwise
# than the serial sweep (`--workers 0`). tiny and refunds: the state at a temp file's creation
# equals, without that file, the state after the tool wrote its output, which was shared with
# an earlier torn write's run; that sharing was only known once the parked torn states were
# settled, after the driver had passed the point (tiny: 46 resumed against 45; refunds: 80
# against 79, and the pairs after them with it). rename_without_fsync: parked states whose
# class read the file go to a second pass, which resumed a state again where an equal one
# was still being judged, so the count followed the load (3 resumed against 2).
TINY_POINTS = ["k103-in-tool-ORD-7.txt#1", "k104.1-mid-write-ORD-7.txt#2@1",
               "k104.13-mid-write-ORD-7.txt#2@13", "k104.25-mid-write-ORD-7.txt#2@25",
               "k104-in-tool-ORD-7.txt#2", "k105-after-tool-before-B-tool.end-write_file#1",
               "k106-after-tool-before-B-progress.json.tmp#10",
               "k107.1-mid-write-progress.json.tmp#11@1",
               "k107-after-tool-before-B-progress.json.tmp#11"]
NARROWED = {  # name: (scenario, arguments, kill points, exit status, second pass expected)
    "tiny": (DATA / "tiny.toml", ["--crash-model", "process"], TINY_POINTS, 0, False),
    "refunds": (ROOT / "scenarios" / "refunds.toml", ["--crash-model", "all"],
                ["k292-in-tool-2026-10-14.csv#1", "k293.1-mid-write-2026-10-14.csv#2@1",
                 "k293.51-mid-write-2026-10-14.csv#2@51",
                 "k293.101-mid-write-2026-10-14.csv#2@101", "k293-in-tool-2026-10-14.csv#2",
                 "k294-after-tool-before-B-tool.end-write_file#1",
                 "k295-after-tool-before-B-progress.json.tmp#28"], 0, False),
    "tiny-rename_without_fsync": (
        DATA / "tiny.toml", ["--agent", "reference_agent.mutants.rename_without_fsync",
                             "--crash-model", "all"],
        ["k89-in-tool-tool.start-write_file#1", "k91-in-tool-ORD-7.txt#1",
         "k92.1-mid-write-ORD-7.txt#2@1", "k92.13-mid-write-ORD-7.txt#2@13",
         "k92-in-tool-ORD-7.txt#2", "k93-after-tool-before-B-tool.end-write_file#1",
         "k94-after-tool-before-B-progress.json.tmp#10",
         "k95.1-mid-write-progress.json.tmp#11@1",
         "k95-after-tool-before-B-progress.json.tmp#11",
         "k96-after-tool-before-B-progress.json.tmp#12"], 1, True),
}


def _slow_children(monkeypatch, seen):
    """Every forked child takes its time: the driver meets each later state while the
    answers it may depend on are still out (the most parking). `seen` counts the states
    parked and the kill points sent to a second pass."""
    from faultsim.inprocess import forking

    resume, wait_all = forking.resume_and_judge, forking._Pool.wait_all

    def slow(*args, **kwargs):
        time.sleep(0.2)
        return resume(*args, **kwargs)

    def counted(self):
        seen["parked"] += len(self.parked)
        again = wait_all(self)
        seen["again"] += len(again)
        return again

    monkeypatch.setattr(forking, "resume_and_judge", slow)
    monkeypatch.setattr(forking._Pool, "wait_all", counted)


def _instant_children(monkeypatch, seen):
    """Every child has answered before the driver decides the next point's states."""
    from faultsim.inprocess import forking

    fork_for = forking._Pool.fork_for

    def after_all(self, *args, **kwargs):
        while self.children:
            self._collect(block=True)
        return fork_for(self, *args, **kwargs)

    monkeypatch.setattr(forking._Pool, "fork_for", after_all)


@pytest.mark.parametrize("scenario, crashes", [("tiny", "1"), ("tiny", "2"),
                                               ("refunds", "1"), ("refunds", "2"),
                                               ("tiny-rename_without_fsync", "1")])
def test_every_count_the_same_on_any_worker_count_and_timing(scenario, crashes, tmp_path,
                                                             capsys, monkeypatch):
    path, args, points, status, second_pass = NARROWED[scenario]
    reports, seen = {}, {"parked": 0, "again": 0}
    for name, workers, timing in (("w0", "0", None), ("w1", "1", None),
                                  ("w2 slow", "2", _slow_children),
                                  ("w2 instant", "2", _instant_children)):
        with monkeypatch.context() as m:
            if timing is not None:
                timing(m, seen)
            out = tmp_path / f"{name}.json"
            code = main(["run", str(path), *args, "--crashes", crashes, "--workers",
                         workers, "--json", str(out)]
                        + [arg for p in points for arg in ("--kill-point", p)])
        assert code == status, capsys.readouterr().out
        reports[name] = strip(json.loads(out.read_text()))
    runs = reports["w0"]["runs"]
    assert all(r["kill_points_explored"] == len(points) for r in runs)
    if crashes == "2":
        assert all(r["schedules"]["2"]["explored"] > 100 for r in runs)
    # the slow children made the driver park states (and, where expected, send points
    # to a second pass): the paths that once counted otherwise were taken
    assert seen["parked"] > 0 and (seen["again"] > 0) == second_pass, seen
    for name in ("w1", "w2 slow", "w2 instant"):
        assert reports[name] == reports["w0"], name


# The shortcut it guards is made only where faultsim reads the interpreter's frames; on
# another (3.13, 3.14) both runs take the long way and there is nothing to lose.
@pytest.mark.skipif(cpython.shapes() is None, reason=f"no cut here: {cpython.unknown()}")
def test_a_crash_models_counts_do_not_depend_on_the_models_beside_it(tmp_path, capsys):
    # Run beside power, the process model's states share jobs with power's, and a job's
    # states but its last are resumed on a copy of the world made while time is frozen:
    # freezegun's picklers made each datetime the world stored a FakeDatetime there, the
    # world's state text differed from the clean run's, and convergence refused cuts it
    # made alone (on these kill points: 3 resumed runs converged alone, 0 beside power).
    def run(models: str, points: list[str]) -> dict:
        out = tmp_path / f"{models}-{len(points)}.json"
        assert main(["run", str(DATA / "tiny.toml"), "--agent", "reference_agent",
                     "--crash-model", models, "--workers", "1", "--json", str(out)]
                    + [arg for p in points for arg in ("--kill-point", p)]) == 0, \
            capsys.readouterr().out
        return next(r for r in json.loads(out.read_text())["runs"]
                    if r["crash_model"] == "process")

    # the kill points, from the clean runs alone (a whole sweep gave them before: one
    # process crash state a kill point, in the same order)
    import faultsim

    ids = [p.id for p in faultsim.explore(
        faultsim.load_factory("reference_agent"), faultsim.load_scenario(DATA / "tiny.toml"),
        crashes=1, workers=0, only=lambda p: False).runs[0].kill_points]
    # the last two thirds (a stored idempotency key's datetime is in the world), every 6th
    points = [k for n, k in enumerate(ids) if n > len(ids) // 3 and n % 6 == 0]
    alone, beside = run("process", points), run("all", points)
    assert alone["crash_states_converged"] > 0  # the shortcut was there to lose
    for key in ("crash_states_converged", "crash_states_resumed", "crash_states"):
        assert beside[key] == alone[key], key
    assert strip({"runs": [beside]}) == strip({"runs": [alone]})
