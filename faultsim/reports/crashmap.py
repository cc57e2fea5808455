"""What the HTML report draws, as JSON (the report's `map` and `counterexamples` keys): the
crash map of one run (the clean run's events and every kill point's verdict, encoded
compactly: a few bytes a kill point, so a page of a few hundred thousand stays usable) and
the details of each counterexample (traces around each kill, the disk beside the clean
run's, both effect ledgers, what the resumed run asked for).

Built from a `report.ModelRun` (passed in, duck-typed: faultsim.reports.report calls these from
`to_json`); imports the bottom layer and the world's ledger only.
"""
from __future__ import annotations

import difflib
from typing import Any, Sequence

from .counts import ALPHABET as _ALPHABET, ESCALATED, PASSED, UNEXPLORED
from ..killpoints import CATEGORIES, KillPoint
from ..world.ledger import canonical, effect_difference

_DETAIL = 60  # characters of an event's detail kept in the map (the tooltip's)
_CONTEXT = 3  # events either side of a kill in a counterexample's trace (as the text's)
_FILE_TEXT = 4000  # bytes of a file shown in a counterexample (head and tail beyond)


def _char(n: int) -> str:
    return _ALPHABET[n] if n < len(_ALPHABET) else chr(0xC0 + n - len(_ALPHABET))


class _Codes:
    """The map's verdict labels: a cell holds one character, its label's position."""

    def __init__(self) -> None:
        self.labels = [UNEXPLORED, PASSED, ESCALATED]

    def __call__(self, label: str) -> str:
        if label not in self.labels:
            self.labels.append(label)
        return _char(self.labels.index(label))


def _label(invariants: set[str], severity: Sequence[str]) -> str:
    order = {k: n for n, k in enumerate(severity)}
    return "+".join(sorted(invariants, key=lambda k: (order.get(k, len(order)), k)))


# the encoding, for `faultsim report merge` (it decodes shards' maps and encodes the join)
Codes, label_for, ALPHABET = _Codes, _label, _ALPHABET


def crash_map(run: Any, severity: Sequence[str], sparse: bool = False) -> dict[str, Any]:
    """Every kill point of the clean run in order, with its verdict: the union of the
    invariants its crash states and the schedules starting there violate (the text table's
    rule: a kill point passed when all of them passed), else escalated when one of its
    resumed runs escalated to a person (legal, P11), else passed; unexplored where this run
    judged no crash state (outside --kill-point, a command agent's shard's kill points, or another
    in-process or subprocess-mode shard's crash states).

    `sparse`: only the explored kill points' verdicts (`explored`, position -> character),
    without the clean run's parts: what a pytest kill-point item, which explores one kill
    point, sends to the session's page (faultsim.reports.html.merge_runs)."""
    codes = _Codes()
    broken: dict[str, set[str]] = {}
    escalated: set[str] = set()
    for v in run.verdicts:
        if v.violations:
            broken.setdefault(v.kill_point.id, set()).update(x.invariant for x in v.violations)
        elif getattr(v, "escalated", False):
            escalated.add(v.kill_point.id)
    single = set(broken)  # failing with one crash; the others only with more
    for v in run.deep_failures:
        if v.earlier:
            broken.setdefault(v.earlier[0].point.id, set()).update(
                x.invariant for x in v.violations)
    # judged: a crash state there has a verdict here (an in-process shard crashes at every
    # kill point but judges only the crash states it owns: faultsim.reports.counts)
    judged = {v.kill_point.id for v in run.verdicts}

    def label(point_id: str) -> str:
        # a failing verdict shows even where the run lists no explored point (a replay)
        if point_id in broken:
            return _label(broken[point_id], severity)
        if point_id not in judged:
            return UNEXPLORED
        return ESCALATED if point_id in escalated else PASSED

    if sparse:
        positions = {p.id: n for n, p in enumerate(run.kill_points)}
        out = {"labels": codes.labels, "explored": {
            str(positions[i]): codes(label(i)) for i in judged | set(broken)
            if i in positions}}
        return {**out, **_failing(run, broken, single, positions, codes, severity)}
    cats = list(CATEGORIES) + sorted({p.category for p in run.kill_points} - set(CATEGORIES))
    # Strings, not lists: one line each however the report is indented. Every event has a
    # boundary kill point, so the event index grows by 0 (a torn point, or the boundary after
    # it) or 1 from point to point.
    event, torn, category, verdict = [], [], [], []
    at = 0
    positions = {}
    for n, p in enumerate(run.kill_points):
        positions[p.id] = n
        event.append(str(p.index - at))
        at = p.index
        torn.append(str(p.offset or 0))  # torn offsets are > 0: 0 is a boundary
        category.append(_char(cats.index(p.category)))
        verdict.append(codes(label(p.id)))
    kinds: list[str] = []
    events = []
    for e in _golden_trace(run):
        if e.kind not in kinds:
            kinds.append(e.kind)
        events.append("\t".join([str(kinds.index(e.kind)), _field(e.subject),
                                 _field(e.detail[:_DETAIL])]))
    return {"event_kinds": kinds, "events": events, "categories": cats,
            "labels": codes.labels,
            "points": {"event": "".join(event) if all(len(d) == 1 for d in event)
                       else ",".join(event), "torn": ",".join(torn),
                       "category": "".join(category), "verdict": "".join(verdict)},
            **_failing(run, broken, single, positions, codes, severity)}


def _failing(run: Any, broken: dict, single: set, positions: dict, codes: _Codes,
             severity: Sequence[str]) -> dict[str, Any]:
    """The map's parts about failures: the ids of the kill points that did not pass (a
    cell's details name them), those failing only when a second crash follows (one crash
    there passes), and the failing pairs."""
    failing = sorted((i for i in broken if i in positions), key=positions.get)
    pairs = []
    for v in run.deep_failures:
        if len(v.earlier) == 1 and v.earlier[0].point.id in positions:
            second = v.kill_point
            code = codes(_label({x.invariant for x in v.violations}, severity))
            pairs.append(f"{positions[v.earlier[0].point.id]},{second.index},"
                         f"{second.offset or 0},{code}")
    return {"ids": {str(positions[i]): i for i in failing},
            "deep": ",".join(str(positions[i]) for i in failing if i not in single),
            "pairs": pairs}


def _field(text: str) -> str:
    return text.replace("\t", " ").replace("\n", " ")


def _golden_trace(run: Any) -> list:
    for v in run.verdicts + run.probes + run.deep_failures:
        return v.golden.trace
    return []


def _trace(trace: Sequence, point: KillPoint) -> list[list]:
    lo, hi = max(1, point.index - _CONTEXT), point.index + _CONTEXT
    return [[e.index, e.kind, e.subject, e.detail] for e in trace[lo - 1:hi]]


def _text(data: bytes | None) -> dict[str, Any]:
    if data is None:
        return {"dir": True}
    text = data.decode("utf-8", "replace")
    if len(data) > _FILE_TEXT:
        text = (data[:_FILE_TEXT // 2].decode("utf-8", "replace") + "\n[...]\n"
                + data[-_FILE_TEXT // 2:].decode("utf-8", "replace"))
    return {"bytes": len(data), "text": text}


def _clean_state(run: Any, verdict: Any) -> tuple[dict | None, str]:
    """What the clean run had on disk once the killed event completed: the crash state at
    the boundary after it that kept everything (the process model's, the power model's
    first: everything persisted). None for a schedule of several crashes (the clean course
    of a resumed run is not kept)."""
    if verdict.earlier:
        return None, ""
    point = verdict.kill_point
    when = f"after #{point.index}" if point.index else "at the start"
    for v in run.verdicts:
        if v.kill_point.index == point.index and not v.kill_point.torn and v.order == 0:
            return v.state.as_dict(), when
    other = getattr(run, "clean_states", {}).get(point.index)  # another shard's state
    return (other.as_dict(), when) if other is not None else (None, "")


def _ledger(entries: Sequence, allowed: dict[str, int] | None = None) -> list[dict]:
    """A ledger's rows; with `allowed` (the clean run's count per effect), each application
    of an effect past that count is marked a duplicate (the earlier ones are not)."""
    seen: dict[str, int] = {}
    rows = []
    for e in entries:
        dup = False
        if allowed is not None and e.applied:
            seen[e.effect_id()] = seen.get(e.effect_id(), 0) + 1
            dup = seen[e.effect_id()] > allowed.get(e.effect_id(), 0)
        rows.append({"seq": e.seq, "incarnation": e.incarnation, "call": f"{e.service}.{e.op}",
                     "params": canonical(e.params), "key": e.key, "outcome": e.outcome,
                     "duplicate": dup})
    return rows


def counterexample(run: Any, verdict: Any, rules: dict[str, str]) -> dict[str, Any]:
    """One counterexample, in the pieces its page section shows; `text` is the text report's
    own counterexample, word for word."""
    from ..judge import dbview
    from ..judge.oracle import checkpoints_in  # the oracle's reading of declared checkpoints

    crashes = [(e.point, e.persisted) for e in verdict.earlier]
    crashes.append((verdict.kill_point, verdict.persisted))
    traces = [verdict.golden.trace] + [list(e.next_trace) for e in verdict.earlier]
    files = verdict.state.as_dict()
    clean, when = _clean_state(run, verdict)
    spec = getattr(verdict.golden, "checkpoint", None)
    checkpoints = checkpoints_in(files, spec) if spec is not None else checkpoints_in(files)
    if clean is not None:
        checkpoints = {**checkpoints, **(checkpoints_in(clean, spec) if spec is not None
                                         else checkpoints_in(clean))}
    disk = []
    for path in sorted(set(files) | set(clean or {})):
        here, there = files.get(path, b"\0absent"), (clean or {}).get(path, b"\0absent")
        entry: dict[str, Any] = {"path": path, "checkpoint": path in checkpoints}
        entry["crash"] = None if here == b"\0absent" else _text(here)
        if isinstance(here, bytes) and here.startswith(dbview.HEADER):
            entry["database"] = dbview.describe(files, path)  # what it holds, not bytes
        if clean is not None:
            entry["same"] = here == there
            if not entry["same"]:  # the same bytes are shown once
                entry["clean"] = None if there == b"\0absent" else _text(there)
            if not entry["same"] and isinstance(here, bytes) and isinstance(there, bytes) \
                    and b"\0absent" not in (here, there):
                entry["diff"] = list(difflib.unified_diff(
                    _lines(there), _lines(here), "the clean run", "the crash", lineterm="",
                    n=1))[:80]
        disk.append(entry)
    out: dict[str, Any] = {
        "invariants": [v.invariant for v in verdict.violations],
        "violations": [{"invariant": v.invariant, "rule": rules.get(v.invariant, v.rule),
                        "explanation": v.explanation} for v in verdict.violations],
        "schedule": [p.id for p in verdict.schedule],
        "crashes": [{"point": p.id, "describe": p.describe(), "category": p.category,
                     "persisted": persisted, "index": p.index, "offset": p.offset,
                     "who": "the clean run" if k == 0 else f"resumed run {k}",
                     "trace": _trace(trace, p)}
                    for k, ((p, persisted), trace) in enumerate(zip(crashes, traces))],
        "disk": disk, "clean_when": when, "replay": run.replay_command(verdict),
        "rerun": run.rerun_command(verdict), "text": run.counterexample(verdict),
        "why": _why_json(verdict),
        "rank": run.rank(verdict)}
    resume = verdict.resume
    if resume is not None:
        diff = effect_difference(verdict.golden.ledger, resume.ledger)
        if resume.outcome is None or resume.outcome.status != "completed":
            diff["missing"] = {}  # a run that stopped early misses the rest (as the text)
        clean_counts = dict(verdict.golden.ledger.effect_counts())
        out["ledger"] = {"clean": _ledger(verdict.golden.ledger.entries),
                         "crash": _ledger(resume.ledger.entries, clean_counts),
                         "extra": diff["extra"], "missing": diff["missing"]}
        out["asked"] = list(getattr(resume, "asked", ()))
        # the resumed run's first request beside the clean run's (report.first_request)
        out["first_request"] = run.first_request(verdict) if hasattr(run, "first_request") \
            else None
        out["error"] = resume.error
        out["ended"] = None if resume.outcome is None else {
            "status": resume.outcome.status, "final_answer": resume.outcome.final_answer}
    return out


def why_of(verdict: Any) -> tuple[str, str] | None:
    """Why the crash state failed, where its trace tells (faultsim.judge.why.classify: its class
    and a sentence), on the course of the run the last crash killed; the text report's
    `why:` and the JSON's."""
    from ..judge import dbview
    from ..judge.why import classify

    if not verdict.violations:
        return None
    trace = list(verdict.earlier[-1].next_trace) if verdict.earlier else verdict.golden.trace
    files = verdict.state.as_dict() if verdict.state is not None else {}
    # a framework's store is known by its tables (read only where a database is there)
    tables = dbview.tables(files) if dbview.databases(files) else frozenset()
    return classify(trace, verdict.kill_point.index, verdict.violations, tables)


def _why_json(verdict: Any) -> dict | None:
    found = why_of(verdict)
    return None if found is None else {"class": found[0], "text": found[1]}


def _lines(data: bytes) -> list[str]:
    text = data[:_FILE_TEXT * 4].decode("utf-8", "replace")
    lines = text.splitlines()
    if len(lines) <= 2 and len(text) > 200 and text.lstrip()[:1] in "{[":
        # one-line JSON, the usual checkpoint: a line per item, so a diff says where
        import json
        try:
            lines = json.dumps(json.loads(text), indent=1, ensure_ascii=False).splitlines()
        except ValueError:
            pass
    return lines


def counterexamples(run: Any, severity: Sequence[str], rules: dict[str, str]) -> list[dict]:
    """The first crash state of each kind of failure in the run (as Report.counterexamples
    picks them, unbounded), the worst kinds first."""
    return [counterexample(run, verdict, rules) for verdict in first_of_each_kind(run, severity)]


def first_of_each_kind(run: Any, severity: Sequence[str]) -> list:
    """The failing verdicts `counterexamples` shows: the first of each kind, worst first."""
    order = {k: n for n, k in enumerate(severity)}
    shown, found = set(), []
    for n, verdict in enumerate(run.failures):
        kinds = tuple(v.invariant for v in verdict.violations)
        reason = why_of(verdict)  # a by-design window and an ordering bug apart (as the text)
        if reason:
            kinds += (reason[0],)
        if kinds in shown:
            continue
        shown.add(kinds)
        found.append((min(order.get(k, len(order)) for k in kinds), n, verdict))
    found.sort(key=lambda f: f[:2])
    return [verdict for *_, verdict in found]
