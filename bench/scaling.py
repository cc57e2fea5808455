"""Benchmark: how the exhaustive sweep's cost grows with the length of the task.

Generates N-step scenarios (N read-only lookups over one conversation, then one final
answer: the shape of scenarios/research_50_steps.toml without its writes) and sweeps the
reference agent on each, single crash, process model, in-process mode. Each N runs in a
fresh interpreter so that its peak memory is its own. Prints one line per N, then, last,
one JSON line:
  steps                N, in order
  kill_points          kill points in the golden trace, by N
  sweep_seconds        the single-crash sweep's wall time (report.sweep_seconds), by N
  growth               log(time ratio) / log(N ratio) between each pair of neighbours
                       (1.0: linear in N; 2.0: quadratic), as "25->50": exponent
  ms_per_kill_point    sweep_seconds / kill points, by N (faultsim's and the agent's work
                       per kill point: flat in N when cost follows new work)
  resumed              crash states resumed (not shared with an equal one), by N
  peak_rss_mb          the largest resident set of the interpreter that swept N
  pairs                for N <= --pairs-max: the two-crash sweep's schedules, explored,
                       resumed and seconds, by N

Ratios within one run are the figures to read: timings on a loaded machine are noisy.

Run: python bench/scaling.py [--max-steps 400] [--pairs-max 50] [--workers 2]
  FAULTSIM_BENCH_ROOT=/path/to/other/checkout python bench/scaling.py ...
  measures that checkout's faultsim with this bench (the code before a change)
"""
from __future__ import annotations

import argparse
import json
import math
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# FAULTSIM_BENCH_ROOT: measure another checkout (the code before a change) with this bench
CODE = Path(os.environ.get("FAULTSIM_BENCH_ROOT") or ROOT)
sys.path.insert(0, str(CODE))

STEPS = (25, 50, 100, 200, 400)
CARRIERS = ("Nordpost", "EuroShip", "FastLane", "Bluebird")


def scenario_text(n: int) -> str:
    """N read-only lookups, then the final answer: a checkpoint that grows every turn."""
    from faultsim.scenario import SECTIONS

    answer = f"Looked up {n} orders."
    lines = [f'id = "lookups_{n}_steps"',
             f'task = "Look up the orders ORD-1 to ORD-{n}, one at a time, and say how many."',
             f'expected_final_answer = "{answer}"',
             *([f"max_turns = {n + 10}"] if "max_turns" in SECTIONS["scenario"] else []),
             "", "[fault_profile]", 'crash_models = ["process"]', "crashes = 1",
             "", "[services.orders]", 'kind = "readonly"']
    for i in range(1, n + 1):
        lines.append(f'records."ORD-{i}" = {{ carrier = "{CARRIERS[i % 4]}", '
                     f"promised_days = {3 + i % 3}, delivered_after_days = {3 + i % 5} }}")
    for i in range(1, n + 1):
        lines += ["", "[[turns]]",
                  f'tool_calls = [{{ name = "lookup_order", input = {{ order_id = "ORD-{i}" }} }}]']
    lines += ["", "[[turns]]", f'final = "{answer}"', ""]
    return "\n".join(lines)


def one(n: int, workers: int, pairs: bool) -> dict:
    """Sweep the N-step scenario in this interpreter; the figures as a dict."""
    import faultsim
    import reference_agent

    with tempfile.TemporaryDirectory(prefix="faultsim-scaling-") as tmp:
        path = Path(tmp) / f"lookups_{n}_steps.toml"
        path.write_text(scenario_text(n))
        scenario = faultsim.load_scenario(path)
    out: dict = {"steps": n}
    started = time.perf_counter()
    report = faultsim.explore(reference_agent.make_agent, scenario, crash_model="process",
                              crashes=1, workers=workers)
    (run,) = report.runs
    assert report.ok, f"the reference agent must pass the {n}-step sweep"
    out.update(kill_points=len(run.kill_points), crash_states=len(run.verdicts),
               sweep_seconds=round(report.sweep_seconds, 2),
               wall_seconds=round(time.perf_counter() - started, 2),
               resumed=run.judged)
    if pairs:
        report = faultsim.explore(reference_agent.make_agent, scenario, crash_model="process",
                                  crashes=2, workers=workers)
        (run,) = report.runs
        assert report.ok, f"the reference agent must pass the {n}-step pair sweep"
        d = run.depths[2]
        out["pairs"] = {"schedules": d.total, "explored": d.explored, "resumed": d.resumed,
                        "seconds": round(d.seconds, 2)}
    out["peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--max-steps", type=int, default=400,
                        help="the largest N to sweep (of 25, 50, 100, 200, 400)")
    parser.add_argument("--pairs-max", type=int, default=50,
                        help="sweep two-crash schedules for N up to this (0: none)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--one", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--pairs", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one is not None:  # the child: one N, one JSON line
        print(json.dumps(one(args.one, args.workers, args.pairs)))
        return
    rows = []
    for n in [s for s in STEPS if s <= args.max_steps]:
        cmd = [sys.executable, __file__, "--one", str(n), "--workers", str(args.workers)]
        if n <= args.pairs_max:
            cmd.append("--pairs")
        done = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
        if done.returncode != 0:
            sys.exit(f"bench/scaling.py: N={n} failed:\n{done.stderr[-2000:]}")
        row = json.loads(done.stdout.strip().splitlines()[-1])
        rows.append(row)
        print(f"N={n:4}: {row['kill_points']} kill points, {row['crash_states']} crash states,"
              f" {row['resumed']} resumed, sweep "
              f"{row['sweep_seconds']:.1f}s = {1000 * row['sweep_seconds'] / row['kill_points']:.2f}"
              f" ms per kill point, peak RSS {row['peak_rss_mb']} MB"
              + (f"; pairs {row['pairs']}" if "pairs" in row else ""), flush=True)
    growth = {}
    for a, b in zip(rows, rows[1:]):
        growth[f"{a['steps']}->{b['steps']}"] = round(
            math.log(b["sweep_seconds"] / max(a["sweep_seconds"], 1e-9))
            / math.log(b["steps"] / a["steps"]), 2)
    print(json.dumps({
        "steps": [r["steps"] for r in rows],
        "kill_points": [r["kill_points"] for r in rows],
        "sweep_seconds": [r["sweep_seconds"] for r in rows],
        "growth": growth,
        "ms_per_kill_point": [round(1000 * r["sweep_seconds"] / r["kill_points"], 3)
                              for r in rows],
        "resumed": [r["resumed"] for r in rows],
        "peak_rss_mb": [r["peak_rss_mb"] for r in rows],
        "pairs": {str(r["steps"]): r["pairs"] for r in rows if "pairs" in r},
    }))


if __name__ == "__main__":
    main()
