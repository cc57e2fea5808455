"""Benchmark: how many second crashes the representative pair stage chooses, by rule.

For the N-step lookups of bench/scaling.py (the reference agent, process model, in-process
mode, `--coverage representative`), runs the single-crash sweep and learns every first
crash's resumed course as the pair stage does, then counts the second crashes chosen over
those courses, without crashing at them (faultsim.inprocess.pairs.sweep_after_first is
replaced by one that only returns the course: this measures the choice, not its cost;
bench/scaling.py --pairs-max measures the cost). Per N it prints the courses, their kill
points, the classes, and the choice of:
  now     classes.cover_courses: per rule (class: a class's first, last and seeded
          occurrences; first_step: each course's first step, its recovery and first
          turn, bar a torn write's later sector cuts; ends: the first and last step of
          the first and the last course)
  before  the rule before commit b98b6cc (re-implemented
          here, to count it on the same courses): the class rule, then every kill point
          of each course's first step (first_step) and last step (last_step)
Last, one JSON line with the same figures.

Run: python bench/pair_choice.py [--steps 25,50,100,200] [--horizon H] [--workers 2]
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT.parent))  # reference_agent
sys.path.insert(0, str(ROOT))


def before(courses, per_class: int, seed: str) -> dict:
    """The rule before: classes' ends and draws, plus every course's first and last step."""
    from faultsim.core.classes import _tools, pair_ranks, signature, steps

    index: dict[str, int] = {}
    rows, edges = [], []
    for points, trace in courses:
        tools = _tools(trace)
        rows.append([index.setdefault(signature(p, trace, tools), len(index))
                     for p in points])
        step = steps(points, trace)
        last = step[-1] if step else 0
        edges.append((sum(1 for s in step if s <= 1),
                      next((n for n, s in enumerate(step) if s == last), len(step))))
    occurrences = [0] * len(index)
    for row in rows:
        for c in row:
            occurrences[c] += 1
    wanted = pair_ranks(list(index), occurrences, per_class, seed)
    seen = [0] * len(index)
    by = {"class": 0, "first_step": 0, "last_step": 0}
    for row, (first_end, last_start) in zip(rows, edges):
        for n, c in enumerate(row):
            if seen[c] in wanted[c]:
                by["class"] += 1
            elif n < first_end:
                by["first_step"] += 1
            elif n >= last_start:
                by["last_step"] += 1
            seen[c] += 1
    return by


def one(n: int, workers: int, horizon: int | None) -> dict:
    import faultsim
    import reference_agent
    from faultsim.inprocess import pairs as pair_stage
    from faultsim.core.classes import PER_CLASS
    from scaling import bundled, scenario_text
    import tempfile

    seen: dict = {}
    real_cover = pair_stage.cover_courses

    def cover(courses, per_class, seed):
        courses = list(courses)
        seen["before"] = before(courses, per_class, seed)
        seen["now"] = choice = real_cover(courses, per_class, seed)
        return choice

    def course_only(ex, golden, runs, model, point, order, state, result, *args):
        return args[-2][0], set()  # the course learned (known_course), nothing judged

    pair_stage.cover_courses = cover
    pair_stage.sweep_after_first = course_only
    path = bundled(n)
    with tempfile.TemporaryDirectory(prefix="faultsim-pair-choice-") as tmp:
        if path is None:
            path = Path(tmp) / f"lookups_{n}_steps.toml"
            path.write_text(scenario_text(n))
        scenario = faultsim.load_scenario(path)
        began = time.perf_counter()
        faultsim.explore(reference_agent.make_agent, scenario, crash_model="process",
                         crashes=2, workers=workers, coverage="representative",
                         **({} if horizon is None else {"horizon": horizon}))
    choice = seen["now"]
    return {"steps": n, "resumed_courses": len(choice.kill_points),
            "kill_points": sum(choice.kill_points), "classes": len(choice.classes),
            "per_class": PER_CLASS, "now": dict(choice.chosen_by),
            "now_total": sum(len(c) for c in choice.chosen), "before": seen["before"],
            "before_total": sum(seen["before"].values()),
            "seconds": round(time.perf_counter() - began, 1)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", default="25,50,100,200")
    parser.add_argument("--horizon", type=int, default=None)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--one", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one is not None:
        print(json.dumps(one(args.one, args.workers, args.horizon)))
        return
    rows = []
    for n in (int(x) for x in args.steps.split(",")):
        cmd = [sys.executable, __file__, "--one", str(n), "--workers", str(args.workers)] + (
            [] if args.horizon is None else ["--horizon", str(args.horizon)])
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode != 0:
            sys.exit(f"bench/pair_choice.py: N={n} failed:\n{done.stderr[-2000:]}")
        row = json.loads(done.stdout.strip().splitlines()[-1])
        rows.append(row)
        print(f"N={n:4}: {row['resumed_courses']} resumed courses, {row['kill_points']} kill "
              f"points, {row['classes']} classes; chosen now {row['now_total']} "
              f"{row['now']}, before {row['before_total']} {row['before']}", flush=True)
    print(json.dumps({"horizon": args.horizon, "rows": rows}))


if __name__ == "__main__":
    main()
