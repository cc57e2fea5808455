"""Every count a report shows, defined once and computed in one place.

`DEFINED` names each count with a one-line definition (docs/reference/json-report.md
lists them word for word, the HTML page shows them as tooltips); `count` computes them
from one run of a JSON report (`ModelRun.to_json()`, a file `--json` wrote, shards
merged by `faultsim report merge`, the pytest plugin's merged kill-point items). The
text table, the console's per-run header, the JSON's `counts`, JUnit's properties, the
Markdown summary and the HTML page all read these, so a figure is the same wherever it
appears.

Kill points are counted by their verdict, a kill point once: the judged ones split into
passed, failed (a single crash there fails) and failed only deeper (every single crash
passes, a schedule of 2 or more crashes starting there fails), as the crash map colours
them. Failures are counted by verdict, a crash state or schedule once however many
invariants it breaks.

Standard library only.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Mapping

# the crash map's fixed labels and its alphabet (faultsim.reports.crashmap encodes with them): one
# character a kill point; past these (never seen: it takes seven invariant combinations
# more), characters from Latin-1 on, still one a point
UNEXPLORED, PASSED, ESCALATED = "unexplored", "passed", "escalated"
ALPHABET = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"


@dataclass(frozen=True)
class Definition:
    name: str  # the key in the JSON report's `counts`
    label: str  # a table's column, the page's row
    text: str  # the one-line definition


DEFINED = (
    Definition("kill_points_total", "kill points in the run",
               "the kill points of the clean run"),
    Definition("kill_points_explored", "explored",
               "of those, the ones this run crashes at: all of them, the --kill-point "
               "selection, or a command agent's shard's"),
    Definition("kill_points_judged", "kill points",
               "of those, the ones where this run judged a crash state: fewer in an "
               "in-process shard, which judges only the crash states it owns"),
    Definition("kill_points_passed", "passed",
               "of the judged, those where every crash state and every schedule starting "
               "there passed (an escalation to a person is a pass)"),
    Definition("kill_points_failed", "failed",
               "of the judged, those where a single crash fails: a crash state there "
               "violates an invariant"),
    Definition("kill_points_failed_deeper", "failed with 2+ crashes",
               "of the judged, those where every single crash passes but a schedule of 2 "
               "or more crashes starting there fails (null: no such schedule was tried)"),
    Definition("crash_states", "crash states",
               "crash states judged after one crash (a kill point leaves one per outcome "
               "of the crash model)"),
    Definition("crash_states_failed", "crash states failed",
               "of those, the ones violating an invariant"),
    Definition("schedules_failed", "schedules failed",
               "failing schedules of 2 or more crashes, by their number of crashes"),
    Definition("probes_failed", "probes failed",
               "failing checks beyond kill points (the version probe)"),
    Definition("violating", "violations",
               "every failing verdict once: crash_states_failed + schedules_failed + "
               "probes_failed (a verdict breaking two invariants is one)"),
    Definition("counterexamples", "counterexamples",
               "the distinct kinds of failure (the invariants broken, and why where the "
               "trace tells), one counterexample shown for each"),
)
DEFINITION = {d.name: d for d in DEFINED}


@dataclass(frozen=True)
class Counts:
    """One run's counts (`DEFINED` says what each is)."""

    kill_points_total: int
    kill_points_explored: int
    kill_points_judged: int
    kill_points_passed: int
    kill_points_failed: int
    kill_points_failed_deeper: int | None
    crash_states: int
    crash_states_failed: int
    schedules_failed: dict[str, int]
    probes_failed: int
    violating: int
    counterexamples: int

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def failing(self) -> str:
        """The failing verdicts in words: "9 crash states and 72 schedules of 2 crashes"."""
        parts = [_plural(self.crash_states_failed, "crash state")] \
            if self.crash_states_failed else []
        parts += [f"{_plural(n, 'schedule')} of {k} crashes"
                  for k, n in sorted(self.schedules_failed.items(), key=lambda kv: int(kv[0]))]
        if self.probes_failed:
            parts.append("the version probe")
        return " and ".join(filter(None, [", ".join(parts[:-1]), parts[-1]])) if parts else ""

    def kill_points_cell(self) -> str:
        """The table's `kill points`: the judged, "381 of 668" when not all of them."""
        if self.kill_points_judged == self.kill_points_total:
            return str(self.kill_points_judged)
        return f"{self.kill_points_judged} of {self.kill_points_total}"

    def cells(self) -> tuple[str, str, str, str]:
        """The table's count columns (`TABLE`): kill points, passed, failed, failed deeper."""
        failed = str(self.kill_points_failed) + (" + probe" if self.probes_failed else "")
        deeper = "-" if self.kill_points_failed_deeper is None \
            else str(self.kill_points_failed_deeper)
        return (self.kill_points_cell(), str(self.kill_points_passed), failed, deeper)


# the count columns of the summary table (text, Markdown and HTML alike)
TABLE = ("kill_points_judged", "kill_points_passed", "kill_points_failed",
         "kill_points_failed_deeper")
HEADER = tuple(DEFINITION[name].label for name in TABLE)


def failing_in_words(run: Any, failing: list, verb: str = "violate") -> str:
    """Failing verdicts of a run (a `report.ModelRun`'s, or a merged report's run: each
    with `earlier`, the crashes before its last, and `run.rank(verdict)`) in words, as
    `Counts.failing` says them, then `verb` agreeing: "9 crash states and 72 schedules of
    2 crashes violate", "1 crash state violates"."""
    return entries_in_words([{"rank": run.rank(v), "schedule": [None] * (len(v.earlier) + 1)}
                             for v in failing], verb)


def entries_in_words(failing: list[Mapping[str, Any]], verb: str = "") -> str:
    """Failing verdicts as JSON entries (`rank`, `schedule`: a JSON run's `violations` a
    verdict at a time) in words, with `verb` agreeing when given."""
    return _in_words(*_tally(failing), verb)


def all_failing_in_words(counts: list[Counts], verb: str = "violate") -> str:
    """The failing verdicts of several runs together, as `failing_in_words` says them."""
    schedules: dict[str, int] = {}
    for c in counts:
        for k, n in c.schedules_failed.items():
            schedules[k] = schedules.get(k, 0) + n
    return _in_words(sum(c.crash_states_failed for c in counts), schedules,
                     sum(c.probes_failed for c in counts), verb)


def _in_words(states: int, schedules: dict[str, int], probes: int, verb: str) -> str:
    words = Counts(0, 0, 0, 0, 0, None, 0, states, schedules, probes, 0, 0).failing()
    if not verb:
        return words
    n = states + sum(schedules.values()) + probes
    return f"{words or 'no crash state'} {verb}{'s' if n <= 1 else ''}"


def _tally(failing: Any) -> tuple[int, dict[str, int], int]:
    """Failing verdicts (JSON entries: `rank`, `schedule`) by kind: crash states, schedules
    by their number of crashes, probes."""
    states = probes = 0
    by_depth: dict[str, int] = {}
    for v in failing:
        if is_probe(v):
            probes += 1
        elif len(v["schedule"]) == 1:
            states += 1
        else:
            key = str(len(v["schedule"]))
            by_depth[key] = by_depth.get(key, 0) + 1
    return states, dict(sorted(by_depth.items(), key=lambda kv: int(kv[0]))), probes


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def code(ch: str) -> int:
    """A map cell's label index (its character's position in `ALPHABET`, then Latin-1)."""
    i = ALPHABET.find(ch)
    return i if i >= 0 else ord(ch) - 0xC0 + len(ALPHABET)


def verdicts(violations: list[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """A JSON run's `violations` a verdict at a time (the first entry of each): a verdict's
    entries (one per invariant it breaks) are consecutive and share its rank and
    schedule."""
    out, last = [], None
    for v in violations:
        key = (tuple(v.get("rank") or ()), tuple(v["schedule"]))
        if key != last:
            out.append(v)
        last = key
    return out


def is_probe(v: Mapping[str, Any]) -> bool:
    """A violation of a check beyond kill points (its rank is [1], report.ModelRun.rank)."""
    return list(v.get("rank") or ()) == [1]


def count(run: Mapping[str, Any]) -> Counts:
    """The counts of one run of a JSON report, from its map (each kill point's verdict),
    its `violations` and its `counterexamples`."""
    m = run["map"]
    cells = m["points"]["verdict"] if "points" in m else "".join(m.get("explored", {}).values())
    labels = [m["labels"][code(c)] for c in cells]
    judged = sum(label != UNEXPLORED for label in labels)
    failing = sum(label not in (UNEXPLORED, PASSED, ESCALATED) for label in labels)
    deeper = len(set(m.get("deep", "").split(",")) - {""})
    states, schedules, probes = _tally(verdicts(run["violations"]))
    return Counts(
        kill_points_total=run["kill_points_total"],
        kill_points_explored=run["kill_points_explored"],
        kill_points_judged=judged, kill_points_passed=judged - failing,
        kill_points_failed=failing - deeper,
        kill_points_failed_deeper=deeper if run.get("crashes", 1) >= 2 or deeper else None,
        crash_states=run["crash_states"], crash_states_failed=states,
        schedules_failed=schedules, probes_failed=probes,
        violating=states + sum(schedules.values()) + probes,
        counterexamples=len(run.get("counterexamples") or ()))
