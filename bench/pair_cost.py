"""Benchmark: where the representative pair stage's CPU goes.

Sweeps the N-step lookups of bench/scaling.py with two crashes under `--coverage
representative` (the reference agent, process model, in-process mode) in this
interpreter, and counts the CPU of the pair stage's parts apart: `learn` (a first crash's
course learned afresh, `inprocess.pairs.course_of`) and `judge` (each course's driver and
its second crashes, `sweep_after_first`), each as the sweeping process's own CPU (`self`:
the drivers, the clean run again up to each first crash, forks, bookkeeping) and its
forks' (`children`: the second crashes' kills and resumed runs). Prints one JSON line:
  total_cpu      the whole two-crash run's CPU (its clean runs and single-crash stage too)
  explored, resumed, courses, course_kill_points, judged   the pair stage's figures
  parts          per part: calls, self_cpu, children_cpu
For where within the sweeping process, attach py-spy to it (`py-spy record --pid P`).

Run: python bench/pair_cost.py --steps 50 [--horizon 1] [--workers 2]
"""
from __future__ import annotations

import argparse
import json
import resource
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT.parent))  # reference_agent
sys.path.insert(0, str(ROOT))


def cpu() -> tuple[float, float]:
    """CPU seconds of this process, and of its forks that have ended."""
    own, kids = (resource.getrusage(w) for w in (resource.RUSAGE_SELF,
                                                  resource.RUSAGE_CHILDREN))
    return own.ru_utime + own.ru_stime, kids.ru_utime + kids.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=25)
    parser.add_argument("--horizon", type=int, default=None)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    import faultsim
    import reference_agent
    from faultsim.inprocess import pairs
    from scaling import bundled, scenario_text

    parts: dict = {}

    def counted(name: str, key: str) -> None:
        real = getattr(pairs, name)

        def wrapper(*a, **k):
            before = cpu()
            try:
                return real(*a, **k)
            finally:
                after = cpu()
                part = parts.setdefault(key, {"calls": 0, "self_cpu": 0.0,
                                              "children_cpu": 0.0})
                part["calls"] += 1
                part["self_cpu"] += after[0] - before[0]
                part["children_cpu"] += after[1] - before[1]
        setattr(pairs, name, wrapper)

    counted("course_of", "learn")
    counted("sweep_after_first", "judge")
    with tempfile.TemporaryDirectory(prefix="faultsim-pair-cost-") as tmp:
        path = bundled(args.steps)
        if path is None:
            path = Path(tmp) / f"lookups_{args.steps}_steps.toml"
            path.write_text(scenario_text(args.steps))
        scenario = faultsim.load_scenario(path)
        start = sum(cpu())
        report = faultsim.explore(reference_agent.make_agent, scenario,
                                  crash_model="process", crashes=2, workers=args.workers,
                                  coverage="representative",
                                  **({} if args.horizon is None else
                                     {"horizon": args.horizon}))
    (run,) = report.runs
    assert report.ok, "the reference agent must pass"
    d, covered = run.depths[2], run.pair_coverage
    print(json.dumps({
        "steps": args.steps, "horizon": args.horizon, "total_cpu": round(sum(cpu()) - start, 1),
        "explored": d.explored, "resumed": d.resumed,
        "courses": covered["resumed_courses"], "course_kill_points": covered["kill_points"],
        "judged": covered["judged"],
        "parts": {k: {n: round(v, 1) if isinstance(v, float) else v for n, v in p.items()}
                  for k, p in parts.items()}}))


if __name__ == "__main__":
    main()
