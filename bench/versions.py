"""Benchmark: what a sweep costs on each interpreter, and what the CPython shortcuts save.

faultsim's shortcuts read CPython's bytecode and frames (faultsim/inprocess/cpython.py):
unwind.py skips the fork of a kill whose aftermath provably runs nothing, convergence.py
cuts a resumed run that reached the clean run's state. On an interpreter cpython.KNOWN
does not list, both take the long way. This runs the same `faultsim run` on each
interpreter given (each a python with faultsim installed, e.g. the venvs .ci/versions
makes) and, on this one, once more with cpython.KNOWN emptied (this interpreter as an
unknown version: the long way alone, with the interpreter held fixed). Prints one line per
run: CPU seconds (the sweep and every process it forked, less noisy than wall time on a
shared machine), wall seconds, resumed runs cut by convergence, and the ratio to this
interpreter's run with its shortcuts.

Run from the project root:
  python bench/versions.py .venv-3.13/bin/python .venv-3.14/bin/python [--steps 25]
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from scaling import scenario_text  # noqa: E402

LONG_WAY = ("import sys; from faultsim.inprocess import cpython; cpython.KNOWN.clear(); "
            "from faultsim.cli import main; sys.exit(main(sys.argv[1:]))")
SHORT_WAY = "import sys; from faultsim.cli import main; sys.exit(main(sys.argv[1:]))"


def sweep(python: str, code: str, scenario: str, out: str) -> dict:
    """One `faultsim run` in a child process: its CPU (with its children's), wall time and
    JSON report."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run([python, "-c", code, "run", scenario, "--crash-model", "process",
                           "--crashes", "1", "--json", out], capture_output=True, text=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"{python}: exit {done.returncode}: {done.stderr[-2000:]}")
    report = json.loads(Path(out).read_text())
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    run = report["runs"][0]
    return {"cpu": cpu, "wall": wall, "converged": run.get("crash_states_converged"),
            "why": run.get("convergence"), "ok": report["ok"]}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("pythons", nargs="*", help="other interpreters, faultsim installed in each")
    p.add_argument("--steps", type=int, default=25,
                   help="the reference agent's lookups scenario of this many steps (default 25)")
    a = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="faultsim-versions-") as tmp:
        lookups = Path(tmp) / f"lookups_{a.steps}_steps.toml"
        lookups.write_text(scenario_text(a.steps))
        for scenario in ("tests/data/tiny.toml", str(lookups)):
            runs = [(f"{sys.version_info[0]}.{sys.version_info[1]}", sys.executable,
                     SHORT_WAY), (f"{sys.version_info[0]}.{sys.version_info[1]} long way",
                                  sys.executable, LONG_WAY)]
            for python in a.pythons:
                version = subprocess.run([python, "-c", "import sys; print('%d.%d' % "
                                          "sys.version_info[:2])"], capture_output=True,
                                         text=True, check=True).stdout.strip()
                runs.append((version, python, SHORT_WAY))
            base = None
            for name, python, code in runs:
                r = sweep(python, code, scenario, os.path.join(tmp, "report.json"))
                base = base or r["cpu"]
                print(f"{Path(scenario).name:24} {name:16} cpu {r['cpu']:7.1f} s  wall "
                      f"{r['wall']:6.1f} s  converged {r['converged']!s:>4}  "
                      f"x{r['cpu'] / base:.2f}  {'ok' if r['ok'] else 'NOT OK'}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
