"""bench/suite_cpu.py ranks a pytest session's tests by the CPU they spent, beside their
wall: a test that spins is counted at its CPU, one that waits shows a high wall / CPU."""
from __future__ import annotations

import json
import subprocess
import sys

from conftest import ROOT

_TESTS = """
import time

def test_spins():
    end = time.process_time() + 0.5
    while time.process_time() < end:
        pass

def test_waits():
    time.sleep(0.5)
"""


def test_a_spinning_test_is_counted_at_its_cpu_and_a_waiting_one_at_its_wall(tmp_path):
    (tmp_path / "test_two.py").write_text(_TESTS)
    out = subprocess.run([sys.executable, str(ROOT / "bench" / "suite_cpu.py"),
                          str(tmp_path / "test_two.py"), "-p", "no:xdist", "-p", "no:randomly"],
                         capture_output=True, text=True, timeout=300, check=True).stdout
    lines = out.splitlines()
    start = next(n for n, line in enumerate(lines) if line.startswith('{"tests"'))
    totals = json.loads(lines[start])
    assert totals["tests"] == 2 and totals["cpu_s"] >= 0.5, out
    rows = {line.split()[-1].split("::")[-1]: line.split() for line in lines[start + 1:]
            if "::" in line}
    spins, waits = rows["test_spins"], rows["test_waits"]
    assert float(spins[0]) >= 0.5 and float(waits[0]) < 0.25, out  # CPU s
    assert float(waits[1]) >= 0.5 and float(waits[2]) > float(spins[2]), out  # wall, ratio
