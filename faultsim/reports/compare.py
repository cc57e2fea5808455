"""Differential verdicts: two JSON reports (two agents, two versions of one, a run and its
saved baseline) compared crash state by crash state.

States are aligned by their stable identity (faultsim.reports.identity, the report's `states`),
never by kill-point id or index: one extra event early in B's run shifts every index after
it, and an index-based alignment would pair each state with a different one. Runs are
aligned by scenario id and crash model (and, for LangGraph, the durability mode the agent
spec names).

Per state: `fixed by B` (fails in A, passes in B), `broken by B`, `fails in both`, `passes
in both`, `only in A`, `only in B`. A scenario the agent fails before any crash state (its
clean run fails or escapes: a report's `refused` finding, such as AgentFailedCleanly) has
one state there, `the clean run`, whose verdict is the finding's kind; the other side's run
of that scenario is compared against it, so a B whose clean run fails is broken by B, and
one whose clean run passes where A's failed is fixed by B. B *adds failing crash states* (a regression, what
`faultsim compare` and `faultsim run --baseline` exit 1 for) when a state is broken by B or
fails in B and A has no such state.

A kill at a sector boundary inside a write (`@512`, `@2048`) exists only where the write is
that long: a B whose file is larger has cuts A's has not, though they tear the same write
the same way. Such a state without a namesake on the other side is aligned by *kind of
cut* instead (`killpoints.cut_kind`): with the other side's sector cuts of the same write
(its file, its occurrence in the turn, the crash state's place), one that fails if this
one fails and one does there, else one that passes; never counted as new. `@first`,
`@half` and `@last` are kinds already and align by name.

A state that fails in both but fails another way (a hang in A, HTTP 400 in B: each
state's `how`, the report's fourth field) says so: "the failure changed".

Standard library only; reads the JSON as `faultsim run --json` writes it."""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from ..errors import UsageError

CLEAN = "the clean run"  # the state of a scenario refused before any crash state
KINDS = ("broken by B", "fixed by B", "fails in both", "passes in both", "only in A",
         "only in B")
PASSING = ("passed", "escalated")


def _fails(verdict: str | None) -> bool:
    return verdict is not None and verdict not in PASSING


@dataclass(frozen=True)
class StateDiff:
    identity: str
    a: str | None  # A's verdict (passed, escalated, invariants joined with +); None: absent
    b: str | None
    a_id: str | None  # the kill point id (or ids, for a schedule) on each side
    b_id: str | None
    a_how: str = ""  # a failing verdict in words (text.states), "" where not known
    b_how: str = ""
    # the other side's identity, where this state was aligned with it by kind of cut
    aligned_with: str | None = None

    @property
    def changed(self) -> str | None:
        """For a state failing in both: how the failure changed ("A hang, B HTTP 400"),
        None where it fails the same way (same invariants, same causes)."""
        if self.kind != "fails in both" or (self.a, self.a_how) == (self.b, self.b_how):
            return None
        a, b = self.a_how or self.a, self.b_how or self.b
        if a == b:  # same words, other invariants
            a, b = f"{self.a} ({a})", f"{self.b} ({b})"
        return f"A {a}, B {b}"

    @property
    def kind(self) -> str:
        if self.a is None:
            return "only in B"
        if self.b is None:
            return "only in A"
        return {(True, False): "fixed by B", (False, True): "broken by B",
                (True, True): "fails in both", (False, False): "passes in both"
                }[(_fails(self.a), _fails(self.b))]

    @property
    def regression(self) -> bool:
        return self.kind == "broken by B" or (self.kind == "only in B" and _fails(self.b))

    def to_json(self) -> dict[str, Any]:
        return {"identity": self.identity, "kind": self.kind, "a": self.a, "b": self.b,
                "a_id": self.a_id, "b_id": self.b_id, "a_how": self.a_how,
                "b_how": self.b_how, "changed": self.changed,
                "aligned_with": self.aligned_with}


@dataclass
class RunDiff:
    scenario: str
    crash_model: str
    mode: str  # a LangGraph durability mode, else ""
    states: list[StateDiff] = field(default_factory=list)
    side: str | None = None  # "A" or "B" when only one report has this run

    def counts(self) -> dict[str, int]:
        out = {k: 0 for k in KINDS}
        for s in self.states:
            out[s.kind] += 1
        return out

    @property
    def regressions(self) -> list[StateDiff]:
        return [s for s in self.states if s.regression]

    def name(self) -> str:
        return f"{self.scenario}{f' [{self.mode}]' if self.mode else ''} / {self.crash_model}"


@dataclass
class Comparison:
    a: str  # what A and B are (a file, an agent spec)
    b: str
    runs: list[RunDiff] = field(default_factory=list)

    @property
    def regressions(self) -> list[tuple[RunDiff, StateDiff]]:
        return [(r, s) for r in self.runs for s in r.regressions]

    @property
    def ok(self) -> bool:
        return not self.regressions

    def to_json(self) -> dict[str, Any]:
        return {"ok": self.ok, "a": self.a, "b": self.b,
                "regressions": [{"scenario": r.scenario, "crash_model": r.crash_model,
                                 "identity": s.identity, "b_id": s.b_id, "b": s.b}
                                for r, s in self.regressions],
                "runs": [{"scenario": r.scenario, "crash_model": r.crash_model,
                          "mode": r.mode, "only_in": r.side, "counts": r.counts(),
                          "states": [s.to_json() for s in r.states]} for r in self.runs]}

    def text(self, limit: int = 20) -> str:
        lines = [f"A: {self.a}", f"B: {self.b}"]
        for r in self.runs:
            if r.side is not None:
                lines.append(f"{r.name()}: only in {r.side}")
                continue
            c = r.counts()
            changed = sum(1 for s in r.states if s.changed)
            lines.append(f"{r.name()}: " + ", ".join(
                f"{c[k]} {k}" + (f" ({changed} failing another way)"
                                 if k == "fails in both" and changed else "")
                for k in KINDS))
            for kind in ("broken by B", "fixed by B", "only in B", "only in A",
                         "fails in both"):
                shown = [s for s in r.states if s.kind == kind
                         and (kind != "only in B" or _fails(s.b))]
                for s in shown[:limit]:
                    lines.append(f"  {kind}: {s.identity}  (A: {s.a_id or '-'} {s.a or ''}; "
                                 f"B: {s.b_id or '-'} {s.b or ''})".replace(" ;", ";")
                                 .replace(" )", ")") + _aside(s))
                if len(shown) > limit:
                    lines.append(f"  {kind}: ... {len(shown) - limit} more (--json lists all)")
        bad = self.regressions
        lines.append(f"B adds {len(bad)} failing crash state{'s' if len(bad) != 1 else ''}"
                     + (": " + "; ".join(f"{r.name()}: {s.identity} ({s.b_id or s.b})"
                                         for r, s in bad[:10])
                        + (" ..." if len(bad) > 10 else "") if bad else ""))
        return "\n".join(lines)


def _aside(s: StateDiff) -> str:
    out = ""
    if s.aligned_with is not None:
        out += f"; aligned by kind of cut with @{s.aligned_with.rpartition(' @')[2]}"
    if s.changed:
        out += f"; the failure changed: {s.changed}"
    return out


def _entries(run: dict) -> dict[str, tuple[str, str, str]]:
    """A run's states: identity -> (kill point id, verdict, how it failed); a report
    written before `how` has three fields."""
    return {e[0]: (e[1], e[2], e[3] if len(e) > 3 else "") for e in run["states"]}


# a kill at a sector boundary inside a write, the offset apart: `... @2048` (and ` /2`)
_SECTOR_CUT = re.compile(r"^(.* @)\d+((?: /\d+)?)$")


def _cut_class(identity: str) -> tuple[str, str] | None:
    """What a sector cut's identity names but its offset: the write (its file, its
    occurrence in the turn, turn and tool) and its place among the point's crash states;
    None for any other state (a schedule of several crashes included)."""
    if " then " in identity:
        return None
    found = _SECTOR_CUT.match(identity)
    return (found.group(1), found.group(2)) if found else None


def _by_kind(ident: str, verdict: str | None, other: dict) -> str | None:
    """The state of `other` (identity -> (id, verdict, how)) that a sector cut without a
    namesake there is aligned with: a sector cut of the same write and place, failing if
    `verdict` fails and one there does, else passing if one passes, else the first. The
    sector cuts of one write are one kind: the class fails on a side where any does."""
    key = _cut_class(ident)
    if key is None:
        return None
    same = [i for i in other if _cut_class(i) == key]
    for i in same:
        if _fails(other[i][1]) == _fails(verdict):
            return i
    return same[0] if same else None


def _runs(report: dict, where: str) -> dict[tuple[str, str, str], dict]:
    out = {}
    for n, run in enumerate(report.get("runs", [])):
        if "states" not in run:
            raise UsageError(f"{where}: runs[{n}] has no \"states\" (a report written by a "
                             "faultsim without crash-state identities): write it again")
        agent = run.get("agent", "")
        mode = agent.partition(":")[2] if agent.startswith("langgraph:") else ""
        out[(run["scenario"], run["crash_model"], mode)] = run
    return out


def compare(a: dict, b: dict, a_name: str = "A", b_name: str = "B") -> Comparison:
    """Compare report `b` against report `a` (each `Report.to_json()`)."""
    runs_a, runs_b = _runs(a, a_name), _runs(b, b_name)
    if runs_a and runs_b and not set(runs_a) & set(runs_b):
        # one LangGraph durability mode against another (langgraph:sync vs langgraph:exit):
        # align by scenario and crash model alone, when that pairs the runs one to one
        def plain(runs: dict) -> dict:
            return {(k[0], k[1], ""): v for k, v in runs.items()}
        pa, pb = plain(runs_a), plain(runs_b)
        if len(pa) == len(runs_a) and len(pb) == len(runs_b) and set(pa) & set(pb):
            runs_a, runs_b = pa, pb
    out = Comparison(a_name, b_name)
    refused_a, refused_b = _refused(a), _refused(b)
    for key in list(runs_a) + [k for k in runs_b if k not in runs_a]:
        diff = RunDiff(*key)
        out.runs.append(diff)
        if key not in runs_b or key not in runs_a:
            diff.side = "A" if key not in runs_b else "B"
            path = _path((runs_a if diff.side == "A" else runs_b)[key])
            if diff.side == "B" and path in refused_a:  # A's clean run failed, B's ran
                diff.side = None
                diff.states = [StateDiff(CLEAN, refused_a[path], "passed", None, None)]
            elif diff.side == "A" and path in refused_b:  # B's clean run fails
                diff.side = None
                diff.states = [StateDiff(CLEAN, "passed", refused_b[path], None, None)]
                diff.states += [StateDiff(i, v, None, k, None, h)
                                for i, (k, v, h) in _entries(runs_a[key]).items()]
                continue
            if diff.side != "A":  # every failing state of a run A never had is new
                diff.states += [StateDiff(i, None, v, None, k, "", h)
                                for i, (k, v, h) in _entries(runs_b[key]).items()]
            continue
        sa, sb = _entries(runs_a[key]), _entries(runs_b[key])
        for ident in list(sa) + [i for i in sb if i not in sa]:
            aligned = None
            if ident not in sb:
                aligned = _by_kind(ident, sa[ident][1], sb)
                ka, va, ha = sa[ident]
                kb, vb, hb = sb[aligned] if aligned else (None, None, "")
            elif ident not in sa:
                aligned = _by_kind(ident, sb[ident][1], sa)
                ka, va, ha = sa[aligned] if aligned else (None, None, "")
                kb, vb, hb = sb[ident]
            else:
                (ka, va, ha), (kb, vb, hb) = sa[ident], sb[ident]
            diff.states.append(StateDiff(ident, va, vb, ka, kb, ha, hb, aligned))
    for path in sorted(set(refused_a) & set(refused_b)):  # no run on either side
        out.runs.append(RunDiff(path, "-", "", [StateDiff(CLEAN, refused_a[path],
                                                          refused_b[path], None, None)]))
    return out


def _path(run: dict) -> str:
    import os

    return os.path.normpath(run.get("path", ""))


def _refused(report: dict) -> dict[str, str]:
    """The scenarios (by path) the agent failed before any crash state, and the finding's
    kind: a usage or harness error says nothing of the agent, so it has no verdict here."""
    import os

    return {os.path.normpath(r["scenario"]): r["kind"] for r in report.get("refused", [])
            if r.get("category") == "finding"}
