"""Diagnostic: why resumed runs do not converge (faultsim.inprocess.diagnose).

Sweeps the reference agent (single crash, process model, in-process) on the N-step
lookups of bench/scaling.py, or on a scenario file, with FAULTSIM_CONVERGENCE_DIAG set,
and tabulates, over the resumed runs that were not cut, what differs from the nearest
clean request: at the run's last model request (its best chance: the latest it could
have met the clean run), and at every request of it. Each row names the first part apart
(files, world, request, open files, memory, in that order) and, beside it, the first
part still apart once the fake's fresh tool-use ids and per-turn answer counts are read
as the first asking's (what a cut up to that renaming would still see). Then how many of
those runs reach, at some request, a state another resumed run was in at any of its
requests: what convergence with earlier resumed runs at every request (faultsim.inprocess.
leads meets them at their first only) could cut.

Run: python bench/convergence_causes.py --steps 25
     python bench/convergence_causes.py --scenario scenarios/support_tickets.toml
Prints the table, then one JSON line.
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import re
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(1, str(ROOT / "bench"))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=None)
    parser.add_argument("--scenario", default=None)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--view", action="store_true",
                        help="also compare under a view that hides the agent's records of "
                        "a resume (see the docstring)")
    args = parser.parse_args()
    if args.view:
        install_view()

    import faultsim
    import reference_agent
    from scaling import scenario_text

    tmp = tempfile.mkdtemp(prefix="faultsim-causes-")
    print("log:", os.path.join(tmp, "diagnosis.jsonl"))
    log = os.path.join(tmp, "diagnosis.jsonl")
    if args.scenario:
        scenario = faultsim.load_scenario(args.scenario)
    else:
        path = Path(tmp) / f"lookups_{args.steps}_steps.toml"
        path.write_text(scenario_text(args.steps))
        scenario = faultsim.load_scenario(path)
    os.environ["FAULTSIM_CONVERGENCE_DIAG"] = log
    try:
        report = faultsim.explore(reference_agent.make_agent, scenario,
                                  crash_model="process", crashes=1, workers=args.workers)
    finally:
        del os.environ["FAULTSIM_CONVERGENCE_DIAG"]
    (run,) = report.runs
    lines = [json.loads(x) for x in open(log)] if os.path.exists(log) else []
    by_run: dict = collections.defaultdict(list)
    for line in lines:
        by_run[line["run"]].append(line)
    cut = {r for r, ls in by_run.items() if any(x["cut"] for x in ls)}
    apart = {r: ls for r, ls in by_run.items() if r not in cut}
    last, every, last_renamed, sets = (collections.Counter(), collections.Counter(),
                                       collections.Counter(), collections.Counter())
    for ls in apart.values():
        end = ls[-1]
        last[(end["differs"] or ["(nothing: refused)"])[0]] += 1
        last_renamed[(end["renamed"] or ["(nothing)"])[0]] += 1
        sets[" + ".join(sorted({p.split(":")[0] + (":" + p.split(":")[1]
                                                   if p.startswith(("world:", "memory:"))
                                                   else "") for p in end["differs"]}))] += 1
        for x in ls:
            every[(x["differs"] or ["(nothing)"])[0]] += 1
    later = later_meetings(by_run, apart)
    view = viewed(apart) if args.view else None
    name = args.scenario or f"lookups_{args.steps}_steps"
    print(f"{name}: {run.judged} resumed, {run.converged} converged; "
          f"{len(by_run)} asked the model, {len(apart)} of them not cut")
    print(f"  of those, {later['runs']} reach at some request a state another resumed run "
          f"was in at any of its requests ({later['requests']} of their "
          f"{later['of_requests']} requests after it): what a lead at every request, not "
          f"only the first, could cut (at most: the seeded streams' position is not compared)")
    if view is not None:
        print(f"  under the view (--view: not sound, memory not compared, so at most): "
              f"{view['runs']} of them meet the clean run, sparing {view['requests']} of "
              f"{view['of_requests']} requests; still apart at the last request: "
              f"{view['apart']}")
    for title, counts in (
            ("at a non-converged run's last request, first part apart (runs)", last),
            ("the same, after renaming fresh tool-use ids and capping answer counts",
             last_renamed),
            ("every part kind apart at that last request (runs)", sets),
            ("at every request of those runs, first part apart (requests)", every)):
        print(f"  {title}:")
        for what, count in counts.most_common(12):
            print(f"    {count:5}  {what}")
    print(json.dumps({"scenario": name, "resumed": run.judged, "converged": run.converged,
                      "asked": len(by_run), "not_cut": len(apart),
                      "last": dict(last.most_common(12)),
                      "last_renamed": dict(last_renamed.most_common(12)),
                      "kinds": dict(sets.most_common(12)),
                      "every": dict(every.most_common(12)), "later": later,
                      **({"view": view} if view is not None else {})}))


TOKENS = re.compile(rb'"tokensUsed": ?\d+')


def install_view() -> None:
    """Makes the diagnostic's renamed comparison the view's (the module docstring)."""
    from faultsim.inprocess import diagnose

    parts = diagnose.parts

    def viewed_parts(ex, world, request, frame, renamed):
        out = parts(ex, world, request, frame, renamed)
        if renamed:
            for name, data in ex.interposer.snapshot().items():
                if data is not None and b"tokensUsed" in data:
                    out["file:" + name] = diagnose._digest(
                        TOKENS.sub(b'"tokensUsed": 0', diagnose.FRESH.sub(rb"\1", data)))
            for k in [k for k in out if k.startswith("memory:") or k == "world:requests"
                      or k.endswith("decisions.json")]:
                del out[k]
        return out

    diagnose.parts = viewed_parts


def viewed(apart: dict) -> dict:
    """Uncut runs that meet the clean run under the view (nothing apart in `renamed`), and
    the requests after that meeting."""
    runs = spared = total = 0
    still: collections.Counter = collections.Counter()
    for ls in apart.values():
        total += len(ls)
        at = next((i for i, x in enumerate(ls) if not x["renamed"]), None)
        if at is None:
            still[ls[-1]["renamed"][0]] += 1
        else:
            runs += 1
            spared += len(ls) - at - 1
    return {"runs": runs, "requests": spared, "of_requests": total,
            "apart": dict(still.most_common(4))}


def later_meetings(by_run: dict, apart: dict) -> dict:
    """Runs not cut that reach, at some request, the state (the probe's key: sandbox,
    world, request, open files, memory) another run was in at any of its requests, each run
    taken against the runs logged before it; and the requests after that meeting, which
    such a cut would spare."""
    seen: set = set()
    runs = spared = total = 0
    for r, ls in by_run.items():
        keys = [x["key"] for x in ls]
        if r in apart:
            total += len(keys)
            at = next((i for i, k in enumerate(keys) if k in seen), None)
            if at is not None:
                runs += 1
                spared += len(keys) - at - 1
        seen.update(keys)
    return {"runs": runs, "requests": spared, "of_requests": total}


if __name__ == "__main__":
    main()
