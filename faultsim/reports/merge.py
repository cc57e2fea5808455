"""`faultsim report merge`: shard reports (`faultsim run --shard I/N --json`) joined into the
report the whole run writes, timings aside.

Works on the JSON reports alone (docs/reference/json-report.md). Shards of crash states
(the in-process mode) each crash at every kill point: their counts add up, each kill
point's verdict is the union of the shards' (a point passes when it passes in every
shard), and failures interleave by their `rank`. Shards of kill points (an agent run as a command)
add up their explored kill points too. With pairs, the `schedules` counts add up too (the
shards split second crash states by class: inprocess.sharding.PairSurvey), and failing
pairs interleave by rank as well. Reports of different runs, or shards that overlap or
leave one out, are refused in one line naming the file and the field, as is a partial
report (an interrupted run's). Standard library, errors, the report's severity order, the
crash map's encoding, faultsim.reports.counts, faultsim.core.classes (a representative run's line),
faultsim.reports.shortcuts (the `shortcuts` block) and faultsim.reports.interrupted only."""
from __future__ import annotations

import json
import math
import re
from typing import Any, Sequence

from . import shortcuts
from ..core.classes import line_of, merged_pairs
from .counts import ESCALATED, PASSED, UNEXPLORED, code as _index, count
from ..errors import UsageError
from .interrupted import partial_reason

# what must be equal in every shard of one run (anything else is another run)
_SAME = ("scenario", "path", "agent", "crash_model", "mode", "kill_points_total", "seed",
         "crashes", "timeout", "fingerprint")
_MAP_SAME = ("event_kinds", "events", "categories")
_POINTS_SAME = ("event", "torn", "category")
# a representative pair stage's choice, made alike in every shard (inprocess/pairs.py)
_PAIRS_SAME = ("resumed_courses", "kill_points", "chosen", "per_class", "chosen_by",
               "sampled_courses")


class MergeError(UsageError):
    """Reports that are not the shards of one run."""


def read(path: str, error: type[UsageError] = UsageError) -> dict:
    """A report `faultsim run --json` wrote (merge's, compare's and --baseline's input);
    what is not one is `error`, in one line naming the file."""
    try:
        with open(path, encoding="utf-8") as f:
            report = json.load(f)
    except OSError as exc:
        raise error(f"{path}: cannot read it ({exc.strerror})") from None
    except ValueError as exc:
        raise error(f"{path}: not a JSON report ({exc})") from None
    if not isinstance(report, dict) or not isinstance(report.get("runs"), list):
        raise error(f"{path}: runs: missing; not a report faultsim run --json wrote")
    return report


def load(paths: Sequence[str]) -> list[tuple[str, dict]]:
    return [(path, read(path, MergeError)) for path in paths]


def merge(reports: list[tuple[str, dict]]) -> dict[str, Any]:
    """The whole run's report from its shards' (`(file, report)` pairs, any order)."""
    if not reports:
        raise MergeError("report merge: no reports given")
    for path, report in reports:  # its missing crash states would pass for a shard's
        why = partial_reason(report)
        if why:
            raise MergeError(f"{path}: partial: the report of a run cut short ({why}); "
                             "merge needs whole shards")
    first_path, first = reports[0]
    for path, report in reports[1:]:
        if report.get("version") != first.get("version"):
            raise MergeError(f"{path}: version: {report.get('version')!r}, but "
                             f"{first.get('version')!r} in {first_path}")
        if len(report["runs"]) != len(first["runs"]):
            raise MergeError(f"{path}: runs: {len(report['runs'])} runs, but "
                             f"{len(first['runs'])} in {first_path}")
    runs = [_merge_run([(path, report["runs"][n]) for path, report in reports], n)
            for n in range(len(first["runs"]))]
    refused = [r for _, report in reports for r in report.get("refused", [])]
    out: dict[str, Any] = {"ok": all(not r["violating"] for r in runs) and not refused,
                           "version": first.get("version"), "runs": runs}
    if refused:
        out["refused"] = refused
    return out


def _merge_run(parts: list[tuple[str, dict]], n: int) -> dict[str, Any]:
    path0, run0 = parts[0]
    for path, run in parts:
        for key in _SAME:
            if run.get(key) != run0.get(key):
                raise MergeError(f"{path}: runs[{n}].{key}: {run.get(key)!r}, but "
                                 f"{run0.get(key)!r} in {path0}")
    by = _check_shards(parts, n)
    out = dict(run0)
    out["shard"] = None
    total = lambda key: sum(run[key] for _, run in parts)  # noqa: E731
    for key in ("crash_states", "crash_states_resumed", "crash_states_escalated",
                "violating", "seconds"):
        out[key] = total(key)
    if all("crash_states_converged" in run for _, run in parts):
        out["crash_states_converged"] = total("crash_states_converged")
    if all("shortcuts" in run for _, run in parts):  # counts added, reasons from the sums
        out["shortcuts"] = shortcuts.merge([run["shortcuts"] for _, run in parts],
                                           run0["crashes"])
    else:  # not one shard's counts for the whole run's
        out.pop("shortcuts", None)
    if by == "kill point":  # each shard explored its own kill points
        out["kill_points_explored"] = total("kill_points_explored")
        out["categories"] = {c: sum(run["categories"].get(c, 0) for _, run in parts)
                             for c in run0["categories"]}
    walls = [run["wall_seconds"] for _, run in parts if run.get("wall_seconds") is not None]
    out["wall_seconds"] = round(sum(walls), 3) if walls else run0.get("wall_seconds")
    out["probes"] = [p for _, run in parts for p in run["probes"]]  # shard 1's
    depths: dict[str, dict] = {}
    for _, run in parts:
        for depth, d in run["schedules"].items():
            into = depths.setdefault(depth, {k: 0 for k in d})
            for k, v in d.items():
                into[k] = into.get(k, 0) + v
    out["schedules"] = {k: depths[k] for k in sorted(depths, key=int)}
    for k in out["schedules"].values():
        k["seconds"] = round(k["seconds"], 3)
    out["seconds"] = round(out["seconds"], 3)
    # one verdict comes from one shard: a stable sort by rank keeps its violations in order
    out["violations"] = sorted((v for _, run in parts for v in run["violations"]),
                               key=lambda v: v["rank"])
    out["counterexamples"] = _counterexamples(parts)
    if "states" in run0:
        out["states"] = _merge_states(parts, out["violations"])
    out["map"] = _merge_map([(path, run["map"]) for path, run in parts], n,
                            [_pair_ranks(run) for _, run in parts])
    # each shard's own limit (its clean runs were timed apart): the largest
    limits = [run.get("timeout_seconds") for _, run in parts]
    out["timeout_seconds"] = None if None in limits else max(limits, default=None)
    if "counts" in run0:  # faultsim.reports.counts, of the whole run
        out["counts"] = count(out).to_json()
    if run0.get("coverage") is not None:
        out["coverage"] = _merge_coverage(parts, n, out["map"])
    if run0.get("horizon") is not None:  # --horizon: the cuts of every shard
        for path, run in parts:
            if (run.get("horizon") or {}).get("requests") != run0["horizon"]["requests"]:
                raise MergeError(f"{path}: runs[{n}].horizon: not the one in {path0}")
        cut: dict[str, int] = {}
        past: dict[str, int] = {}
        for _, run in parts:
            for k, v in run["horizon"]["schedules_cut"].items():
                cut[k] = cut.get(k, 0) + v
            for k, v in run["horizon"].get("schedules_past_cut", {}).items():
                past[k] = past.get(k, 0) + v
        out["horizon"] = {"requests": run0["horizon"]["requests"],
                          "crash_states_cut": sum(run["horizon"]["crash_states_cut"]
                                                  for _, run in parts),
                          "schedules_cut": {k: cut[k] for k in sorted(cut, key=int)},
                          "schedules_past_cut": {k: past[k] for k in sorted(past, key=int)}}
    return out


def _merge_coverage(parts: list[tuple[str, dict]], n: int, joined: dict) -> dict:
    """The shards' `coverage` block (faultsim.core.classes): one choice of kill points, made
    alike in every shard from the clean run; each class's `judged` counted again from the
    joined map (a kill point two shards judged, crash states apart, counts once)."""
    path0, run0 = parts[0]
    cov = dict(run0["coverage"])
    for path, run in parts:
        for key in ("mode", "per_class", "chosen", "class_of"):
            if (run.get("coverage") or {}).get(key) != cov.get(key):
                raise MergeError(f"{path}: runs[{n}].coverage.{key}: not the one in {path0}")
    labels = [joined["labels"][_index(c)] for c in joined["points"]["verdict"]]
    done = [0] * len(cov["classes"])
    for c, label in zip(map(int, cov["class_of"].split(",")), labels):
        done[c] += label != UNEXPLORED
    cov["classes"] = [{**k, "judged": d} for k, d in zip(cov["classes"], done)]
    if cov.get("pairs") is not None:  # a representative pair stage (classes.PairCoverage)
        blocks = [(path, run["coverage"].get("pairs")) for path, run in parts]
        for path, block in blocks:
            if block is None or "judged_at" not in block:
                raise MergeError(f"{path}: runs[{n}].coverage.pairs.judged_at: missing (not "
                                 "a shard's report)")
            for key in _PAIRS_SAME:
                if block.get(key) != cov["pairs"].get(key):
                    raise MergeError(f"{path}: runs[{n}].coverage.pairs.{key}: not the one "
                                     f"in {path0}")
            if [c["signature"] for c in block["classes"]] != \
                    [c["signature"] for c in cov["pairs"]["classes"]]:
                raise MergeError(f"{path}: runs[{n}].coverage.pairs.classes: not the ones "
                                 f"in {path0}")
        cov["pairs"] = merged_pairs([block for _, block in blocks])
    return cov


def _check_shards(parts: list[tuple[str, dict]], n: int) -> str:
    """Every shard of one split, once: what the shards split (crash states or kill points)."""
    shards = [(path, run.get("shard")) for path, run in parts]
    if len(parts) == 1 and shards[0][1] is None:
        return "crash state"
    for path, shard in shards:
        if shard is None:
            raise MergeError(f"{path}: runs[{n}].shard: null (a whole run, not a shard)")
    path0, s0 = shards[0]
    seen: dict[int, str] = {}
    for path, shard in shards:
        for key in ("of", "by"):
            if shard.get(key) != s0.get(key):
                raise MergeError(f"{path}: runs[{n}].shard.{key}: {shard.get(key)!r}, but "
                                 f"{s0.get(key)!r} in {path0}")
        if shard["index"] in seen:
            raise MergeError(f"{path}: runs[{n}].shard.index: {shard['index']} again "
                             f"(also {seen[shard['index']]})")
        seen[shard["index"]] = path
    missing = sorted(set(range(1, s0["of"] + 1)) - set(seen))
    if missing:
        raise MergeError(f"{path0}: runs[{n}].shard: shard{'s' if len(missing) > 1 else ''} "
                         f"{', '.join('%d/%d' % (i, s0['of']) for i in missing)} missing")
    return s0["by"]


def _counterexamples(parts: list[tuple[str, dict]]) -> list[dict]:
    """As `crashmap.counterexamples` picks them: the first failure of each kind (the
    earliest by rank over every shard), the worst kinds first."""
    from .report import SEVERITY

    order = {k: n for n, k in enumerate(SEVERITY)}
    first: dict[tuple, dict] = {}
    for c in sorted((c for _, run in parts for c in run["counterexamples"]),
                    key=lambda c: c["rank"]):
        first.setdefault(tuple(c["invariants"]), c)
    return sorted(first.values(), key=lambda c: (
        min(order.get(k, len(order)) for k in c["invariants"]), c["rank"]))


def _pair_ranks(run: dict) -> list:
    """The ranks of a run's failing schedules of two crashes, in its order: the order of
    its map's `pairs` (each pair's violations are consecutive entries sharing one rank)."""
    ranks: list = []
    last = None
    for v in run["violations"]:
        key = (tuple(v.get("rank") or ()), tuple(v["schedule"]))
        if key != last and len(v["schedule"]) == 2:
            ranks.append(list(key[0]))
        last = key
    return ranks


def _merge_map(maps: list[tuple[str, dict]], n: int, ranks: list | None = None
               ) -> dict[str, Any]:
    """Each kill point's label: the union of the invariants its states violate in any
    shard, else escalated where one shard's states escalated, else passed where explored.
    `ranks`: each shard's `_pair_ranks`, which order the failing pairs as the whole run
    does (a first crash's pairs can be judged in several shards)."""
    from .crashmap import Codes, label_for
    from .report import SEVERITY

    path0, m0 = maps[0]
    for path, m in maps:
        for key in _MAP_SAME:
            if m.get(key) != m0.get(key):
                raise MergeError(f"{path}: runs[{n}].map.{key}: differs from {path0}'s")
        for key in _POINTS_SAME:
            if m["points"][key] != m0["points"][key]:
                raise MergeError(f"{path}: runs[{n}].map.points.{key}: differs from "
                                 f"{path0}'s")
    decoded = [[m["labels"][_index(c)] for c in m["points"]["verdict"]] for _, m in maps]
    labels = []
    for cells in zip(*decoded):
        broken = {k for c in cells if c not in (UNEXPLORED, PASSED, ESCALATED)
                  for k in c.split("+")}
        labels.append(label_for(broken, SEVERITY) if broken else ESCALATED
                      if ESCALATED in cells else PASSED if PASSED in cells else UNEXPLORED)
    codes = Codes()
    verdict = "".join(codes(label) for label in labels)
    ids: dict[str, str] = {}
    deep: set[str] = set()
    single: set[str] = set()
    pairs = []
    for k, (_, m) in enumerate(maps):
        ids.update(m["ids"])
        shard_deep = set(m["deep"].split(",")) - {""}
        deep |= shard_deep
        single |= set(m["ids"]) - shard_deep
        ranked = ranks[k] if ranks is not None and len(ranks[k]) == len(m["pairs"]) \
            else None
        for j, pair in enumerate(m["pairs"]):
            *where, code = pair.split(",")
            # by the whole run's order: the rank (first crash's kill point and state, then
            # the second's); without one, by where (a pair's states are not in `where`)
            rank = ranked[j] if ranked is not None else [2, int(where[0])]
            pairs.append(([int(w) for w in where], m["labels"][_index(code)], rank))
    pairs.sort(key=lambda p: (p[2], p[0]))
    failing = sorted(ids, key=int)
    return {**m0, "labels": codes.labels,
            "points": {**m0["points"], "verdict": verdict},
            "ids": {i: ids[i] for i in failing},
            "deep": ",".join(i for i in failing if i in deep and i not in single),
            "pairs": [",".join(map(str, where)) + "," + codes(label)
                      for where, label, _ in pairs]}


class _Failure:
    """A failing verdict as the JSON report keeps it (its violations share one rank)."""

    def __init__(self, entries: list[dict]) -> None:
        from types import SimpleNamespace

        self.rank = entries[0]["rank"]
        self.violations = [SimpleNamespace(invariant=e["invariant"],
                                           explanation=e["explanation"]) for e in entries]
        self.earlier = entries[0]["schedule"][:-1]
        self.replay = entries[0]["replay"]
        self.schedule = [SimpleNamespace(id=i) for i in entries[0]["schedule"]]


class _Run:
    """A merged run with what the JUnit and Markdown writers and the pytest fixture
    (`pytest --faultsim-ray`) read of a `report.ModelRun`."""

    def __init__(self, run: dict) -> None:
        from types import SimpleNamespace

        self.json = run
        self.scenario = SimpleNamespace(id=run["scenario"], path=run["path"])
        for key in ("agent", "crash_model", "seed", "crashes", "wall_seconds", "seconds"):
            setattr(self, key, run.get(key))
        shard = run.get("shard")  # (index, of), as a report.ModelRun keeps it
        self.shard = None if shard is None else (shard["index"], shard["of"])
        self.kill_points = range(run["kill_points_total"])
        # the explored kill points as far as the JSON keeps them: their categories
        self.explored = [SimpleNamespace(category=c) for c, k in run["categories"].items()
                         for _ in range(k)]
        self.verdicts = range(run["crash_states"])
        self.judged = run["crash_states_resumed"]
        self.probes = [SimpleNamespace(**p) for p in run["probes"]]
        self.failures: list[_Failure] = []
        for entry in run["violations"]:
            if self.failures and self.failures[-1].rank == entry["rank"]:
                self.failures[-1].violations.append(_Failure([entry]).violations[0])
            else:
                self.failures.append(_Failure([entry]))
        self.texts = {tuple(c["rank"]): c["text"] for c in run["counterexamples"]}

    @property
    def ok(self) -> bool:
        return not self.failures

    def counterexample(self, failure: _Failure) -> str:
        # the first failure of a kind is always among the report's counterexamples
        return self.texts[tuple(failure.rank)]

    def replay_command(self, failure: _Failure) -> str:
        return failure.replay

    def rank(self, failure: _Failure) -> list:
        return failure.rank

    def counts(self):
        return count(self.json)  # faultsim.reports.counts, as of a report.ModelRun

    def depth(self, n: int):
        """A schedule length's figures (`report.DepthStats`'s fields), zero when none."""
        from types import SimpleNamespace

        got = self.json["schedules"].get(str(n), {})
        return SimpleNamespace(**{k: got.get(k, 0) for k in (
            "total", "explored", "resumed", "converged", "after_convergence", "composed",
            "searched", "seconds")})

    def to_json(self, sparse_map: bool = False) -> dict:
        return self.json  # already the report's run (a merged map is whole)

    def coverage_line(self) -> str | None:
        return line_of(self.json.get("coverage"))  # as a report.ModelRun says it

    def horizon_line(self) -> str | None:
        from .text import horizon_line_of

        return horizon_line_of(self.json.get("horizon"), self.json["crash_states_resumed"])


def as_report(merged: dict[str, Any]):
    """The merged JSON report as the JUnit and Markdown writers, `run --ray` and the pytest
    fixture read a `report.Report`."""
    from .report import SEVERITY, Refusal, Report

    class Merged(Report):
        def counterexamples(self, limit: int = 3) -> list[str]:
            # the runs' own (the first of each kind, worst first: `_counterexamples`),
            # the worst kinds of every run first, as Report.counterexamples orders them
            found = []
            for r, run in enumerate(self.runs):
                for n, c in enumerate(run.json["counterexamples"]):
                    worst = min(SEVERITY.index(k) if k in SEVERITY else len(SEVERITY)
                                for k in c["invariants"])
                    found.append((worst, r, n, c["text"]))
            return [text for *_, text in sorted(found)[:limit]]

    from .interrupted import Partial

    partial = merged.get("partial")  # `run --ray` cut short: its shards' runs, unmerged
    return Merged(runs=[_Run(r) for r in merged["runs"]],  # type: ignore[misc]
                  refused=[Refusal(**r) for r in merged.get("refused", [])],
                  partial=None if not partial else Partial(**partial))


def _merge_states(parts: list[tuple[str, dict]], violations: list[dict]) -> list[list]:
    """The shards' `states` in the whole run's order: single crash states by kill point
    (the map's order) and their place among its crash states (an identity's ` /N`), then
    the failing schedules of several crashes in the order of their violations' ranks."""
    single, deep = [], []
    for _, run in parts:
        for entry in run["states"]:
            (deep if " then " in entry[0] else single).append(entry)

    def place(entry: list) -> tuple:
        # a kill point's id starts with its place: k<event>[.<byte>] (a torn point inside
        # an event's write comes before the point after it)
        found = re.match(r"k(\d+)(?:\.(\d+))?-", entry[1])
        point = (int(found.group(1)), math.inf if found.group(2) is None
                 else int(found.group(2))) if found else (-1, 0)
        head, _, last = entry[0].rpartition(" /")
        return point, int(last) if head and last.isdigit() else 1

    ranks: dict[str, list] = {}
    for v in violations:
        ranks.setdefault(" ".join(v["schedule"]), v["rank"])
    return sorted(single, key=place) + sorted(deep, key=lambda e: ranks.get(e[1], [9]))
