"""Proof that a refactoring changed nothing: `faultsim run --json` before and after.

Runs a fixed set of `faultsim run` commands (the reference agent and mutants on the bundled
scenarios, both crash models, schedules of two crashes where the profile allows, and the
database stores in subprocess mode), strips what legitimately varies between runs (timings),
and either records the reports as a baseline or compares them with one. Prints one line and
exits non-zero when any report (or exit status) differs.

Run from the project root:
  python bench/same_json.py --record /tmp/baseline      # on the code before the change
  python bench/same_json.py --compare /tmp/baseline     # on the code after it

Across interpreters (issue 54: the reports are the same on every CPython faultsim is tested
on): record with one, compare with another's venv (faultsim installed in it):
  python bench/same_json.py --record /tmp/py311
  python bench/same_json.py --compare /tmp/py311 --python .venv-3.13/bin/python

`--workers 1` throughout unless `--workers N` says otherwise: the report is the same on any
worker count (tests/test_worker_count.py), so a baseline recorded with `--workers 0` (one
state after another, the replaying executor) checks the forking executor when compared with
`--workers 2`.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

# (name, arguments after `faultsim run`). Small enough for a few minutes on two cores.
MUTANTS = "reference_agent.mutants"
RUNS = [
    ("tiny-reference", ["tests/data/tiny.toml", "--crash-model", "all", "--crashes", "2"]),
    ("tiny-save_b_only", ["tests/data/tiny.toml", "--agent", f"{MUTANTS}.save_b_only",
                          "--crash-model", "all", "--crashes", "2"]),
    ("tiny-rename_without_fsync", ["tests/data/tiny.toml", "--agent",
                                   f"{MUTANTS}.rename_without_fsync", "--crash-model", "all",
                                   "--crashes", "2"]),
    ("tiny-reconcile_in_place", ["tests/data/tiny.toml", "--agent",
                                 f"{MUTANTS}.reconcile_in_place", "--crash-model", "all",
                                 "--crashes", "2"]),
    ("tiny-orphan_tool_use", ["tests/data/tiny.toml", "--agent", f"{MUTANTS}.orphan_tool_use",
                              "--crash-model", "all", "--crashes", "1"]),
    # a bundled scenario at its own fault profile (one crash)
    ("refunds-reference", ["scenarios/refunds.toml", "--crash-model", "all"]),
    ("refunds-key_after_effect", ["scenarios/refunds.toml", "--agent",
                                  f"{MUTANTS}.key_after_effect", "--crash-model", "all"]),
    # the stores: subprocess mode (auto picks it for [store] sqlite/redis)
    ("stores-reference", ["scenarios/stores/", "--mode", "subprocess"]),
    ("stores-redis_two_writes", ["scenarios/stores/refunds_redis.toml", "--mode", "subprocess",
                                 "--agent", f"{MUTANTS}.redis_two_writes"]),
]
# `--wide` (issue 54: "the same on every version for scenarios/ and every mutant"): each
# bundled scenario at its own fault profile, and every mutant of the reference agent not
# above on tiny.toml under both crash models (two crashes for those only two expose), the
# store mutants on their store's scenario. Several minutes per interpreter on two cores.
PAIRED = {"repeat_before_save", "recovery_two_writes"}  # caught only by a second crash
REDIS = "scenarios/stores/refunds_redis.toml"
STORE_MUTANTS = {"redis_two_writes": REDIS, "ttl_on_running": REDIS,
                 "recovery_two_writes": "scenarios/stores/refunds_sqlite.toml"}


def wide_runs() -> list[tuple[str, list[str]]]:
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    named = {n for n, _ in RUNS}
    # the bundled scenarios README's first command runs (not its folders': the stores are
    # above, the LangGraph ones need the extra, the long one is a benchmark's)
    runs = [(f"scenario-{s.removesuffix('.toml')}", [f"scenarios/{s}"])
            for s in sorted(os.listdir(os.path.join(here, "scenarios"))) if s.endswith(".toml")]
    for file in sorted(os.listdir(os.path.join(here, "reference_agent", "mutants"))):
        mutant = file.removesuffix(".py")
        if not file.endswith(".py") or mutant == "__init__" or f"tiny-{mutant}" in named:
            continue
        if mutant in STORE_MUTANTS:
            if f"stores-{mutant}" not in named:
                runs.append((f"stores-{mutant}", [
                    STORE_MUTANTS[mutant], "--mode", "subprocess", "--agent",
                    f"{MUTANTS}.{mutant}", "--crashes", "2" if mutant in PAIRED else "1"]))
            continue
        runs.append((f"tiny-{mutant}", ["tests/data/tiny.toml", "--agent",
                                        f"{MUTANTS}.{mutant}", "--crash-model", "all",
                                        "--crashes", "2" if mutant in PAIRED else "1"]))
    return runs


# (timeout_seconds: an incarnation's limit, derived under "auto" from the clean runs' time)
TIMING_KEYS = {"seconds", "time", "elapsed", "duration", "wall_seconds", "timeout_seconds"}
# how the work was done, not what was found: resumed runs cut where they reached the clean
# run's state (faultsim.inprocess.convergence), and why none was; how often each shortcut
# applied (`shortcuts`, faultsim.reports.shortcuts: its `leads` count depends on the worker count
# and the shards, and its other counts change with every change to a shortcut)
WORK_KEYS = {"crash_states_converged", "convergence", "converged", "shortcuts"}
# of longer schedules, how many were resumed and how many composed from the single-crash
# sweep instead (faultsim.inprocess.after_convergence): fewer resumed runs is what a change
# to the sharing is for, so before and after are compared without them (`explored` and
# the verdicts are what was found); one version on any worker count, path or shard gives
# the same ones (the tests that strip reports keep them)
SHARING_KEYS = {"resumed", "after_convergence", "composed"}


def strip(value, sharing: bool = True):
    """The report without its timings (they differ on every run), its convergence counts
    (a cut gives the same verdicts, and an older faultsim did not count it) and, with
    `sharing=False`, how many longer schedules were resumed or composed."""
    drop = TIMING_KEYS | WORK_KEYS | (set() if sharing else SHARING_KEYS)
    if isinstance(value, dict):
        return {k: strip(v, sharing) for k, v in value.items() if k not in drop}
    if isinstance(value, list):
        return [strip(v, sharing) for v in value]
    return value


# `--resumed-aside`: also how many single crash states were resumed rather than shared with
# an equal one. It once differed by one across interpreters (issue 54): the forking
# executor's decisions followed the timing, which the interpreter's shortcuts changed; they
# no longer do (docs/explanation/engine.md, "Python versions") and CI compares it. Kept for
# comparing with a baseline recorded before that.
RESUMED_KEYS = {"crash_states_resumed"}


def run(name, args, tmp, python=sys.executable, resumed_aside=False, workers=1):
    out = os.path.join(tmp, f"{name}.raw.json")
    cmd = [python, "-m", "faultsim.cli", "run", *args, "--workers", str(workers), "--json",
           out]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    try:
        with open(out) as f:
            report = strip(json.load(f), sharing=False)
        if resumed_aside:
            for r in report.get("runs", []):
                for k in RESUMED_KEYS:
                    r.pop(k, None)
    except (OSError, ValueError):
        report = None
    return {"exit": proc.returncode, "report": report,
            "stderr_tail": proc.stderr.strip().splitlines()[-3:] if report is None else []}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--record", metavar="DIR", help="save the reports as the baseline")
    g.add_argument("--compare", metavar="DIR", help="compare the reports with the baseline")
    p.add_argument("--jobs", type=int, default=2, help="commands at once (default: 2)")
    p.add_argument("--resumed-aside", action="store_true",
                   help="leave out crash_states_resumed (how many states were resumed, not "
                        "shared): see RESUMED_KEYS")
    p.add_argument("--wide", action="store_true",
                   help="also every bundled scenario and every mutant (several minutes)")
    p.add_argument("--only", action="append", help="run only this named command (repeatable)")
    p.add_argument("--workers", type=int, default=1,
                   help="faultsim's --workers for every command (default: 1)")
    p.add_argument("--python", default=sys.executable,
                   help="the interpreter that runs faultsim (default: this one)")
    a = p.parse_args(argv)
    runs = [r for r in RUNS + (wide_runs() if a.wide else [])
            if not a.only or r[0] in a.only]
    directory = a.record or a.compare
    os.makedirs(directory, exist_ok=True)
    tmp = os.path.join(directory, "raw")
    os.makedirs(tmp, exist_ok=True)
    with ThreadPoolExecutor(a.jobs) as pool:
        results = dict(zip([n for n, _ in runs],
                           pool.map(lambda r: run(r[0], r[1], tmp, a.python,
                                                     a.resumed_aside, a.workers), runs)))
    broken = [n for n, r in results.items() if r["report"] is None]
    if a.record:
        for name, result in results.items():
            with open(os.path.join(directory, f"{name}.json"), "w") as f:
                json.dump(result, f, indent=1, sort_keys=True)
        status = f"; no report from {broken}" if broken else ""
        print(f"same_json: recorded {len(results)} runs in {directory}{status}")
        return 1 if broken else 0
    differ = []
    for name, result in results.items():
        try:
            with open(os.path.join(directory, f"{name}.json")) as f:
                base = json.load(f)
        except OSError:
            differ.append(f"{name} (no baseline)")
            continue
        if json.loads(json.dumps(result, sort_keys=True)) != base:
            differ.append(name)
            with open(os.path.join(directory, f"{name}.now.json"), "w") as f:
                json.dump(result, f, indent=1, sort_keys=True)
    if differ:
        print(f"same_json: {len(differ)} of {len(results)} runs differ: {', '.join(differ)} "
              f"(the new reports are next to the baseline as NAME.now.json)")
        return 1
    print(f"same_json: all {len(results)} runs give the same JSON as the baseline "
          f"(timings removed)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
