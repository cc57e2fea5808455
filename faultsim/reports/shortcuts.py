"""The report's `shortcuts` block: how often each of the sweep's shortcuts applied and, when
one never did, why (issue 53: a shortcut that is off says so).

- `convergence`: resumed runs cut where they reached the clean run's state
  (faultsim.inprocess.convergence); `refused` counts the others by the first reason a cut
  was refused in each (a run cut against an earlier resumed run counts that run's);
- `leads`: resumed runs cut where they reached an earlier resumed run's state
  (faultsim.inprocess.leads); `refused` likewise. Which runs lead depends on the worker
  count and on the shards, so its counts do too (the others do not);
- `aftermath`: later crashes of a schedule whose verdict was composed instead of resumed
  (faultsim.inprocess.after_convergence, search_after_convergence);
- `memo`: crash states that shared an equal or equivalent state's resumed run
  (faultsim.pipeline.sweep);
- `unwind`: first crash states whose kill, read from the code, provably unwinds to the
  agent's `run()` running nothing of the agent's (faultsim.inprocess.unwind): what the
  kill sets off is known without a process that dies there, so the forking executor forks
  none at a point whose states are all judged already; `refused` counts the others by the
  frame that stopped the reading. Counted per state at the kill, as every executor finds
  it, so the same on any worker count and summed over shards.

Each is `{"applied", "of", "why_not"}` (`why_not` null once it applied), convergence,
leads and unwind with `refused` too. Built from a run's counts (`block`) and again from
merged shards' (`merge`), so both say the same; standard library only (`merge` reads it)."""
from __future__ import annotations

from typing import Any

NAMES = ("convergence", "leads", "aftermath", "memo", "unwind")
# A resumed run's reason where no check refused it a cut: it never stood where the clean
# run (an earlier resumed run) stood. Named only when no run gives a reason of its own: a
# reason a check gave (its memory unreadable, differing) is what keeps matching runs apart.
NO_CLEAN_STATE = "it never reached the clean run's files, world and request at a model request"
NO_LEAD_STATE = ("it never reached an earlier resumed run's files, world and request at that "
                 "run's first model request")
_GENERIC = (NO_CLEAN_STATE, NO_LEAD_STATE)
# a pair's first crash: its run is not cut against a lead (leads.py), by design
KEPT = "a run whose trace is kept for a further crash meets the clean run only"
_NONE_MET = ("no later crash came after a resumed run that met the clean run, or left a crash "
             "state and world equal to one resumed already")
_UNITS = {"convergence": "resumed runs", "leads": "resumed runs",
          "aftermath": "later crashes", "memo": "crash states", "unwind": "first crash states"}
# unwind's `of` is 0 where no kill is raised in process: an agent run as a command is
# killed for real (SIGKILL), and a process killed so runs nothing after it
NOT_IN_PROCESS = "no kill was raised in process (a process killed for real runs nothing after)"


def block(*, resumed: int, converged: int, met: int, refused: dict, aftermath: int,
          later: int, shared: int, states: int, crashes: int, off: str | None,
          unwind: int = 0) -> dict:
    """The block of one run. `refused`: {"convergence": {reason: runs}, "leads": ...,
    "unwind": {reason: states}}; `unwind`: first crash states whose kill was read, of
    those and the ones `refused` counts (unwind.py);
    `off`: why no run could be cut at all (the report's `convergence`), counted for every
    run not cut where no reason was counted per run (subprocess mode)."""
    out: dict[str, Any] = {}
    for name, applied in (("convergence", converged), ("leads", met)):
        reasons = dict(refused.get(name) or {})
        # runs with no reason counted: not cut, and (for leads) not cut against the clean
        # run either, which leaves no lead to meet
        cut = converged + met if name == "leads" else converged
        rest = resumed - cut - sum(reasons.values())
        if not reasons and rest > 0 and off:
            reasons = {off: rest}
        out[name] = {"applied": applied, "of": resumed,
                     "refused": dict(sorted(reasons.items()))}
    out["aftermath"] = {"applied": aftermath, "of": later}
    out["memo"] = {"applied": shared, "of": states}
    loud = refused.get("unwind") or {}
    out["unwind"] = {"applied": unwind, "of": unwind + sum(loud.values()),
                     "refused": dict(sorted(loud.items()))}
    return explain(out, crashes)


def explain(found: dict, crashes: int) -> dict:
    """`found` with each shortcut's `why_not` (null where it applied)."""
    conv = found["convergence"]
    for name in ("convergence", "leads"):
        entry = found[name]
        entry["why_not"] = None if entry["applied"] else \
            "no run was resumed" if not entry["of"] else _most(entry["refused"])
    after = found["aftermath"]
    after["why_not"] = None if after["applied"] else (
        "one crash per schedule: it composes the verdicts of later crashes" if crashes < 2
        else "no schedule of several crashes was explored" if not after["of"]
        else _NONE_MET + (
                 f" (convergence: {conv['why_not']})" if conv["why_not"] else ""))
    memo = found["memo"]
    memo["why_not"] = None if memo["applied"] else (
        "no crash state" if not memo["of"] else
        "no two crash states were equal or equivalent")
    kill = found.get("unwind")  # (not in a report of faultsim before it was counted)
    if kill is not None:
        kill["why_not"] = None if kill["applied"] else \
            NOT_IN_PROCESS if not kill["of"] else _most(kill["refused"])
    return {name: found[name] for name in NAMES if name in found}


def _most(reasons: dict) -> str:
    """The reason a check gave most runs (the first in order of those alike); the runs
    that never stood where a cut was tried only where no check gave one."""
    given = {k: v for k, v in reasons.items() if k not in _GENERIC} or reasons
    if not given:
        return "no resumed run was refused one, nor cut"
    return min(given.items(), key=lambda kv: (-kv[1], kv[0]))[0]


def merge(blocks: list[dict], crashes: int) -> dict:
    """The shards' blocks as one: counts added, reasons again from the sums."""
    out: dict[str, Any] = {}
    for name in NAMES:
        if any(name not in b for b in blocks):
            continue  # an older faultsim's report: not one shard's count for the whole run
        entries = [b[name] for b in blocks]
        entry: dict[str, Any] = {"applied": sum(e["applied"] for e in entries),
                                 "of": sum(e["of"] for e in entries)}
        if "refused" in entries[0]:
            reasons: dict[str, int] = {}
            for e in entries:
                for why, n in e["refused"].items():
                    reasons[why] = reasons.get(why, 0) + n
            entry["refused"] = dict(sorted(reasons.items()))
        out[name] = entry
    return explain(out, crashes)


# why_not that only says there was nothing for the shortcut to do
_NOTHING = ("no run was resumed", "one crash per schedule: it composes the verdicts of later "
            "crashes", "no schedule of several crashes was explored", "no crash state",
            "no resumed run was refused one, nor cut", KEPT, NOT_IN_PROCESS)


def off(found: dict) -> bool:
    """A shortcut never applied because it is off or a check refused it (not for want of
    work, nor because no run stood where another had): the summary says so."""
    # ("not tried ...": a mode that cuts no run, as its JSON `convergence` says)
    return any(found[name]["why_not"] not in (None, *_NOTHING, *_GENERIC) and
               not found[name]["why_not"].startswith((_NONE_MET, "not tried"))
               for name in NAMES if name in found)


def line(found: dict) -> str:
    """The summary's line: each shortcut's count, and why where it never applied."""
    parts = []
    said = set()
    for name in (n for n in NAMES if n in found):
        entry = found[name]
        part = f"{name} {entry['applied']} of {entry['of']} {_UNITS[name]}"
        why = entry["why_not"]
        if why:
            part += " (the same)" if why in said else f" (never: {why})"
            said.add(why)
        parts.append(part)
    return "; ".join(parts)
