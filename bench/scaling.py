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
  converged            of those, resumed runs cut where they reached the clean run's state
                       at a model request (faultsim.inprocess.convergence), by N
  met                  of those, resumed runs cut where they reached an earlier resumed
                       run's state at its first model request (faultsim.inprocess.leads;
                       varies with the scheduling), by N
  cpu_seconds          CPU of the sweeping interpreter and every process it forked (the
                       clean runs, the driver, the children's resumed runs), by N: less
                       noisy than wall time on a shared machine
  cpu_ms_per_kill_point  cpu_seconds / kill points, by N
  cpu_growth           as growth, of cpu_seconds
  resumed_share        the resumed runs' own (wall) time summed, over cpu_seconds: on an
                       idle machine the share of the work in resumed runs, what
                       convergence would cut (the rest: faultsim's work per kill point,
                       forks, states, keys, guards, and the clean runs); a loaded machine
                       stretches wall time, and the share with it (it can pass 1)
  peak_rss_mb          the largest resident set of the interpreter that swept N
  pairs                for N <= --pairs-max: the two-crash sweep's schedules, explored,
                       resumed, converged, after_convergence (second crashes composed
                       from the single-crash sweep, faultsim.inprocess.after_convergence),
                       seconds (the pair stage's wall time), cpu_seconds and wall_seconds
                       (the whole two-crash exploration's, its clean runs and first
                       crashes too), first_at_horizon (its single crashes' runs cut at the
                       horizon: the first crashes' kept runs, cut under representative
                       coverage) and past_cut (the second-crash kill points past those
                       cuts, taken as the clean run's crashes, not crashed: pairs.py,
                       within_horizon),
                       by N; under representative coverage also the pair stage's choice
                       (faultsim.core.classes.cover_courses): resumed_courses, kill_points
                       (over all of them), classes, chosen, judged, not_crashed, and
                       chosen_by (the second crashes each rule chose: class, first_step,
                       ends; bench/pair_choice.py compares the rule before) and
                       sampled_courses (how many courses the classes' seeded draws
                       land in: the first, the last and per_class seeded others)

Ratios within one run are the figures to read: timings on a loaded machine are noisy.

N = 200 sweeps the bundled long scenario, scenarios/long/lookups_200_steps.toml: this
shape, checked to be scenario_text(200) still (its comment aside).

Run: python bench/scaling.py [--max-steps 400] [--pairs-max 50] [--workers 2] [--steps 25,50]
     [--coverage representative] [--horizon H]
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
BUNDLED = ROOT / "scenarios" / "long"  # lookups_N_steps.toml: the bundled long scenarios
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


def cpu() -> float:
    """CPU seconds of this interpreter and of its children that have ended (the forks)."""
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(
        resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def bundled(n: int) -> Path | None:
    """The bundled scenario of N steps, if there is one and it is still this shape (a
    checkout measured with FAULTSIM_BENCH_ROOT may generate another text: then none)."""
    path = BUNDLED / f"lookups_{n}_steps.toml"
    if path.exists() and path.read_text().endswith(scenario_text(n)):
        return path
    return None


def one(n: int, workers: int, pairs: bool, coverage: str = "exhaustive",
        horizon: int | None = None) -> dict:
    """Sweep the N-step scenario in this interpreter (the bundled file where there is one);
    the figures as a dict."""
    import anthropic  # noqa: F401  (imported once by the first sweep: not per kill point)
    import faultsim
    import reference_agent

    path = bundled(n)
    if path is not None:
        scenario = faultsim.load_scenario(path)
    else:
        with tempfile.TemporaryDirectory(prefix="faultsim-scaling-") as tmp:
            path = Path(tmp) / f"lookups_{n}_steps.toml"
            path.write_text(scenario_text(n))
            scenario = faultsim.load_scenario(path)
    out: dict = {"steps": n, "bundled": bundled(n) is not None}
    # asked only when set: FAULTSIM_BENCH_ROOT may be a checkout from before --horizon
    horizon_kw = {} if horizon is None else {"horizon": horizon}
    started, cpu0 = time.perf_counter(), cpu()
    report = faultsim.explore(reference_agent.make_agent, scenario, crash_model="process",
                              crashes=1, workers=workers, coverage=coverage,
                              **horizon_kw)
    cpu_seconds = cpu() - cpu0
    (run,) = report.runs
    assert report.ok, f"the reference agent must pass the {n}-step sweep"
    out.update(coverage=coverage, crashed_kill_points=len(run.explored),
               classes=len(run.coverage.classes) if run.coverage is not None else None)
    out.update(kill_points=len(run.kill_points), crash_states=len(run.verdicts),
               sweep_seconds=round(report.sweep_seconds, 2),
               wall_seconds=round(time.perf_counter() - started, 2),
               resumed=run.judged, converged=getattr(run, "converged", 0),
               met=getattr(run, "met", 0), horizon=horizon,
               at_horizon=getattr(run, "at_horizon", 0),
               cpu_seconds=round(cpu_seconds, 2),
               resumed_seconds=round(run.resume_seconds, 2))
    if pairs:
        cpu0, began = cpu(), time.perf_counter()
        report = faultsim.explore(reference_agent.make_agent, scenario, crash_model="process",
                                  crashes=2, workers=workers, coverage=coverage,
                              **horizon_kw)
        cpu_seconds = cpu() - cpu0
        (run,) = report.runs
        assert report.ok, f"the reference agent must pass the {n}-step pair sweep"
        d = run.depths[2]
        out["pairs"] = {"schedules": d.total, "explored": d.explored, "resumed": d.resumed,
                        "converged": getattr(d, "converged", 0),
                        "after_convergence": getattr(d, "after_convergence", 0),
                        "at_horizon": getattr(d, "at_horizon", 0),
                        # the two-crash run's single crashes cut at the horizon (its first
                        # crashes' runs, kept for the pair stage), and the second-crash kill
                        # points past those cuts taken as the clean run's, not crashed
                        "first_at_horizon": getattr(run, "at_horizon", 0),
                        "past_cut": getattr(d, "past_horizon", 0),
                        "seconds": round(d.seconds, 2),
                        "cpu_seconds": round(cpu_seconds, 2),
                        "wall_seconds": round(time.perf_counter() - began, 2)}
        # representative coverage: what the pair stage chose over the resumed courses
        covered = getattr(run, "pair_coverage", None)
        if covered:
            out["pairs"].update(
                {k: covered[k] for k in ("resumed_courses", "kill_points", "chosen",
                                         "judged", "not_crashed", "chosen_by")
                 if k in covered},
                classes=len(covered["classes"]),
                sampled_courses=len(covered.get("sampled_courses", ())))
    out["peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--max-steps", type=int, default=400,
                        help="the largest N to sweep (of 25, 50, 100, 200, 400)")
    parser.add_argument("--pairs-max", type=int, default=50,
                        help="sweep two-crash schedules for N up to this (0: none)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--coverage", default="exhaustive",
                        choices=("exhaustive", "representative"),
                        help="the sweep's coverage (faultsim.core.classes; default exhaustive)")
    parser.add_argument("--horizon", type=int, default=None, metavar="H",
                        help="cut resumed runs past their H-th model request after recovery "
                             "(faultsim.inprocess.convergence, the horizon; default: none)")
    parser.add_argument("--steps", default=None,
                        help="comma-separated N to sweep instead of 25, 50, 100, 200, 400")
    parser.add_argument("--one", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--pairs", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one is not None:  # the child: one N, one JSON line
        print(json.dumps(one(args.one, args.workers, args.pairs, args.coverage,
                             args.horizon)))
        return
    rows = []
    steps = [int(x) for x in args.steps.split(",")] if args.steps else STEPS
    for n in [s for s in steps if s <= args.max_steps]:
        cmd = [sys.executable, __file__, "--one", str(n), "--workers", str(args.workers),
               "--coverage", args.coverage] + (
                   [] if args.horizon is None else ["--horizon", str(args.horizon)])
        if n <= args.pairs_max:
            cmd.append("--pairs")
        done = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
        if done.returncode != 0:
            sys.exit(f"bench/scaling.py: N={n} failed:\n{done.stderr[-2000:]}")
        row = json.loads(done.stdout.strip().splitlines()[-1])
        rows.append(row)
        print(f"N={n:4}{' (bundled)' if row.get('bundled') else ''}: {row['kill_points']} kill points"
              f" ({row['crashed_kill_points']} crashed, {row['classes']} classes), "
              f"{row['crash_states']} crash states,"
              f" {row['resumed']} resumed ({row.get('converged', 0)} converged, "
              f"{row.get('met', 0)} met an earlier one"
              + (f", {row['at_horizon']} cut at horizon {row['horizon']}"
                 if row.get("horizon") is not None else "") + "), sweep "
              f"{row['sweep_seconds']:.1f}s = {1000 * row['sweep_seconds'] / row['kill_points']:.2f}"
              f" ms per kill point; CPU {row['cpu_seconds']:.1f}s = "
              f"{1000 * row['cpu_seconds'] / row['kill_points']:.2f} ms per kill point, "
              f"{100 * row['resumed_seconds'] / max(row['cpu_seconds'], 1e-9):.0f} % in "
              f"resumed runs; peak RSS {row['peak_rss_mb']} MB"
              + (f"; pairs {row['pairs']}" if "pairs" in row else ""), flush=True)
    def growth_of(field: str) -> dict:
        return {f"{a['steps']}->{b['steps']}": round(
            math.log(b[field] / max(a[field], 1e-9)) / math.log(b["steps"] / a["steps"]), 2)
            for a, b in zip(rows, rows[1:])}
    print(json.dumps({
        "steps": [r["steps"] for r in rows],
        "coverage": rows[0]["coverage"] if rows else None,
        "horizon": args.horizon,
        "at_horizon": [r.get("at_horizon", 0) for r in rows],
        "kill_points": [r["kill_points"] for r in rows],
        "crashed_kill_points": [r["crashed_kill_points"] for r in rows],
        "classes": [r["classes"] for r in rows],
        "sweep_seconds": [r["sweep_seconds"] for r in rows],
        "growth": growth_of("sweep_seconds"),
        "ms_per_kill_point": [round(1000 * r["sweep_seconds"] / r["kill_points"], 3)
                              for r in rows],
        "resumed": [r["resumed"] for r in rows],
        "converged": [r.get("converged", 0) for r in rows],
        "met": [r.get("met", 0) for r in rows],
        "cpu_seconds": [r["cpu_seconds"] for r in rows],
        "cpu_ms_per_kill_point": [round(1000 * r["cpu_seconds"] / r["kill_points"], 3)
                                  for r in rows],
        "cpu_growth": growth_of("cpu_seconds"),
        "resumed_share": [round(r["resumed_seconds"] / max(r["cpu_seconds"], 1e-9), 2)
                          for r in rows],
        "peak_rss_mb": [r["peak_rss_mb"] for r in rows],
        "pairs": {str(r["steps"]): r["pairs"] for r in rows if "pairs" in r},
    }))


if __name__ == "__main__":
    main()
