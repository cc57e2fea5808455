"""Kill-point classes, and the representative coverage that judges a few of each.

A long agent task is a loop: step 3 and step 150 run the same checkpoint code, so their
kill points differ in the step index and little else. A kill point's *class* is what it
is without that index:

- its category (`after-effect`, `checkpoint-mid-write`, ...);
- the event it follows or tears: its kind and its subject with the volatile parts made
  placeholders (digit runs `<n>`, hex ids `<hex>`, uuids `<uuid>`: `runs/t/step_0017.json`
  is `runs/t/step_<n>.json`, the model's `s@3` is `s@<n>`); a file by its whole path;
- the tool call it falls in (the last tool started in its model turn, as
  `faultsim.reports.identity` finds it): the part of the agent's code that runs it. The trace
  records no stack frames (`trace.Event` holds kind, subject, detail and size), so the
  agent's own code location is not part of the class; two code paths that make the same
  event in the same tool and phase share one;
- for a kill point of a model turn before its first tool (the model's answer, its
  stream, the save after it), the tools the turn before it called (`after NAME,...`):
  a crash there loses what those tools did unless it was saved, so the answer after a
  tool-using turn is not the same kill point as one after a text-only turn or after
  other tools (a history saved per node loses exactly the former). A set of tool names,
  so bounded by the agent's tools, not by the task's length;
- for a write, its size bucket (the power of two at or above its length: a checkpoint
  that outgrows 4 KiB starts new classes there), and for a torn point the kind of cut
  (`first`, `half`, `last` byte, a sector boundary, a power-of-two boundary of 8 KiB or
  more: `killpoints.torn_offsets`' representatives).

The crash model is the run's (a `ModelRun` is one model): the classes, and the kill points
a representative run chooses, are the same under every model, so one sweep serves both.

Representative coverage (`representative`) judges, of each class, its first and last
occurrence and `per_class` others drawn with a generator seeded from the run's seed and
the class (so the choice is the same on any worker count and shard), and every kill point
of the task's first and last step (its first model turn with what precedes it; its last
turn with what follows). The rest are not crashed: `Coverage` says how many, and what a
representative pass does not prove is in docs/explanation/guarantees.md. The pair stage
chooses its second crashes alike over the classes of the resumed courses (`cover_courses`).

Standard library and the bottom layer only (killpoints, trace)."""
from __future__ import annotations

import random
import re
from dataclasses import dataclass
from typing import Sequence

from ..killpoints import KillPoint, cut_kind, label
from .trace import Event

COVERAGES = ("exhaustive", "representative")
# Kill points judged per class beside its first and last occurrence. Two: each class is
# then judged at up to four places spread over the task (its ends and two seeded draws),
# a cost that grows with the classes, not with the task's length.
PER_CLASS = 2

_UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-"
                   r"[0-9a-fA-F]{12}")
# a hex id: six or more hex digits with at least one digit among them (not a word)
_HEX = re.compile(r"\b(?=[0-9a-fA-F]*[0-9])[0-9a-fA-F]{6,}\b")
_DIGITS = re.compile(r"\d+")
_TOOL_STARTS = ("mark.tool.start", "mark.pa.tool.start")
_POWER_CUT = 1 << 13  # torn_offsets keeps the power-of-two boundaries from 8 KiB up


def normalise(text: str) -> str:
    """`text` with its volatile parts as placeholders: uuids, hex ids, digit runs."""
    return _DIGITS.sub("<n>", _HEX.sub("<hex>", _UUID.sub("<uuid>", text)))


def size_bucket(size: int) -> str:
    """The power of two at or above `size` bytes, in words (`<=4KiB`)."""
    top = 1 << max(0, size - 1).bit_length()
    for unit, name in ((1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")):
        if top >= unit:
            return f"<={top // unit}{name}"
    return f"<={top}B"


def _cut(size: int, offset: int) -> str:
    kind = cut_kind(size, offset)
    if kind == "sector" and offset >= _POWER_CUT and offset & (offset - 1) == 0:
        return "power-of-two"
    return kind


def _tools(trace: Sequence[Event]) -> list[str]:
    """Per event, the tool call it falls in: the last tool started in its model turn
    (`faultsim.reports.identity.context`'s rule) as `tool NAME`; for an event of a turn before
    its first tool (the model's answer, its stream, the save that follows it), the tools
    the turn before it called, as `after NAME,...` ("" when it called none)."""
    out, tool, called, before = [], "", set(), ""
    for event in trace:
        if event.kind == "model.response" and event.detail.startswith("200"):
            # A crash here loses what the last turn's tools did unless it was saved: a
            # turn's answer after a tool-using turn is not the same kill point as one
            # after a text-only turn (a save per node misses exactly the former)
            before = ",".join(sorted({normalise(t) for t in called}))
            tool, called = "", set()
        elif event.kind in _TOOL_STARTS:
            tool = event.subject
            called.add(tool)
        out.append(f"tool {normalise(tool)}" if tool else
                   f"after {before}" if before else "")
    return out


def signature(point: KillPoint, trace: Sequence[Event], tools: Sequence[str] | None = None
              ) -> str:
    """The class of `point` of `trace` (its clean course), in words:
    `CATEGORY | KIND SUBJECT [| tool NAME | after NAME,...] [| SIZE] [| cut KIND]`."""
    if point.index == 0:
        return f"{point.category} | start"
    if point.index > len(trace):  # a backend whose points are not events of this trace
        return f"{point.category} | {normalise(point.where)}"
    event = trace[point.index - 1]
    subject = event.subject if event.kind.startswith("fs.") else label(event)
    parts = [point.category, f"{event.kind} {normalise(subject)}".rstrip()]
    tool = (tools if tools is not None else _tools(trace))[point.index - 1]
    if tool:
        parts.append(tool)
    if event.kind == "fs.write":
        parts.append(size_bucket(event.size))
    if point.torn:
        parts.append(f"cut {_cut(event.size, point.offset)}")  # type: ignore[arg-type]
    return " | ".join(parts)


def steps(points: Sequence[KillPoint], trace: Sequence[Event]) -> list[int]:
    """Per kill point, its step: the model turns answered before or at its event (0 before
    the first answer: the task's setup)."""
    turn_of, turn = [0], 0
    for event in trace:
        if event.kind == "model.response" and event.detail.startswith("200"):
            turn += 1
        turn_of.append(turn)
    return [turn_of[min(p.index, len(trace))] for p in points]


@dataclass(frozen=True)
class Coverage:
    """What a run covers of its kill points: every one (`exhaustive`) or a representative
    choice (`representative`), and the classes either way (for the report)."""

    mode: str  # one of COVERAGES
    per_class: int  # seeded draws per class beside its first and last (representative)
    classes: tuple[str, ...]  # each class's signature, in order of first occurrence
    class_of: tuple[int, ...]  # per kill point of the run (its order), its class
    chosen: tuple[int, ...]  # positions of the kill points this coverage crashes at

    @property
    def representative(self) -> bool:
        return self.mode == "representative"

    @property
    def at_least(self) -> int:
        """Occurrences judged of each class (all of one that has fewer)."""
        return 2 + self.per_class

    def not_crashed(self) -> int:
        return len(self.class_of) - len(self.chosen)

    def line(self) -> str | None:
        """The one line a representative run prints (and every report says)."""
        return line_of(self.to_json())

    def to_json(self, judged: set[int] | None = None) -> dict:
        """The report's `coverage` block: the mode, the counts, each kill point's class
        (`class_of`, comma-separated indices into `classes`, in kill-point order) and per
        class its occurrences and how many of them `judged` (positions with a verdict)."""
        occurrences = [0] * len(self.classes)
        done = [0] * len(self.classes)
        for n, c in enumerate(self.class_of):
            occurrences[c] += 1
            if judged is not None and n in judged:
                done[c] += 1
        return {"mode": self.mode,
                "per_class": self.per_class if self.representative else None,
                "at_least": self.at_least if self.representative else None,
                "kill_points": len(self.class_of), "chosen": len(self.chosen),
                "not_crashed": self.not_crashed(),
                "class_of": ",".join(map(str, self.class_of)),
                "classes": [{"signature": s, "occurrences": occurrences[c],
                             "judged": done[c]} for c, s in enumerate(self.classes)]}


def line_of(block: dict | None) -> str | None:
    """What a run covered, in one line, from its report's `coverage` block (`to_json`):
    None for an exhaustive run (or one whose kill points are not classed)."""
    if block is None or block["mode"] != "representative":
        return None
    line = (f"representative: {len(block['classes'])} classes of {block['kill_points']} "
            f"kill points, each judged at >= {block['at_least']} occurrences (every one "
            f"of a class with fewer); {block['not_crashed']} kill points not crashed")
    pairs = pairs_line_of(block.get("pairs"))
    return line if pairs is None else f"{line}; {pairs}"


def cover(points: Sequence[KillPoint], trace: Sequence[Event], mode: str = "exhaustive",
          per_class: int = PER_CLASS, seed: str = "0") -> Coverage:
    """The classes of `points` (the clean run's kill points, in order) and the ones `mode`
    crashes at. Deterministic in (trace, mode, per_class, seed): the worker count, shards
    and crash models choose nothing."""
    tools = _tools(trace)
    index: dict[str, int] = {}
    class_of = []
    for p in points:
        class_of.append(index.setdefault(signature(p, trace, tools), len(index)))
    classes = tuple(index)
    if mode != "representative":
        return Coverage(mode, per_class, classes, tuple(class_of), tuple(range(len(points))))
    members: list[list[int]] = [[] for _ in classes]
    for n, c in enumerate(class_of):
        members[c].append(n)
    chosen: set[int] = set()
    for c, where in enumerate(members):
        chosen.update((where[0], where[-1]))
        # seeded by the run's seed and the class's words (a str seed is hashed with
        # SHA-512, not Python's per-process hash): the same draw in every process
        draw = random.Random(f"{seed}\x00{classes[c]}")
        middle = where[1:-1]
        chosen.update(draw.sample(middle, min(per_class, len(middle))))
    # every kill point of the first step (the setup and the first model turn) and of the
    # last (the last turn and what follows it)
    step = steps(points, trace)
    last = step[-1] if step else 0
    chosen.update(n for n, s in enumerate(step) if s <= 1 or s == last)
    return Coverage(mode, per_class, classes, tuple(class_of), tuple(sorted(chosen)))


# The pair stage under representative coverage (faultsim.inprocess.pairs, real/pairs.py).
# A second crash falls in the course of a run resumed after a first crash: recovery code
# (reconciling, re-asking, settling a pending call) that the clean run never ran, then the
# task's own steps again. Those kill points are classed as the clean run's are (`signature`
# over the resumed course), and the classes are shared by every resumed course of the
# model: recovery at step 3 and at step 150 is one class, judged at its first and last
# occurrence over all the courses (in the order of their first crashes, then of the
# course) and `per_class` seeded others drawn among its occurrences in a few sampled
# courses (`sampled_courses`), not once per course. Beside the classes:
#
# - per course, every kill point of its *first step*: its recovery (loading the
#   checkpoint, settling a pending call, repeating a blind one, the save that completes
#   it, the request that re-asks) and its first turn (the answer and what is saved after
#   it, the first write after recovery). That is where the course differs from every
#   other (what recovery does depends on the first crash's state), and where the mistakes
#   only two crashes expose live (reconcile_in_place's in-place save, repeat_before_save's
#   send before its record, jsonl_transcript's record appended to a torn tail, which
#   fails in the first turn after recovery, at its answer and the append's first and
#   last byte: its recovery alone missed those): so each course is crashed through it,
#   not just a class's ends. A torn write there is crashed at its
#   first, half and last byte, power-of-two cuts and its first sector boundary, not at
#   every one: those grow with the file (a checkpoint that grows with the task), differ
#   from the first only in how many whole sectors landed, and are judged as their class
#   (`cut sector` per size bucket) at its first, last and seeded occurrences over all
#   the courses. (One sector cut per course is needed: repeat_before_save's intent record,
#   written after the repeated send, fails at its sector cut in the recovery of some
#   courses only, and no draw of that class landed there: tests/test_classes.py.) What is
#   left is bounded per course (no model turn of the task runs in it), so this rule costs
#   the courses times a bound;
# - every kill point of the first step (recovery and first turn) and the last step of the
#   first course and of the last course (first-crash order): the task's first and last
#   step as the single-crash choice judges them, each after the earliest and the latest
#   first crash, a bounded number of points however many courses there are (the first step of the
#   others is judged by the rule above, bar its later sector cuts).
#
# What that gives up (docs/explanation/guarantees.md): a course's ordinary steps after its
# recovery run the task's step code again, in classes every course shares; a mistake that
# shows there only after some first crashes is caught only where the class choice lands.
# Before this rule every kill point of *every* course's first and last step was judged
# (the first step with all its sector cuts):
# courses x (kill points of a step, which grow with the checkpoint's torn cuts), each a
# resumed run, which made the pair stage grow as the square of the task's length.


@dataclass(frozen=True)
class PairCoverage:
    """What a representative pair stage crashes at: per resumed course (one per first crash
    explored, in their order) the positions of its kill points chosen, and the classes over
    every course (`judged`: per course, the positions a second crash state was judged at).
    `chosen_by`: how many positions each rule chose first (`class`, then `first_step`:
    each course's, bar later sector cuts, then `ends`: the first and last step of the
    first and last course); `sampled`: the courses the classes' seeded draws land in."""

    per_class: int
    classes: tuple[str, ...]
    occurrences: tuple[int, ...]  # per class, its kill points over every course
    kill_points: tuple[int, ...]  # per course, its kill points
    chosen: tuple[tuple[int, ...], ...]  # per course, the positions crashed at
    class_of: tuple[Sequence[int], ...]  # per course, per kill point, its class
    chosen_by: tuple[tuple[str, int], ...] = ()
    sampled: tuple[int, ...] = ()  # the courses the classes' seeded draws land in

    def to_json(self, judged: Sequence[set[int]]) -> dict:
        """The `coverage.pairs` block: the classes of the resumed courses, per class its
        occurrences and how many were judged, and the kill points not crashed."""
        done = [0] * len(self.classes)
        for course, positions in zip(self.class_of, judged):
            for n in positions:
                done[course[n]] += 1
        total, crashed = sum(self.kill_points), sum(len(j) for j in judged)
        return {"resumed_courses": len(self.kill_points), "kill_points": total,
                "chosen": sum(len(c) for c in self.chosen), "judged": crashed,
                "not_crashed": total - crashed, "per_class": self.per_class,
                "at_least": 2 + self.per_class, "chosen_by": dict(self.chosen_by),
                "sampled_courses": list(self.sampled),
                "classes": [{"signature": s, "occurrences": self.occurrences[c],
                             "judged": done[c]} for c, s in enumerate(self.classes)]}

    def judged_at(self, judged: Sequence[set[int]]) -> list[list[int]]:
        """A shard's judged positions as `[course, position, class]`, in order: what
        `faultsim report merge` joins (a position two shards judged, states apart, counts
        once), and counts again as `to_json` does (`merged_pairs`)."""
        return [[k, n, self.class_of[k][n]] for k, positions in enumerate(judged)
                for n in sorted(positions)]


def merged_pairs(blocks: Sequence[dict]) -> dict:
    """The whole run's `coverage.pairs` block from its shards' (each with `judged_at`):
    the choice is the same in every shard (checked by the caller); what was judged is
    the union of the shards' positions, counted as `PairCoverage.to_json` counts them."""
    out = {k: v for k, v in blocks[0].items() if k != "judged_at"}
    judged = {tuple(j) for b in blocks for j in b["judged_at"]}
    done = [0] * len(out["classes"])
    for _, _, c in judged:
        done[c] += 1
    out["judged"] = len(judged)
    out["not_crashed"] = out["kill_points"] - len(judged)
    out["classes"] = [{**k, "judged": d} for k, d in zip(out["classes"], done)]
    return out


def pairs_line_of(block: dict | None) -> str | None:
    """What a representative pair stage covered, in one line (`PairCoverage.to_json`)."""
    if not block:
        return None
    return (f"second crashes: {len(block['classes'])} classes of {block['kill_points']} kill "
            f"points in {block['resumed_courses']} resumed courses, each judged at >= "
            f"{block['at_least']} occurrences (every one of a class with fewer), every kill "
            "point of each course's first step (recovery and first turn; a torn write at its "
            "first sector cut), and of the first and last step of the first "
            f"and last course; {block['not_crashed']} kill points not crashed")


def pair_ranks(classes: Sequence[str], occurrences: Sequence[int], per_class: int,
               seed: str, among: Sequence[Sequence[int]] | None = None) -> list[set[int]]:
    """Per class, the ranks of its occurrences (0-based, over every course in order) the
    pair stage judges: the first, the last and `per_class` seeded among the rest (`among`:
    per class, the ranks of the rest the draw may land on, an empty one meaning all)."""
    wanted: list[set[int]] = []
    for c, count in enumerate(occurrences):
        draw = random.Random(f"{seed}\x00pairs\x00{classes[c]}")
        ranks = {0, count - 1}
        pool = [r for r in among[c] if 0 < r < count - 1] if among is not None else []
        if not pool and count > 2:
            pool = range(1, count - 1)
        ranks.update(draw.sample(pool, min(per_class, len(pool))))
        wanted.append(ranks)
    return wanted


def sampled_courses(kill_points: Sequence[int], per_class: int, seed: str) -> tuple[int, ...]:
    """The courses a class's seeded draws land in (`cover_courses`): the first and the last
    course with kill points and `per_class` seeded others, in first-crash order."""
    have = [k for k, n in enumerate(kill_points) if n]
    if len(have) <= 2:
        return tuple(have)
    middle = have[1:-1]
    draw = random.Random(f"{seed}\x00pairs\x00courses")
    return tuple(sorted({have[0], have[-1],
                         *draw.sample(middle, min(per_class, len(middle)))}))


def cover_courses(courses, per_class: int = PER_CLASS, seed: str = "0") -> PairCoverage:
    """The representative choice of second crashes over `courses`: an iterable of (kill
    points, trace) per resumed course, in the order of their first crashes (each course's
    points as `Golden.kill_points(trace)` gives them; taken one at a time, not held).
    Deterministic in (courses, per_class, seed): worker count and shards choose nothing."""
    from array import array

    index: dict[str, int] = {}
    class_of: list = []
    edges: list[tuple[frozenset, int, int]] = []  # per course, (the positions of its first
    # step chosen, end of its first step, start of its last step), steps non-decreasing
    for points, trace in courses:
        tools = _tools(trace)
        row = array("I", (index.setdefault(signature(p, trace, tools), len(index))
                          for p in points))
        class_of.append(row)
        step = steps(points, trace)
        last = step[-1] if step else 0
        # the first step, but of a torn write's sector cuts only the first: they grow with
        # what is written (a checkpoint that grows with the task); its first, half, last
        # byte and power-of-two cuts stay, and its other sector cuts are judged by their
        # class (`cut sector`) at its first, last and seeded occurrences
        first, sectors = set(), set()
        for n, s in enumerate(step):
            if s > 1:
                break
            point = points[n]
            if point.torn and 0 < point.index <= len(trace) and _cut(
                    trace[point.index - 1].size, point.offset) == "sector":
                if point.index in sectors:
                    continue
                sectors.add(point.index)
            first.add(n)
        first_end = sum(1 for s in step if s <= 1)
        last_start = next((n for n, s in enumerate(step) if s == last), len(step))
        edges.append((frozenset(first), first_end, last_start))
    classes = tuple(index)
    occurrences = [0] * len(classes)
    for row in class_of:
        for c in row:
            occurrences[c] += 1
    # ranks (0-based, over every course in order) of each class's occurrences to judge:
    # the first, the last and `per_class` seeded among the rest (a str seed is hashed with
    # SHA-512: the same draw in every process); "pairs" keeps it apart from the first
    # crashes' draw of the same class
    #
    # The seeded draws land in a few courses, not anywhere (`sampled_courses`: the first
    # and the last course and `per_class` seeded others): a draw at a course's step k
    # costs that course's driver k steps (its run is driven to its last chosen point and
    # no further, inprocess/pairs.py), and draws spread over every course drove nearly
    # all of every course (79 % of the courses' events at 25 steps), the courses times
    # the task. So every course is driven through its first step, the sampled ones (and
    # those holding a class's first or last occurrence) further. A class with no middle
    # occurrence in the sampled courses is drawn over all of them, as before.
    kill_points = [len(row) for row in class_of]
    sampled = sampled_courses(kill_points, per_class, seed)
    among: list[list[int]] = [[] for _ in classes]
    seen = [0] * len(classes)
    keep = set(sampled)
    for k, row in enumerate(class_of):
        for c in row:
            if k in keep:
                among[c].append(seen[c])
            seen[c] += 1
    wanted = pair_ranks(classes, occurrences, per_class, seed, among)
    # the first and the last course with kill points: their first and last steps whole
    ends = [k for k, row in enumerate(class_of) if len(row)]
    ends = {ends[0], ends[-1]} if ends else set()
    seen = [0] * len(classes)
    chosen = []
    by = {"class": 0, "first_step": 0, "ends": 0}
    for k, (row, (first, first_end, last_start)) in enumerate(zip(class_of, edges)):
        picked = []
        for n, c in enumerate(row):
            rule = ("class" if seen[c] in wanted[c] else "first_step" if n in first
                    else "ends" if k in ends and (n < first_end or n >= last_start)
                    else None)
            if rule is not None:
                picked.append(n)
                by[rule] += 1
            seen[c] += 1
        chosen.append(tuple(picked))
    return PairCoverage(per_class, classes, tuple(occurrences),
                        tuple(kill_points), tuple(chosen), tuple(class_of),
                        tuple(by.items()), sampled)
