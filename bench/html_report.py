"""Benchmark: the HTML report's size and the time headless Chromium takes to draw it.

Two pages:
  longest    the longest bundled scenario (default scenarios/research_50_steps.toml, its
             5352 kill points), run on the reference agent with single process crashes
             (`faultsim run --crashes 1 --crash-model process --json --html`)
  synthetic  a report of --points kill points (default 300000), made up here in the JSON
             report's encoding (a torn write in every third event, a violation in every
             97th kill point), with 200 violations listed

For each: the page's bytes, the seconds to render it in Python (JSON -> HTML), and the
seconds Chromium takes from start to a dumped DOM (`--dump-dom`, after the page's script
drew every cell), beside the same for an empty page (Chromium's own start-up) and their
difference. One JSON line at the end.

Run: python bench/html_report.py [--scenario FILE] [--points N] [--report REPORT.json]
(--report: an existing JSON report of the longest scenario instead of running it)
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

import browser  # noqa: E402  (tests/browser.py: how the tests start Chromium)
from faultsim.reports.html import render  # noqa: E402

ALPHABET = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"


def synthetic(points: int) -> dict:
    """A report of `points` kill points in the map's encoding (docs/reference/json-report.md)."""
    event, torn, category, verdict, events = [], [], [], [], []
    n = index = 0
    while n < points:
        index += 1
        write = index % 3 == 0
        kind = index % 7
        events.append(f"{kind}\tfile{index % 50}.json\t0->{index} abcdef")
        if write:
            for off in (1, 256, 511):
                event.append("1" if off == 1 else "0")
                torn.append(str(off))
                category.append("2")
                verdict.append("3" if n % 97 == 0 else "1")
                n += 1
        event.append("0" if write else "1")
        torn.append("0")
        category.append("5")
        verdict.append("3" if n % 97 == 0 else "1")
        n += 1
    kinds = ["model.response", "mark.tool.start", "fs.write", "fs.rename", "effect.applied",
             "mark.checkpoint.A", "fs.fsync"]
    bad = verdict.count("3")
    violations = [{"invariant": "effects_exactly_once", "rule": "P8/P11",
                   "schedule": [f"k{i}-synthetic"], "persisted": "every completed operation",
                   "persisted_each": ["every completed operation"],
                   "replay": f"faultsim replay fs1_synthetic{i}", "token": f"fs1_synthetic{i}",
                   "explanation": "synthetic"} for i in range(200)]
    run = {"scenario": "synthetic", "path": "synthetic.toml", "agent": "synthetic",
           "crash_model": "process", "mode": "in-process", "kill_points_total": n,
           "kill_points_explored": n, "categories": {"mid-write": 0, "in-tool": n},
           "seconds": 0.0, "crash_states": n, "crash_states_resumed": n,
           "crash_states_escalated": 0, "probes": [], "seed": "0", "crashes": 1,
           "timeout": 30.0, "wall_seconds": None, "fingerprint": "", "violating": bad,
           "schedules": {}, "violations": violations, "counterexamples": [],
           "map": {"event_kinds": kinds, "events": events,
                   "categories": ["start", "after-model-response", "checkpoint-mid-write",
                                  "checkpoint-rename", "checkpoint-commit", "in-tool"],
                   "labels": ["unexplored", "passed", "escalated", "effects_exactly_once"],
                   "ids": {}, "pairs": [],
                   "points": {"event": "".join(event[:n]), "torn": ",".join(torn[:n]),
                              "category": "".join(category[:n]),
                              "verdict": "".join(verdict[:n])}}}
    return {"ok": False, "version": "bench", "runs": [run]}


def measure(report: dict, folder: Path, name: str, binary: str | None) -> dict:
    started = time.perf_counter()
    page = render(report)
    python_seconds = time.perf_counter() - started
    path = folder / f"{name}.html"
    path.write_text(page, encoding="utf-8")
    out = {"bytes": len(page.encode()), "kill_points": sum(r["kill_points_total"]
                                                           for r in report["runs"]),
           "python_seconds": round(python_seconds, 3)}
    if binary:
        started = time.perf_counter()
        dom = browser.dump_dom(binary, path)
        out["chromium_seconds"] = round(time.perf_counter() - started, 3)
        if 'data-rendered="1"' not in dom:
            raise SystemExit(f"{name}: the page's script did not finish")
        out["cells_drawn"] = dom.count("<i class=")
        import html as html_module
        import re

        found = re.search(r'data-draw-ms="([^"]*)"', dom)
        out["script_ms"] = json.loads(html_module.unescape(found[1])) if found else None
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--scenario", default=str(ROOT / "scenarios/research_50_steps.toml"))
    ap.add_argument("--points", type=int, default=300_000)
    ap.add_argument("--report", default=None)
    ns = ap.parse_args()
    binary = browser.chromium()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        if ns.report:
            longest = json.loads(Path(ns.report).read_text())
        else:
            subprocess.run([sys.executable, "-m", "faultsim", "run", ns.scenario, "--agent",
                            "reference_agent", "--crashes", "1", "--crash-model", "process",
                            "--json", str(folder / "r.json"), "--examples", "0"],
                           cwd=ROOT, check=False, stdout=subprocess.DEVNULL)
            longest = json.loads((folder / "r.json").read_text())
        figures = {"chromium": binary}
        if binary:
            empty = folder / "empty.html"
            empty.write_text("<!DOCTYPE html><body data-rendered=\"1\"></body>")
            started = time.perf_counter()
            browser.dump_dom(binary, empty)
            figures["chromium_empty_page_seconds"] = round(time.perf_counter() - started, 3)
        figures["longest"] = measure(longest, folder, "longest", binary)
        figures["longest"]["scenario"] = Path(ns.scenario).name
        figures["synthetic"] = measure(synthetic(ns.points), folder, "synthetic", binary)
        for key in ("longest", "synthetic"):
            if binary:
                figures[key]["draw_seconds"] = round(
                    figures[key]["chromium_seconds"] - figures["chromium_empty_page_seconds"], 3)
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
