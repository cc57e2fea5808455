"""Benchmark: where the pair stage's wall time goes (issue 52), on the reference agent's
N-step lookups (bench/scaling.py's scenario), two crashes, representative coverage, one
request of horizon, in-process, forking.

The sweeping process's time inside the pair stage is stamped by what it was doing and how
many forked children of the pair sweeps were out meanwhile. Prints one JSON line:
  explored, resumed    second crash states judged, and resumed (the counts to compare)
  stage_seconds        the pair stage's wall time
  cpu_seconds          CPU of the whole two-crash run: this process, and its forks
  parent_cpu_share     this process's share of that CPU
  cores_busy           cpu_seconds / the run's wall time (2 is the bound on two cores)
  shares               of the stage's wall: the parent `running` or `blocked` (collecting
                       children, or waiting for the crash feed), with 0, 1 or 2+ children
                       out; on two cores with two workers, "running, 0" leaves a core idle
  wait_all_share       of the stage's wall: blocked at a sweep's end for its last children
  feed_share           of the stage's wall: blocked waiting for the crash feed
On a shared machine the seconds stretch with the load; the shares are the figure to read.

Run: python bench/pair_wall.py [--steps 25] [--workers 2]
  FAULTSIM_BENCH_ROOT=/path/to/other/checkout python bench/pair_wall.py ...
  measures that checkout's faultsim (the code before a change)
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import tempfile
import weakref
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CODE = Path(os.environ.get("FAULTSIM_BENCH_ROOT") or ROOT)
sys.path.insert(0, str(CODE))
sys.path.insert(0, str(ROOT / "bench"))

import freezegun.api as real_time  # noqa: E402  (time is frozen inside the runs; this is not)

import faultsim  # noqa: E402
import reference_agent  # noqa: E402
from faultsim.inprocess import crash_feed, forking, pairs  # noqa: E402
from scaling import bundled, scenario_text  # noqa: E402


def now() -> float:
    # looked up on each call: freezegun patches module globals equal to the real clock
    return real_time.real_perf_counter()


def cpu() -> tuple[float, float]:
    me, kids = (resource.getrusage(w) for w in (resource.RUSAGE_SELF,
                                                resource.RUSAGE_CHILDREN))
    return me.ru_utime + me.ru_stime, kids.ru_utime + kids.ru_stime


class Clock:
    """The stage's wall, by the parent's state and the children out at each stamp."""

    def __init__(self) -> None:
        self.pools: weakref.WeakSet = weakref.WeakSet()
        self.spent: dict = defaultdict(float)
        self.last: float | None = None
        self.blocked = self.in_stage = False
        self.wait_all = self.feed = 0.0

    def stamp(self) -> None:
        t = now()
        if self.last is not None and self.in_stage:
            out = min(2, sum(len(p.children) for p in self.pools))
            self.spent[("blocked" if self.blocked else "running", out)] += t - self.last
        self.last = t


def install(clock: Clock) -> None:
    def around(owner, name, blocked=None, total=None):
        inner = getattr(owner, name)

        def wrapped(*args, **kwargs):
            clock.stamp()
            was, started = clock.blocked, now()
            if blocked is not None:
                clock.blocked = blocked(*args, **kwargs)
            try:
                return inner(*args, **kwargs)
            finally:
                clock.stamp()
                clock.blocked = was
                if total is not None and clock.in_stage:
                    setattr(clock, total, getattr(clock, total) + now() - started)
        setattr(owner, name, wrapped)

    init = forking._Pool.__init__

    def pool_init(self, *args, **kwargs):
        init(self, *args, **kwargs)
        clock.pools.add(self)

    forking._Pool.__init__ = pool_init
    around(forking._Pool, "_collect", blocked=lambda self, block: block)
    around(forking._Pool, "_fork_for")
    around(forking._Pool, "_finish")
    around(forking._Pool, "wait_all", total="wait_all")
    around(crash_feed.CrashFeed, "_take", blocked=lambda self, point: True, total="feed")
    stage = pairs.sweep_pairs

    def sweep_pairs(*args, **kwargs):
        clock.in_stage, clock.last = True, now()
        try:
            return stage(*args, **kwargs)
        finally:
            clock.stamp()
            clock.in_stage = False

    pairs.sweep_pairs = sweep_pairs
    # explore.py imported it by name
    from faultsim.inprocess import explore as explore_module
    explore_module.sweep_pairs = sweep_pairs


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=25)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    path = bundled(args.steps)
    with tempfile.TemporaryDirectory(prefix="faultsim-pair-wall-") as tmp:
        if path is None:
            path = Path(tmp) / f"lookups_{args.steps}_steps.toml"
            path.write_text(scenario_text(args.steps))
        scenario = faultsim.load_scenario(path)
        clock = Clock()
        install(clock)
        (p0, c0), w0 = cpu(), now()
        report = faultsim.explore(reference_agent.make_agent, scenario,
                                  crash_model="process", crashes=2, workers=args.workers,
                                  coverage="representative", horizon=1)
        (p1, c1), wall = cpu(), now() - w0
    (run,) = report.runs
    assert report.ok, "the reference agent must pass the pair sweep it benchmarks"
    d = run.depths[2]
    stage = sum(clock.spent.values()) or 1e-9
    parent, children = p1 - p0, c1 - c0
    print(json.dumps({
        "steps": args.steps, "explored": d.explored, "resumed": d.resumed,
        "stage_seconds": round(stage, 1), "cpu_seconds": round(parent + children, 1),
        "parent_cpu_share": round(parent / max(parent + children, 1e-9), 3),
        "cores_busy": round((parent + children) / max(wall, 1e-9), 2),
        "shares": {f"{state}, {out}{'+' if out == 2 else ''}": round(t / stage, 3)
                   for (state, out), t in sorted(clock.spent.items())},
        "wait_all_share": round(clock.wait_all / stage, 3),
        "feed_share": round(clock.feed / stage, 3)}))


if __name__ == "__main__":
    main()
