"""Benchmark: the pytest plugin's kill-point items against one whole-scenario exploration.

Runs the reference agent on a scenario (default tests/data/tiny.toml) four ways, each in a
child process, and prints the wall time of each and the ratios (measured in this run):
  whole      `faultsim run SCENARIO --workers 1 --crashes N` (explore(): one process forking
             one crash run at a time, pairs pruned by classes of equivalent states)
  items      `pytest` with one item per kill point (faultsim.parametrize), serial
  items -n 2 the same items over two pytest-xdist workers
Then one JSON line with the figures.

Run: python bench/plugin.py [--scenario FILE] [--crashes 1|2]
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def timed(cmd: list[str], cwd: Path) -> tuple[float, str]:
    started = time.perf_counter()
    out = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    if out.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({out.returncode}):\n{out.stdout[-2000:]}"
                 f"\n{out.stderr[-2000:]}")
    return seconds, out.stdout


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--scenario", default=str(ROOT / "tests" / "data" / "tiny.toml"))
    parser.add_argument("--crashes", type=int, default=2, choices=[1, 2])
    args = parser.parse_args()
    scenario = Path(args.scenario).resolve()
    with tempfile.TemporaryDirectory() as tmp:
        project = Path(tmp)
        shutil.copy(scenario, project / scenario.name)
        (project / "pytest.ini").write_text("[pytest]\n")
        (project / "test_bench.py").write_text(
            "import faultsim\nfrom reference_agent import make_agent\n\n"
            f"@faultsim.parametrize(make_agent, {scenario.name!r}, crashes={args.crashes})\n"
            "def test_agent(faultsim):\n    faultsim.check()\n")
        py = sys.executable
        whole, _ = timed([py, "-m", "faultsim.cli", "run", scenario.name, "--workers", "1",
                          "--crashes", str(args.crashes)], project)
        print(f"whole      {whole:7.1f} s  faultsim run --workers 1", flush=True)
        common = [py, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_bench.py"]
        serial, out = timed(common, project)
        items = int(re.search(r"(\d+) passed", out)[1])
        print(f"items      {serial:7.1f} s  {items} items, serial", flush=True)
        spread, _ = timed(common + ["-n", "2"], project)
        print(f"items -n 2 {spread:7.1f} s  {items} items, 2 xdist workers", flush=True)
    figures = {"scenario": scenario.name, "crashes": args.crashes, "items": items,
               "whole_s": round(whole, 1), "items_serial_s": round(serial, 1),
               "items_xdist2_s": round(spread, 1),
               "items_serial_over_whole": round(serial / whole, 2),
               "xdist2_speedup": round(serial / spread, 2), "cpus": os.cpu_count()}
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
