"""Benchmark: how fast `faultsim run` exits when cancelled (SIGTERM, as a CI runner sends
when a job is cancelled), mid-sweep, in both modes, and that nothing it started outlives it.

Prints one line per run, then one JSON line: the seconds from SIGTERM to exit per mode
(the worst of the runs), and the processes left behind (must be 0).

Run: python bench/cancel.py [--runs N]
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MARKER = "FAULTSIM_RUN"  # faultsim.real.pool.MARKER: every server and child carries it


def marked(marker: str) -> list[int]:
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                if f"{MARKER}={marker}\0".encode() in f.read():
                    found.append(int(pid))
        except OSError:
            pass
    return found


def cancel_once(mode: str, into: float) -> tuple[float, int]:
    marker = f"bench-cancel-{uuid.uuid4().hex[:8]}"
    proc = subprocess.Popen(
        [sys.executable, "-m", "faultsim.cli", "run", "scenarios/support_tickets.toml",
         "--mode", mode, "--workers", "2", "--crashes", "1"],
        cwd=ROOT, env={**os.environ, MARKER: marker, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while len(marked(marker)) < 3 and time.monotonic() < deadline:  # children at work
        time.sleep(0.05)
    time.sleep(into)
    sent = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=120)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    seconds = time.monotonic() - sent
    time.sleep(0.5)
    return seconds, len(marked(marker))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    a = ap.parse_args()
    if not sys.platform.startswith("linux"):
        print("bench/cancel.py reads /proc: Linux only")
        return 0
    worst, left = {}, 0
    for mode in ("in-process", "subprocess"):
        for n in range(a.runs):
            seconds, stray = cancel_once(mode, into=1.0 + n)
            print(f"{mode}: exit {seconds:.2f} s after SIGTERM, {stray} process(es) left")
            worst[mode] = max(worst.get(mode, 0.0), round(seconds, 2))
            left += stray
    print(json.dumps({"exit_seconds_worst": worst, "left_behind": left,
                      "load_average_1min": round(os.getloadavg()[0], 1)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
