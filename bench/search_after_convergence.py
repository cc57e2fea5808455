"""Longer schedules after convergence in the hypothesis search: the same fixed-seed search
with the shortcut (a last crash after a meeting with the clean run composed from a known
resumed run, faultsim.inprocess.search_after_convergence) and without it
(`Session(after_convergence=False)`: every last crash resumed, every course learned to its
end). Prints one JSON line: per side the schedules run, how many were composed, CPU
seconds, and what the search found; `same` says both found the same (they must), and
`cpu_ratio` is without / with.

Each side runs in a fresh interpreter (its CPU alone; hypothesis keeps state between
searches of one process).

Run from the project root:
  python bench/search_after_convergence.py                       # support_tickets, 3 crashes
  python bench/search_after_convergence.py --crashes 2 --examples 200
  python bench/search_after_convergence.py --agent reference_agent.mutants.repeat_before_save \\
      --scenario tests/data/pair.toml --crashes 2 --examples 600 --seed 7
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def one(args: argparse.Namespace, on: bool) -> dict:
    """The search on one side, in this process (the child)."""
    import importlib
    import resource

    from faultsim import Session, load_scenario, search

    module = importlib.import_module(args.agent)
    scenario = load_scenario(args.scenario)
    before = resource.getrusage(resource.RUSAGE_SELF)
    with Session(module.make_agent, scenario, crash_model=args.crash_model,
                 agent_name=module.__name__, after_convergence=on) as session:
        found = search(session, max_crashes=args.crashes, examples=args.examples,
                       seed=args.seed)
    after = resource.getrusage(resource.RUSAGE_SELF)
    return {"tried": found.tried, "examples": found.examples,
            "composed": found.after_convergence,
            "cpu_s": round(after.ru_utime + after.ru_stime - before.ru_utime
                           - before.ru_stime, 2),
            "ok": found.ok,
            "failure": None if found.failure is None else {
                "schedule": [p.id for p in found.failure.schedule],
                "violations": sorted(v.invariant for v in found.failure.violations),
                "counterexample": found.failure.counterexample()}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", default="scenarios/support_tickets.toml")
    parser.add_argument("--agent", default="reference_agent")
    parser.add_argument("--crash-model", default="process")
    parser.add_argument("--crashes", type=int, default=3)
    parser.add_argument("--examples", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--side", choices=["with", "without"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.side:
        print(json.dumps(one(args, args.side == "with")))
        return
    sides = {}
    for side in ("with", "without"):
        cmd = [sys.executable, os.path.abspath(__file__), "--side", side,
               "--scenario", args.scenario, "--agent", args.agent,
               "--crash-model", args.crash_model, "--crashes", str(args.crashes),
               "--examples", str(args.examples), "--seed", str(args.seed)]
        done = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, check=True)
        sides[side] = json.loads(done.stdout.strip().splitlines()[-1])
    with_, without = sides["with"], sides["without"]
    same = {k: with_[k] for k in ("tried", "examples", "ok", "failure")} == \
        {k: without[k] for k in ("tried", "examples", "ok", "failure")}
    for side in sides.values():
        if side["failure"]:
            side["failure"].pop("counterexample")  # compared above; too long for one line
    print(json.dumps({"scenario": args.scenario, "agent": args.agent,
                      "crash_model": args.crash_model, "crashes": args.crashes,
                      "examples": args.examples, "seed": args.seed, "with": with_,
                      "without": without, "same": same,
                      "cpu_ratio": round(without["cpu_s"] / max(with_["cpu_s"], 1e-9), 2)}))


if __name__ == "__main__":
    main()
