"""Benchmark: faultsim's own bookkeeping per kill point, by the length of the task.

What the sweep's parent does at every kill point, without the forks and resumed runs
around it: the sandbox's snapshot, the crash states (each torn version of a write), the
world's signature, the memo keys of each state (exact, masked and absent digests) and the
state guards (`checkpoint_whole`, ...). One clean run of the reference agent on the N-step
scenario of bench/scaling.py drives it, its policy doing that work at each kill point and
timing it (process CPU). Issue 32 asks this to stay flat in N: O(bytes changed) per event,
not O(size of the files). Prints one line per N, then one JSON line:
  steps, kill_points, ms_per_kill_point (CPU), growth (log ratio per log N ratio).

Run: python bench/per_point.py [--steps 25,50,100,200]
  FAULTSIM_BENCH_ROOT=/path/to/other/checkout python bench/per_point.py  (the code before)
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CODE = Path(os.environ.get("FAULTSIM_BENCH_ROOT") or ROOT)
sys.path.insert(0, str(CODE))
sys.path.insert(1, str(ROOT / "bench"))


class Bookkeeping:
    """Tracer policy: at each kill point, what the forking executor's parent computes."""

    def __init__(self, ex, golden, world, boundary, torn) -> None:
        self.ex, self.golden, self.world = ex, golden, world
        self.boundary, self.torn = boundary, torn
        self.cpu, self.points = 0.0, 0

    def work(self, points, write) -> None:
        from faultsim.inprocess.sandbox import crash_states
        from faultsim.judge.oracle import STATE_GUARDS, CrashRun, judge
        from faultsim.pipeline.incarnation import world_signature
        from faultsim.pipeline.sweep import absent_digest, masked_digest

        started = time.process_time()
        signature = world_signature(self.world)
        base = self.ex.interposer.snapshot()
        versions = None
        if write is not None:
            try:
                from faultsim.core.crashmodel import torn_versions
                versions = torn_versions(write, [p.offset for p in points])
            except ImportError:  # the code before: one version at a time
                versions = [write.torn(p.offset) for p in points]
        watch = write.path if write is not None else self.ex.interposer.last_touched
        for n, point in enumerate(points):
            snapshot = base if write is None else {**base, write.path: versions[n]}
            for state in crash_states(self.ex, "process", snapshot):
                (state.digest(), signature)
                masked_digest(state, watch)
                absent_digest(state, watch)
                judge(self.golden, CrashRun([point], state, None, after_kill=[],
                                            resume_positions=[]), STATE_GUARDS)
        self.cpu += time.process_time() - started
        self.points += len(points)

    def after(self, tracer, event) -> None:
        point = self.boundary.get(event.index)
        if point is not None:
            self.work([point], None)

    def before_write(self, tracer, write):
        points = self.torn.get(tracer.next_index)
        if points:
            self.work(points, write)
        return None


def one(n: int) -> dict:
    import faultsim
    import reference_agent
    from faultsim.inprocess.sandbox import Explorer
    from faultsim.pipeline.sweep import by_event
    from scaling import scenario_text

    with tempfile.TemporaryDirectory(prefix="faultsim-per-point-") as tmp:
        path = Path(tmp) / f"lookups_{n}_steps.toml"
        path.write_text(scenario_text(n))
        scenario = faultsim.load_scenario(path)
    with Explorer(reference_agent.make_agent, scenario, agent_name="reference") as ex:
        golden = ex.golden()
        boundary, torn = by_event(golden.kill_points(golden.trace))
        ex.reset_sandbox()
        world = ex.new_world()
        policy = Bookkeeping(ex, golden, world, boundary, torn)
        ex.incarnation(world, policy, timed=False)
    return {"steps": n, "kill_points": policy.points,
            "ms_per_kill_point": round(1000 * policy.cpu / policy.points, 3)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", default="25,50,100,200")
    args = parser.parse_args()
    rows = []
    for n in [int(x) for x in args.steps.split(",")]:
        row = one(n)
        rows.append(row)
        print(f"N={n:4}: {row['kill_points']} kill points, "
              f"{row['ms_per_kill_point']:.3f} ms of bookkeeping per kill point", flush=True)
    print(json.dumps({
        "steps": [r["steps"] for r in rows],
        "kill_points": [r["kill_points"] for r in rows],
        "ms_per_kill_point": [r["ms_per_kill_point"] for r in rows],
        "growth": {f"{a['steps']}->{b['steps']}": round(
            math.log(b["ms_per_kill_point"] / a["ms_per_kill_point"])
            / math.log(b["steps"] / a["steps"]), 2) for a, b in zip(rows, rows[1:])},
    }))


if __name__ == "__main__":
    main()
