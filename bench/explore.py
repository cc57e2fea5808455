"""Benchmark: the exhaustive single-crash sweep of the reference agent on support_tickets.

Prints a few lines on where the time goes, then, last, one JSON line:
  kill_points          kill points in the golden trace
  crash_states_per_s   crash states judged per second of sweep, per crash model (in-process),
                       and in subprocess mode (real processes on a real directory, each
                       kill a SIGKILL) with the pre-imported fork server, and without it
                       (a fresh interpreter per incarnation, on a sample of kill points:
                       the whole sweep would take an hour)
  bound_ratio          sweep wall time / summed time of the bare resumed runs it contains
                       (1.0 = no overhead beyond the agent's own work on one core; below
                       1 means parallel workers and the equal-state memo beat that bound)
  peak_rss_mb          the largest resident set of this process (children are forks)
  peak_child_rss_mb    the largest resident set of any child that ended (in-process crash
                       runs are forks, mostly pages shared with this process: not to be
                       added to peak_rss_mb; the subprocess mode's servers count here too)
  pairs                the exhaustive sweep of two-crash schedules, per crash model:
                       schedules (every first crash state x every kill point of the run
                       resumed from it), explored (after pruning first crash states equal or
                       equivalent to one already explored), resumed (after sharing verdicts
                       of equal second crash states), explored crash states per second, and
                       where the CPU went: parent_cpu_share (this process's CPU / all CPU of
                       the stage; the parent drives the runs and keeps the books, children
                       resume) and cores_busy (all CPU of the stage / its wall time: with N
                       workers on N cores, N is the bound; about 1 means one process at a
                       time worked while the others waited)

Run: python bench/explore.py [--workers N] [--pairs process|power|all|none]
                             [--no-fork-server-sample K]
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import faultsim  # noqa: E402
import reference_agent  # noqa: E402
from faultsim.real.explore import explore_subprocess  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--workers", type=int, default=None)
    parser.add_argument("--scenario", default=str(ROOT / "scenarios" / "support_tickets.toml"))
    parser.add_argument("--pairs", default="process", choices=["process", "power", "all", "none"],
                        help="crash models whose pair sweep to measure (default: process)")
    parser.add_argument("--no-fork-server-sample", type=int, default=12, metavar="K",
                        help="kill points (spread evenly) for the subprocess run without a "
                        "fork server (default 12; 0 skips it)")
    args = parser.parse_args()
    scenario = faultsim.load_scenario(args.scenario)

    per_s, lines, points = {}, [], 0
    total_wall = total_resume = 0.0
    for model in ("process", "power"):
        started = time.perf_counter()
        report = faultsim.explore(reference_agent.make_agent, scenario, crash_model=model, crashes=1,
                                  workers=args.workers)
        wall = time.perf_counter() - started
        (run,) = report.runs
        assert report.ok, "the reference agent must pass the sweep it benchmarks"
        points = len(run.kill_points)
        states = len(run.verdicts)
        per_s[model] = round(states / report.sweep_seconds, 1)
        total_wall += report.sweep_seconds
        total_resume += run.resume_seconds
        lines.append(
            f"{model:8} {points} kill points, {states} crash states: {run.judged} resumed "
            f"({run.reused} shared with an equal or equivalent state); wall {wall:.1f}s = set-up and "
            f"two clean runs {report.golden_seconds:.1f}s + sweep {report.sweep_seconds:.1f}s "
            f"+ version probe; resumed runs alone {run.resume_seconds:.1f}s "
            f"(mean {1000 * run.resume_seconds / max(1, run.judged):.0f} ms)")
    workers = args.workers or os.cpu_count() or 1
    for fork_server in (True, False):
        if not fork_server and not args.no_fork_server_sample:
            continue
        only = None
        if not fork_server:
            step = max(1, points // args.no_fork_server_sample)
            only = lambda p: p.index % step == 0 and not p.torn  # noqa: E731
        stats: dict = {}
        report = explore_subprocess("reference_agent", scenario, workers=workers,
                                    fork_server=fork_server, only=only, stats=stats)
        assert report.ok, "the reference agent must pass the subprocess sweep"
        key = "subprocess (fork server)" if fork_server else "subprocess (no fork server)"
        per_s[key] = round(stats["crash_states"] / stats["seconds"], 1)
        lines.append(
            f"{key}: {stats['crash_states']} crash states, {stats['kills_landed']} SIGKILLs "
            f"landed, {stats['resumed']} resumed; sweep {stats['seconds']:.1f}s = "
            f"{per_s[key]} crash states/s ({workers} workers)")
    pairs = {}
    models = {"none": [], "all": ["process", "power"]}.get(args.pairs, [args.pairs])
    for model in models:
        cpu, started = _cpu(), time.perf_counter()
        report = faultsim.explore(reference_agent.make_agent, scenario, crash_model=model,
                                  crashes=2, workers=args.workers)
        (run,) = report.runs
        # The CPU of the whole run, not of its pair stage alone (the rest is the golden
        # runs, a few seconds of single crashes and the probe): the figures lean towards the
        # single-crash sweep's, never hide the pair stage's.
        parent, children = (a - b for a, b in zip(_cpu(), cpu))
        wall = time.perf_counter() - started
        assert report.ok, "the reference agent must pass the pair sweep it benchmarks"
        d = run.depths[2]
        pairs[model] = {"schedules": d.total, "explored": d.explored, "resumed": d.resumed,
                        "pruned_ratio": round(d.explored / max(1, d.total), 4),
                        "crash_states_per_s": round(d.explored / max(d.seconds, 1e-9), 1),
                        "seconds": round(d.seconds, 1),
                        "parent_cpu_share": round(parent / max(parent + children, 1e-9), 3),
                        "cores_busy": round((parent + children) / max(wall, 1e-9), 2)}
        lines.append(
            f"{model:8} pairs: {d.total} two-crash schedules over {len(run.verdicts)} first "
            f"crash states; {d.explored} explored after pruning ({100 * d.explored / max(1, d.total):.1f}%), "
            f"{d.resumed} resumed; {d.seconds:.1f}s = {d.explored / max(d.seconds, 1e-9):.0f} "
            f"crash states/s; resumed runs alone {d.resume_seconds:.1f}s; CPU: parent "
            f"{parent:.1f}s, children {children:.1f}s over {wall:.1f}s of wall")
    print("\n".join(lines))
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    peak_child = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    print(json.dumps({"kill_points": points, "crash_states_per_s": per_s,
                      "bound_ratio": round(total_wall / max(total_resume, 1e-9), 3),
                      "peak_rss_mb": round(peak, 1), "peak_child_rss_mb": round(peak_child, 1),
                      "pairs": pairs}))


def _cpu() -> tuple[float, float]:
    """CPU seconds of this process, and of its children that have ended."""
    me, kids = (resource.getrusage(who) for who in (resource.RUSAGE_SELF,
                                                    resource.RUSAGE_CHILDREN))
    return me.ru_utime + me.ru_stime, kids.ru_utime + kids.ru_stime


if __name__ == "__main__":
    main()
