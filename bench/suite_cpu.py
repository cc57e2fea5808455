"""The test suite's CPU per test and per file, beside its wall: what costs the suite its time.

pytest's --durations ranks tests by wall time, which on a loaded machine mixes a test's own
work with its wait for a core and with time it spends waiting on something else. That
hid a real cost: Ray's workers run at niceness 15, so test_ray's shards got a few percent
of a core (896 s of wall for about 50 s of CPU in a CI run). This ranks by CPU (user +
system of the test's process and of the children it reaped; a process reparented away from
it, such as a daemon, is not counted) and prints wall / CPU beside it: a test far above
the suite's own ratio waits.

    python bench/suite_cpu.py                       # the whole suite, -n 4 (about 30 min)
    python bench/suite_cpu.py tests/test_ray.py -p no:xdist    # any pytest arguments

Each run prints one JSON line of totals first, then the files and tests that cost most.
Loaded as a pytest plugin (`-p suite_cpu`, with bench/ on PYTHONPATH), it appends one JSON
line per test to the file $FAULTSIM_SUITE_CPU_LOG names."""
from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import pytest  # a dependency of faultsim itself (its plugin)

ROOT = Path(__file__).resolve().parent.parent
LOG = "FAULTSIM_SUITE_CPU_LOG"
SHOWN = 15


def _cpu() -> tuple[float, float]:
    own = resource.getrusage(resource.RUSAGE_SELF)
    reaped = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + reaped.ru_utime, own.ru_stime + reaped.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):  # noqa: D103 (a pytest hook)
    path = os.environ.get(LOG)
    user, system = _cpu()
    started = time.monotonic()
    yield
    if path:
        user_, system_ = _cpu()
        line = json.dumps({"test": item.nodeid, "user": round(user_ - user, 3),
                           "sys": round(system_ - system, 3),
                           "wall": round(time.monotonic() - started, 3)})
        with open(path, "a", encoding="utf-8") as f:  # one short line: appended whole
            f.write(line + "\n")


def cpu(row: dict) -> float:
    return row["user"] + row["sys"]


def summarize(rows: list[dict]) -> list[str]:
    total_cpu = sum(cpu(r) for r in rows)
    total_wall = sum(r["wall"] for r in rows)
    by_file, count = Counter(), Counter()
    for r in rows:
        name = r["test"].split("::")[0]
        by_file[name] += cpu(r)
        count[name] += 1
    lines = [json.dumps({"tests": len(rows), "cpu_s": round(total_cpu, 1),
                         "user_s": round(sum(r["user"] for r in rows), 1),
                         "sys_s": round(sum(r["sys"] for r in rows), 1),
                         "system_share": round(sum(r["sys"] for r in rows) / total_cpu, 3)
                         if total_cpu else None,
                         "wall_to_cpu_ratio": round(total_wall / total_cpu, 2)
                         if total_cpu else None})]
    lines.append(f"{'CPU s':>8}  {'tests':>5}  file")
    lines += [f"{v:8.1f}  {count[k]:5d}  {k}" for k, v in by_file.most_common(SHOWN)]
    lines.append(f"{'CPU s':>8}  {'wall s':>7}  {'wall/CPU':>8}  test")
    for r in sorted(rows, key=lambda r: -cpu(r))[:SHOWN]:
        lines.append(f"{cpu(r):8.1f}  {r['wall']:7.1f}  {r['wall'] / max(cpu(r), 0.01):8.1f}"
                     f"  {r['test']}")
    waits = [r for r in rows if r["wall"] - cpu(r) > 10
             and r["wall"] > 5 * max(cpu(r), 0.01)]
    if waits:
        lines.append("waiting (wall above 5x CPU and 10 s more):")
        lines += [f"{cpu(r):8.1f}  {r['wall']:7.1f}  {r['test']}"
                  for r in sorted(waits, key=lambda r: -r["wall"])[:SHOWN]]
    return lines


def main(argv: list[str]) -> int:
    if argv[:1] in (["-h"], ["--help"]):
        print(__doc__)
        return 0
    with tempfile.TemporaryDirectory(prefix="suite-cpu-") as folder:
        log = os.path.join(folder, "tests.jsonl")
        env = {**os.environ, LOG: log,
               "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT / "bench"),
                                                           os.environ.get("PYTHONPATH")]))}
        args = argv or ["-n", "4"]
        code = subprocess.call([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                                "-p", "suite_cpu", *args], cwd=ROOT, env=env)
        rows = []
        if os.path.exists(log):
            with open(log, encoding="utf-8") as f:
                rows = [json.loads(line) for line in f if line.strip()]
    if not rows:
        print("suite_cpu: no test ran", file=sys.stderr)
        return code or 1
    print("\n".join(summarize(rows)))
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
