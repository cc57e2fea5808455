"""Benchmark: the forking executor's children that only learn a kill point's aftermath,
with and without reading it from the code (faultsim/inprocess/unwind.py), in one run.

For each scenario, `faultsim run` (the reference agent, its own fault profile) twice in
fresh interpreters: with the shortcut and with `unwind.ENABLED = False` (a child at every
kill point, as before). Prints one line per scenario, then one JSON line:
  <scenario>.cpu_s          {"read": .., "forked": ..}: CPU seconds (parent + children)
  <scenario>.ratio          forked / read (above 1: the shortcut saves)
  <scenario>.points         kill points whose aftermath was read, and those still forked
  <scenario>.same_report    the two JSON reports are equal, timings aside

Run: python bench/aftermath.py [scenarios/refunds.toml ...]
Ratios within one run are the figures to read: the machine may be shared.
"""
from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT = ["scenarios/refunds.toml", "scenarios/research_50_steps.toml",
           "scenarios/support_tickets.toml"]
CHILD = """
import sys, json
from faultsim.inprocess import unwind
unwind.ENABLED = sys.argv[1] == "read"
from faultsim.cli import main
try:
    main(["run", sys.argv[2], "--json", sys.argv[3]])
except SystemExit:
    pass
print(json.dumps(unwind.counts), file=sys.stderr)
"""


def _strip(value):
    if isinstance(value, dict):
        return {k: _strip(v) for k, v in value.items() if "seconds" not in k and k != "time"}
    if isinstance(value, list):
        return [_strip(v) for v in value]
    return value


def _run(mode: str, scenario: str, out: Path) -> tuple[float, dict]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run([sys.executable, "-c", CHILD, mode, scenario, str(out)], cwd=ROOT,
                          capture_output=True, text=True, env={**os.environ,
                                                               "PYTHONPATH": str(ROOT)})
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    counts = json.loads(done.stderr.strip().splitlines()[-1])
    return cpu, counts


def main(argv: list[str]) -> None:
    figures = {}
    with tempfile.TemporaryDirectory(prefix="faultsim-bench-") as tmp:
        for scenario in argv or DEFAULT:
            name = Path(scenario).stem
            reports, cpu = {}, {}
            for mode in ("read", "forked"):
                out = Path(tmp) / f"{name}.{mode}.json"
                cpu[mode], counts = _run(mode, scenario, out)
                reports[mode] = _strip(json.loads(out.read_text()))
                if mode == "read":
                    points = counts
            figures[name] = {"cpu_s": {m: round(c, 2) for m, c in cpu.items()},
                             "ratio": round(cpu["forked"] / cpu["read"], 2),
                             "points": points,
                             "same_report": reports["read"] == reports["forked"]}
            f = figures[name]
            print(f"{name:20} CPU {f['cpu_s']['forked']:7.1f} s -> {f['cpu_s']['read']:7.1f} s "
                  f"(x{f['ratio']}), aftermath read at {points['read']} points, forked at "
                  f"{points['forked']}, same report: {f['same_report']}", flush=True)
    print(json.dumps(figures))


if __name__ == "__main__":
    main(sys.argv[1:])
