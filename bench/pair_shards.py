"""Representative pairs under --shard (issue 53): a two-crash representative run whole and
in N shards (`--shard I/N`), each a `faultsim run --json` process. Checks, in the same run,
that the shards' `schedules["2"]` counts and `horizon.schedules_past_cut` add up to the
whole run's, that the failing pairs are the whole run's, and that `faultsim report merge`
of the shards equals the whole run's report (timings aside, as bench/same_json.py strips
them); prints one JSON line: per run its depth-2 counts, failing pairs, CPU seconds
(user + system of the process and its forked children) and wall seconds.

Run from the project root:
  python bench/pair_shards.py [--horizon H] [--agent SPEC] [--shards 2 3] [SCENARIO]
(default: tests/data/tiny.toml, reference_agent.mutants.reconcile_in_place, process,
--workers 2, shards 2 and 3 against one whole run)."""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

KEYS = ("total", "explored", "resumed", "converged", "after_convergence", "composed")


def _run(args: list[str]) -> tuple[float, float]:
    """CPU (user + system, with its children) and wall seconds of one faultsim process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "faultsim", *args], check=False,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (round(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime, 1),
            round(time.perf_counter() - started, 1))


def _figures(path: str, cpu: float, wall: float) -> dict:
    with open(path) as f:
        (run,) = json.load(f)["runs"]
    return {**{k: run["schedules"]["2"][k] for k in KEYS},
            "past_cut": (run.get("horizon") or {}).get("schedules_past_cut", {}).get("2"),
            "judged": run["coverage"]["pairs"]["judged"],
            "failing_pairs": len({tuple(v["schedule"]) for v in run["violations"]
                                  if len(v["schedule"]) == 2}),
            "cpu_s": cpu, "wall_s": wall}


def main() -> None:
    from same_json import strip

    ap = argparse.ArgumentParser()
    ap.add_argument("scenario", nargs="?", default="tests/data/tiny.toml")
    ap.add_argument("--agent", default="reference_agent.mutants.reconcile_in_place")
    ap.add_argument("--horizon", type=int, default=None)
    ap.add_argument("--shards", type=int, nargs="+", default=[2, 3])
    ap.add_argument("--workers", type=int, default=2)
    ns = ap.parse_args()
    base = ["run", ns.scenario, "--agent", ns.agent, "--crash-model", "process",
            "--crashes", "2", "--coverage", "representative", "--workers", str(ns.workers)]
    if ns.horizon is not None:
        base += ["--horizon", str(ns.horizon)]
    out: dict = {"scenario": ns.scenario, "agent": ns.agent, "horizon": ns.horizon}
    with tempfile.TemporaryDirectory() as tmp:
        whole = os.path.join(tmp, "whole.json")
        out["whole"] = _figures(whole, *_run(base + ["--json", whole]))
        with open(whole) as f:
            want = strip(json.load(f))
        for n in ns.shards:
            files = [os.path.join(tmp, f"{n}-{i}.json") for i in range(1, n + 1)]
            parts = [_figures(path, *_run(base + ["--shard", f"{i}/{n}", "--json", path]))
                     for i, path in enumerate(files, 1)]
            merged = os.path.join(tmp, f"{n}-merged.json")
            subprocess.run([sys.executable, "-m", "faultsim", "report", "merge", *files,
                            "--json", merged], check=False, stdout=subprocess.DEVNULL)
            with open(merged) as f:
                same = strip(json.load(f)) == want
            adds = {k: sum(p[k] or 0 for p in parts) == (out["whole"][k] or 0)
                    for k in KEYS + ("past_cut", "failing_pairs")}
            out[f"{n} shards"] = {"parts": parts, "counts_add_up": adds,
                                  "merge_equals_whole": same,
                                  "cpu_s_sum": round(sum(p["cpu_s"] for p in parts), 1),
                                  "cpu_s_max": max(p["cpu_s"] for p in parts)}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
