"""Pairs after convergence: a second crash after the first crash's resumed run met the clean
run is the clean run's own first crash at the same point, already judged in the
single-crash sweep. Its verdict is composed from what is known instead of resuming it.

Where. The first crash's resumed run (incarnation 2) met the clean run at clean request j
(faultsim.inprocess.convergence: the same files, observable world, request and memory,
with neither the seeded streams nor `env.incarnation` read by the clean run after j).
From there it takes the clean run's steps, so a kill point after its event `meets[0]`
(the last before that request) is the clean run's kill point at the same distance past
its event `meets[1]`, and the pair stage's course there is the clean run's (its driver
runs incarnation 2 to its end and checks its trace). Kill points up to that event are
resumed as before (the agent's memory there need not be the clean run's yet).

What the pair's verdict depends on. A pair's verdict is (1) the state guards, on the crash
state and where its resumed run began; (2) the resume guards, on the resumed run
(incarnation 3) and on the whole history its world holds; (3) what the killed incarnation
did after the kill (`after_kill`). At such a kill point:

- the crash state is the clean run's first crash state there: the same files, written by
  the same steps. Checked, not assumed: the pair's state must have the digest of the
  single-crash sweep's state at that point and order (under the power model the two can
  differ in what was synced before the meeting; then the pair is resumed);
- the world the resumed run can observe is the clean run's there (equal at the meeting,
  then changed by the same steps). So incarnation 3 starts from what incarnation 2 of the
  clean run's first crash there started from, and does what it did, step by step, unless
  a step reads what differs between them: which incarnation it is (`env.incarnation`,
  3 against 2) and the seeded random streams (each incarnation its own seed). The single
  crash's resumed run is kept with `blind` (it drew no random number and never read
  `env.incarnation`: interpose.determinism.draws, agent.incarnation_reads); only such a
  run is reused, so incarnation 3 would have taken the same steps: the same calls with
  the same answers, the same requests, files, outcome, error or hang, and the same first
  touches of its files (what the sweep's memos are keyed on);
- so (1) is the single crash's state guards' verdict (the same state, the same first turn
  asked), and (3) the clean run's aftermath at that kill point (the same code, the same
  memory, unwinding from the same kill);
- (2) is not copied: the history differs (the first crash's stretch before the meeting:
  its ledger entries, its repeated attempts, its re-asked turns and billed tokens, what
  the API refused). The pair's world is composed instead, as it would be at the end: the
  pair's own world at the kill point (its first stretch and the clean stretch after the
  meeting, from the driver that stands there), then what the single crash's resumed run
  added (its ledger entries and model requests, `Tail`), renumbered and tagged with
  incarnation 3. Every resume guard is then run on that world as on a resumed run, and
  the counterexample (ResumeSummary) is built from it. Where the added part names its
  incarnation in text (a refused connection or process) or holds threads of the agent's
  (their names follow the process), the pair is resumed instead.

Second crashes equal to earlier ones. Most first crashes never meet the clean run (a
resume that records its recovery keeps a history of its own), but second crashes after two
different first crashes often leave the same crash state in the same observable world
(`fingerprints.world_key`: the clock, the services, the fake's counts, paused answers,
prompt cache, request count), their histories apart (the ledger: what the memo's key
differs by). The third incarnation starts from the same and has the same number (the same
seeded streams, the same `env.incarnation`), so it takes the same steps; a second crash
whose state and observable world equal one resumed after an earlier first crash is
composed from that run as above (`compose`, with the same `Tail.reusable` condition as the
search's: faultsim.inprocess.search_after_convergence.Known). The runs one first crash
resumes are learned once its sweep is over (pairs.py), never while its children run, so
what is composed does not depend on how they interleave.

Assumed, as the sweep's memos and convergence already assume: a resumed run depends on
its crash state and the world it observes, not on the killed process's memory (a fresh
incarnation builds its agent anew); the rest as convergence.py states it.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass, replace
from typing import Any

from ..judge.oracle import RESUME_GUARDS, CrashRun, Golden, judge
from ..pipeline.sweep import ResumeResult
from ..reports.report import ResumeSummary
from ..world.ledger import Ledger


@dataclass(frozen=True)
class Tail:
    """What one resumed run added to the world, and how it ended (kept where a further
    crash will be tried: a pair after convergence is composed from it)."""

    ledger: tuple  # its ledger entries
    requests: tuple  # its model requests
    outcome: Any
    error: str | None
    timed_out: bool
    final: dict
    escapes: tuple
    strays: tuple
    unrouted: tuple  # connections it had refused (their text names the incarnation)
    processes: tuple  # processes it had refused (likewise)
    blind: bool  # it drew no random number and never read env.incarnation

    @property
    def reusable(self) -> bool:
        """Another incarnation from the same state and world would end the same."""
        return self.blind and not (self.unrouted or self.processes or self.strays)


def tail_of(crash_run: CrashRun, before: tuple[int, int, int, int], blind: bool) -> Tail:
    """What `crash_run` added to its world since it held `before` (ledger entries, model
    requests, refused connections and processes)."""
    world = crash_run.world
    return Tail(tuple(world.ledger.entries[before[0]:]),
                tuple(world.model.requests[before[1]:]), crash_run.outcome,
                crash_run.error, crash_run.timed_out, dict(crash_run.final),
                tuple(crash_run.escapes), tuple(crash_run.strays),
                tuple(world.unrouted[before[2]:]), tuple(world.processes[before[3]:]),
                blind)


def compose(golden: Golden, schedule: list, state: Any, world: Any, known: ResumeResult
            ) -> ResumeResult:
    """The verdict of resuming `state` in `world` (a pair's second crash), from `known`:
    the single crash's ResumeResult whose run started from the same state and observable
    world. The resume guards run on `world` with that run's additions, as incarnation
    `world.incarnation + 1`."""
    tail: Tail = known.tail
    incarnation = world.incarnation + 1
    entries = list(world.ledger.entries)
    for e in tail.ledger:
        entries.append(replace(e, seq=len(entries) + 1, incarnation=incarnation))
    requests = list(world.model.requests)
    for q in tail.requests:
        requests.append(replace(q, index=len(requests) + 1, incarnation=incarnation))
    composed = copy.copy(world)  # read only: the guards read its ledger, requests, lists
    composed.ledger = Ledger(entries)
    composed.model = copy.copy(world.model)
    composed.model.requests = requests
    composed.unrouted, composed.processes = list(world.unrouted), list(world.processes)
    run = CrashRun(list(schedule), state, composed, outcome=tail.outcome, error=tail.error,
                   timed_out=tail.timed_out, final=dict(tail.final),
                   escapes=list(tail.escapes), strays=list(tail.strays),
                   resume_positions=[known.first_position]
                   if known.first_position is not None else [])
    violations = judge(golden, run, RESUME_GUARDS)
    return ResumeResult(violations, ResumeSummary.of(run) if violations else None,
                        known.first_position, 0.0, dict(known.first_content),
                        dict(known.first_presence), known.listed, None, known.escalated)


class Shortcut:
    """The pair stage's second crashes after the first crash's resumed run met the clean
    run (`meets`: its events and the clean run's before the meeting request): each is
    looked up among the single-crash sweep's verdicts (`judged`: (model, event index,
    offset, order) -> Judged) and composed, or None (resume it)."""

    def __init__(self, golden: Golden, judged: dict, meets: tuple[int, int]) -> None:
        self.golden, self.judged, self.meets = golden, judged, meets

    def __call__(self, model: str, point: Any, order: int, state: Any, world: Any,
                 schedule: list) -> tuple[Any, list[str]] | None:
        own, clean = self.meets[:2]  # a third item: cut at the horizon (pairs.py)
        if point.index <= own:
            return None  # before the meeting: the agent's memory may not be the clean run's
        j = self.judged.get((model, point.index - own + clean, point.offset, order))
        if j is None or j.result.tail is None or not j.result.tail.reusable:
            return None  # not judged here (a shard, --kill-point), or not reusable
        if j.state.digest() != state.digest():
            return None  # another crash state (power: synced otherwise before the meeting)
        return compose(self.golden, schedule, state, world, j.result), list(j.after_kill)
