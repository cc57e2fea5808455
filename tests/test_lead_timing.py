"""The pair stage's counts do not depend on which sibling leads (issue 54). A resumed run cut
against an earlier resumed run (a lead, faultsim.inprocess.leads) used to keep a tail never
reused for composing a later pair (after_convergence.py), where the same run gone to its end
kept one; which of two equal runs leads and which is cut depends on which forked child got
there first, so README's first command printed 264 resumed pairs on flaky_api, and 262 or
263 on a loaded machine. The timing is injected here, not waited for: no lead ever found
(every lead too late: each run goes to its end), siblings slowed down (leads go through
the lead board while they run), one child at a time (every lead in time). Narrowed to two
first crashes whose second crashes were composed or resumed by that race (35 resumed
against 42 before the fix)."""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from conftest import ROOT
from faultsim.cli import main

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
from same_json import strip  # noqa: E402  (the bench's own rule for what is a timing)

POINTS = ["k36-in-tool-tool.start-charge_payment#1", "k37-after-effect-payments.submit#1"]


def _no_lead(monkeypatch):
    """Every run is too late to be a lead for any other: none is cut against one."""
    from faultsim.inprocess import leads

    monkeypatch.setattr(leads, "lead_of", lambda *args, **kwargs: None)


def _slow_siblings(monkeypatch):
    """Each child takes its time before resuming: siblings run side by side and meet each
    other's states on the lead board, not in the table a child is forked with."""
    from faultsim.inprocess import forking

    resume = forking.resume_and_judge

    def slow(*args, **kwargs):
        time.sleep(0.1)
        return resume(*args, **kwargs)

    monkeypatch.setattr(forking, "resume_and_judge", slow)


def test_the_pair_counts_do_not_depend_on_which_sibling_leads(tmp_path, capsys, monkeypatch):
    reports = {}
    for name, workers, timing in (("in time", "1", None), ("no lead", "2", _no_lead),
                                  ("slow siblings", "2", _slow_siblings)):
        with monkeypatch.context() as m:
            if timing is not None:
                timing(m)
            out = tmp_path / f"{name}.json"
            code = main(["run", str(ROOT / "scenarios" / "flaky_api.toml"), "--crashes", "2",
                         "--workers", workers, "--json", str(out)]
                        + [arg for p in POINTS for arg in ("--kill-point", p)])
        assert code == 0, capsys.readouterr().out
        reports[name] = json.loads(out.read_text())
    runs = {name: r["runs"][0] for name, r in reports.items()}
    # the race was there to lose: runs were cut against leads, or none was, and pairs were
    # composed from earlier second crashes' runs
    assert runs["in time"]["shortcuts"]["leads"]["applied"] > 0
    assert runs["slow siblings"]["shortcuts"]["leads"]["applied"] > 0
    assert runs["no lead"]["shortcuts"]["leads"]["applied"] == 0
    pairs = runs["in time"]["schedules"]["2"]
    assert pairs["explored"] > 400 and pairs["composed"] > 0, pairs
    # the whole report, the pairs' resumed and composed counts included
    for name in ("no lead", "slow siblings"):
        assert strip(reports[name]) == strip(reports["in time"]), name
