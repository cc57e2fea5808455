"""bench/file_ops.py (issue 53): run small, each way ran where it says (tmpfs's file objects
bare, pyfakefs's in the other three), the traced way's operations were traced (its events
counted), and every ratio is a positive number. No time is asserted: the machine is shared."""
from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OPERATIONS = ("open_read", "read_bytes", "atomic_write", "replace", "stat", "exists")


def test_the_file_ops_bench_times_each_operation_four_ways():
    repeat = 5
    done = subprocess.run([sys.executable, "bench/file_ops.py", "--repeat", str(repeat)],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.strip().splitlines()
    assert len(lines) == 5  # one line per way, then the JSON line
    result = json.loads(lines[-1])
    ways = result["ways"]
    assert ways["bare"]["served_by"] == "_io"
    for way in ("plain", "tuned", "traced"):
        assert ways[way]["served_by"].startswith("pyfakefs."), (way, ways[way]["served_by"])
    # each run (and its first-call run) of an atomic write is at least its write and its
    # rename in the trace, and of a replace its write and rename
    assert ways["traced"]["events"] >= 2 * 2 * (repeat + 1)
    for name in OPERATIONS:
        for way in ways.values():
            assert way[name]["cpu_us"] >= 0 and way[name]["wall_us"] > 0
        for key, ratio in result["ratios"][name].items():
            assert isinstance(ratio, float | int) and math.isfinite(ratio) and ratio > 0, \
                (name, key)


def test_a_repeat_below_one_is_refused():
    done = subprocess.run([sys.executable, "bench/file_ops.py", "--repeat", "0"], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "--repeat: at least 1" in done.stderr
