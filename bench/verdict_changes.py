#!/usr/bin/env python3
"""Which verdicts a change to the crash model moved: run every bundled scenario (reference
agent) and every mutant (on tests/data/tiny.toml) under both crash models, save the
violations, and compare two such records.

    python bench/verdict_changes.py --record DIR     # before the change (another checkout)
    python bench/verdict_changes.py --record DIR2    # after it
    python bench/verdict_changes.py --compare DIR DIR2

The comparison prints, per run, the violations only one side has, keyed by crash model,
schedule and invariant, with what persisted, so each difference can be explained."""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from collections import Counter

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MUTANTS = ["messages_only", "save_b_only", "overwrite_in_place", "rename_without_fsync",
           "unknown_version_parsed", "counters_reset", "reask_instead_of_reconcile",
           "orphan_tool_use", "key_after_effect", "progress_appended", "progress_trusted",
           "blind_without_intent", "reconcile_in_place", "repeat_before_save"]
SCENARIOS = ["customer_notifications", "flaky_api", "parallel_tools", "refunds",
             "research_50_steps", "support_tickets", "three_subagents"]


def jobs():
    # the reference agent on every bundled scenario, one crash, both models
    for name in SCENARIOS:
        yield (f"ref-{name}", [f"scenarios/{name}.toml", "--agent", "reference_agent",
                               "--crash-model", "all", "--crashes", "1"])
    # every mutant on the small scenario, two crashes, both models
    for m in MUTANTS:
        yield (f"mut-{m}", ["tests/data/tiny.toml", "--agent", f"reference_agent.mutants.{m}",
                            "--crash-model", "all", "--crashes", "2"])


def record(out: str, only: str | None) -> None:
    os.makedirs(out, exist_ok=True)
    for name, args in jobs():
        if only and only not in name:
            continue
        path = os.path.join(out, name + ".json")
        cmd = [sys.executable, "-m", "faultsim.cli", "run", *args, "--workers", "1",
               "--json", path]
        r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
        print(f"{name}: exit {r.returncode}", flush=True)
        if r.returncode not in (0, 1):
            print(r.stderr[-400:], file=sys.stderr)


def violations(path: str) -> dict:
    d = json.load(open(path))
    out = {}
    for run in d["runs"]:
        for v in run["violations"]:
            key = (run["crash_model"], " ".join(v["schedule"]), v["invariant"])
            out[key] = " | ".join(v.get("persisted_each") or [v.get("persisted") or ""])
    return out


def compare(a: str, b: str) -> int:
    changed = 0
    for name, _ in jobs():
        pa, pb = os.path.join(a, name + ".json"), os.path.join(b, name + ".json")
        if not (os.path.exists(pa) and os.path.exists(pb)):
            print(f"{name}: missing on one side")
            continue
        va, vb = violations(pa), violations(pb)
        gone, new = sorted(set(va) - set(vb)), sorted(set(vb) - set(va))
        if not gone and not new:
            print(f"{name}: same {len(va)} violations")
            continue
        changed += 1
        print(f"{name}: {len(va)} -> {len(vb)} violations "
              f"({len(gone)} gone, {len(new)} new)")
        for tag, keys, src in (("gone", gone, va), ("new", new, vb)):
            by = Counter((k[0], k[2], src[k].split(" | ")[-1].split(", ")[0]) for k in keys)
            for (model, inv, persisted), n in by.most_common():
                print(f"    {tag} {n:4d}  {model:7s} {inv:30s} {persisted[:90]}")
    print(f"{changed} runs changed")
    return 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--record", metavar="DIR")
    p.add_argument("--only", help="record only the jobs whose name contains this")
    p.add_argument("--compare", nargs=2, metavar=("BEFORE", "AFTER"))
    a = p.parse_args()
    if a.record:
        record(a.record, a.only)
    if a.compare:
        return compare(*a.compare)
    return 0


if __name__ == "__main__":
    sys.exit(main())
