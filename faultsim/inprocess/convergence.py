"""Convergence cuts: a resumed run that reaches a model request in a state the clean run
was in at one of its own model requests does, from there, what the clean run did. It is stopped
there and its verdict completed from the clean run's known remainder.

The states are compared by their fingerprints (faultsim.inprocess.fingerprints: what makes
two states equal); this module holds where a run is cut and how its verdict is completed:
the clean run's course (`Recorder`, `Course`), the watch over a resumed run (`Watch`,
`Cut`) and the completion of its world, trace and first touches (`complete`,
`course_events`, `tracked`).

Why the cut is sound. An incarnation is a deterministic program (the golden guard checks
it): its next step is a function of the state of its process and of what it observes. At
the cut the resumed run and the clean run (at clean request j) are equal in everything
their future can read:

- the sandbox: every file and folder, byte for byte, with its mode and times (no write
  outside the sandbox lands; the real folders passed through are read-only);
- the world it can observe: the clock, each service's state, the fake model's per-turn
  answer and fault counts (they decide the tool-use ids and faults still to come), its
  paused answers and prompt cache (they decide usage), how many requests it logged (each
  answer's request-id header numbers it), the durable state of adapters. Not compared:
  how many ledger entries there are (no receiver tells the agent; the oracle's count is
  completed below), and the validator's memory of the last request, which only spares
  work (its verdict is a function of the request alone);
- the request itself (method, route, body: all the fake reads of it);
- the agent's memory, as far as Python lets it be read: its frames on the stack from the
  agent's `run()` to the request and the globals of its own modules, followed through
  every object they reach (`fingerprint`). What that reads, where it refuses (no cut) and
  the one thing it assumes is argued where it is read: faultsim.inprocess.fingerprints. On
  an interpreter cpython.py does not know no run is cut (the run goes on to its end, as
  with `convergence=False`);
- nothing else moves on its own: no other thread of the incarnation is alive (its state
  is not on the stack) and no event loop runs (other tasks' state is not either);
- what still differs cannot be read by the future: the seeded random streams (random,
  uuid4, tempfile names: each incarnation its own seed) are only observed by drawing, and
  the clean run draws nothing from them after request j; `env.incarnation` (2 against 1)
  is only observed by reading it, and the clean run's code never reads it after j. So,
  step by step, both runs take the same step: the first step that could tell them apart
  would read one of these, and the clean run takes none.

Hence the resumed run would do exactly what the clean run did after request j: the same
calls to the world with the same answers, the same requests (repeat counts too: the
fake's counts are equal), the same files at the end, the same outcome, and the same first
touches of the files it started from (`first_content`, for the sweep's memos). Its
verdict is judged on its world with the clean run's remainder appended (renumbered,
under its own incarnation), the clean run's final files and outcome. Under the same
rules a cut is refused where the clean run itself ran threads, left files open, or its
two golden runs disagree at a request (memory that varies between runs: object ids).

A run whose trace is kept for a further crash (the pair stage's first crashes: the second
crash's kill points come from its course) is cut too: its course is its own events up to
the cut and the clean run's after clean request j, renumbered (`course_events`): the
events the run would have gone on to emit, by the same argument (and the pair stage's
driver, which runs that incarnation to its end, checks its trace against it). Where it
met the clean run (`Cut.events`, `Point.events`) is what lets the pair stage take a second
crash after that point as the clean run's own first crash there
(faultsim.inprocess.after_convergence). What is not cut: subprocess mode.

The horizon (`--horizon H`, off by default) is not a proof but a stated assumption, for
tasks too long to run every resumed run to its end (a resume that re-asks a turn or
settles a pending call keeps a record of it, so it never meets the clean run's state, and
the exhaustive sweep grows with the square of the task's length: engine.md). Past its
first H model requests after recovery, a resumed run is cut at its first request equal
(method, route, body) to exactly one request the clean run made with the same effects
applied before it (by any incarnation) and every service in the same state (`horizon_key`),
and its rest is taken to be the clean run's after that request, as a convergence cut's is: same remainder, same
final files and outcome. Seen exactly: everything the run did up to the cut (what the
recovery read and wrote, every effect it applied or repeated, every request it made, so
every step it repeated and every conversation the API would refuse). Assumed, not seen:
that what still differs at the cut (its files, its world, its memory: the records of the
recovery itself) changes nothing later; a violation that would show only later (a counter
that drifts and double-pays twenty steps on, a file that the resumed run corrupts and
reads back much later) is missed, and a run that never asks what the clean run asked is
not cut and runs to its end. Equal requests are the natural place: the conversation the
model sees is the clean run's, so the next answers are (the fake answers by what it is
asked; the fresh tool-use ids a re-asked turn was given are read as the first asking's,
and assumed to change nothing but themselves); equal effects and services keep the remainder's effects the ones still to do. A request the clean run made twice (a retried fault) is not a cut point: which
remainder follows depends on the fault counts.

Runs whose trace is kept for a second crash (the pair stage's first crashes) are cut at
the horizon too under representative coverage (`Explorer.horizon_kept`; exhaustive pairs
and the search run them to their end, as before). The assumption is then carried to the
second crash: a crash past the cut in that run behaves as the clean run's crash at the
same point (the same distance past the cut request), which the single-crash sweep judges
by its classes of the clean run's kill points. So the pair stage crashes such a first
crash's course only up to the cut (its own events: pairs.within_horizon; its driver stops
there and checks that stretch), and the kill points past it are counted, not crashed
(`schedules_past_cut` in the report's `horizon`). They are not composed one by one as
after a convergence cut: past a horizon cut the run's files are not the clean run's (a
recovery record, seen: a plan.json of 809 bytes against 574), so its crash states there
are not the single crashes', and a driver run past the cut does not follow the course
given to it. Missed besides what one crash past the cut misses: a violation that needs
the first crash's leftovers and a second crash past the cut together (a recovery record
a later crash's resume reads wrongly). docs/explanation/guarantees.md says what a run
with a horizon does not prove; its report counts the runs it cut (`horizon`).
"""
from __future__ import annotations

import sys
import threading
from dataclasses import dataclass, field, replace
from typing import Any

from .. import agent as _agent
from ..interpose import finality
from . import leads
from ..interpose import determinism
from ..pipeline.incarnation import held, marks
from ..core.trace import Killed
from .fingerprints import horizon_key, read_memory, state_key


class Converged(Killed):
    """Raised at the request where a resumed run reached the clean run's state: the run
    is over there (sealed as a kill is: nothing it does while unwinding lands)."""


# The diagnostic (faultsim.inprocess.diagnose) sets itself here when asked for: this module
# does not import it, it reads this one's keys.
diagnostic: Any = None


@dataclass
class Point:
    """The clean run at one of its model requests."""

    requests: int  # model requests logged before it
    ledger: int  # ledger entries before it
    memory: str | None  # its fingerprint; None: refused (why)
    why: str | None
    draws: str  # where the seeded streams stood
    reads: int  # env.incarnation reads so far
    segment: int  # index of the tracking segment that starts here
    events: int = 0  # events in its trace before it (the next one is its answer's)


@dataclass
class Course:
    """The clean run's course, recorded at each model request: what a resumed run is
    compared with, and the remainder that completes a converged run's verdict."""

    by_key: dict = field(default_factory=dict)  # key -> [point index]
    by_request: dict = field(default_factory=dict)  # horizon_key -> [point index] (horizon)
    points: list[Point] = field(default_factory=list)
    segments: list = field(default_factory=list)  # (first_content, first_presence, listed)
    draws_end: str = ""
    reads_end: int = 0
    world: Any = None
    final: dict = field(default_factory=dict)
    outcome: Any = None
    trace: list = field(default_factory=list)  # its events
    off: str | None = None  # why no cut is tried at all
    diagnosis: Any = None  # faultsim.inprocess.diagnose.Clean, when asked for

    def usable(self, n: int) -> str | None:
        """Why clean point n cannot be a cut (None: it can)."""
        p = self.points[n]
        if p.why:
            return p.why
        if p.draws != self.draws_end:
            return "the clean run draws random numbers later (each incarnation has its seed)"
        if p.reads != self.reads_end:
            return "the clean run reads env.incarnation later"
        return None

    def after(self, n: int) -> tuple[dict, dict, set]:
        """What the clean run touched first after point n, of each path."""
        content, presence, listed = {}, {}, set()
        for c, p, ls in self.segments[self.points[n].segment:]:
            for k, v in c.items():
                content.setdefault(k, v)
            for k, v in p.items():
                presence.setdefault(k, v)
            listed |= ls
        return content, presence, listed


class Recorder:
    """Records the clean run's course (`Course`) as it runs (a golden run)."""

    def __init__(self, ex: Any, world: Any, memory: bool = True, horizon: bool = False
                 ) -> None:
        self.ex, self.world, self.course = ex, world, Course()
        self.memory = memory  # False: recorded for a horizon only (no memory compared)
        self.horizon = horizon  # also where a horizon cut may be made (--horizon)
        self.runner = threading.get_ident()
        self.keys: list[str] = []

    def __call__(self, request: Any) -> None:
        # faultsim's own work (fingerprinting the agent's memory and state, which grows
        # with a long run): held, so it never counts against the clean run's time limit
        with held():
            self._record(request, sys._getframe(1))

    def _record(self, request: Any, caller: Any) -> None:
        ip, course = self.ex.interposer, self.course
        course.segments.append(_segment(ip))
        memory, why = read_memory(caller) if self.memory else (None, "convergence is off")
        if threading.get_ident() != self.runner:
            memory, why = None, "the request came from a thread of the agent's"
        key = state_key(self.ex, self.world, request)
        self.keys.append(f"{key}:{memory}:{why}")
        n = len(course.points)
        course.points.append(Point(len(self.world.model.requests),
                                   len(self.world.ledger.entries), memory, why,
                                   determinism.draws(), _agent.incarnation_reads[0],
                                   len(course.segments), len(self.ex.tracer.events)))
        course.by_key.setdefault(key, []).append(n)
        if self.horizon:
            course.by_request.setdefault(horizon_key(self.world, request), []).append(n)
        if diagnostic is not None:
            course.diagnosis = course.diagnosis or diagnostic.Clean()
            course.diagnosis.record(self.ex, self.world, request, caller)

    def end(self) -> None:
        """Inside the incarnation, as run() returned."""
        self.course.segments.append(_segment(self.ex.interposer))
        self.course.draws_end = determinism.draws()
        self.course.reads_end = _agent.incarnation_reads[0]


def _segment(ip: Any) -> tuple[dict, dict, set]:
    seg = (dict(ip.first_content), dict(ip.first_presence), set(ip.listed))
    ip.first_content, ip.first_presence, ip.listed = {}, {}, set()
    return seg


@dataclass
class Cut:
    """Where a resumed run met the clean run: clean point `at`, and the run's own counts."""

    at: int
    requests: int
    ledger: int
    tracking: tuple
    escapes: list
    first_position: int | None
    events: int = 0  # events in the run's trace before the request
    horizon: bool = False  # cut past the horizon (taken as the clean run's), not met
    blind: bool = False  # up to the cut it drew no random number, read no env.incarnation


# Why a cut was refused where the memory read as one but differed (faultsim.reports.shortcuts)
CLEAN_MEMORY = "the agent's memory differs from the clean run's"
LEAD_MEMORY = "the agent's memory differs from the earlier resumed run's"


class Watch:
    """Watches a resumed run's requests; at the first that meets a usable clean point, or
    the first request of an earlier resumed run (`leads`, faultsim.inprocess.leads),
    records the cut, seals the run and stops it (`Converged`). With `leads` it also notes
    the run's own first request (`start`), so that the run can become a lead."""

    def __init__(self, ex: Any, world: Any, course: Course, result: Any,
                 leads: dict | None = None, exact: bool = True,
                 horizon: int | None = None) -> None:
        self.ex, self.world, self.course, self.result = ex, world, course, result
        self.leads = leads
        self.exact = exact  # cut where it meets the clean run's state (False: horizon only)
        self.horizon = horizon  # cut past this many requests (None: no horizon)
        self.seen = 0  # its model requests so far, this one included
        self.runner = threading.get_ident()
        self.cut: Cut | None = None
        self.lead: Any = None  # the lead it was cut against (then `cut.at` is -1)
        self.start: Any = None  # leads.Start, at its first request
        self.claimed: str | None = None  # its state there, claimed on the lead board
        self.before: tuple | None = None  # its first touches up to its first request
        # the first reason a cut was refused, apart: against the clean run, and against an
        # earlier resumed run (the report's `shortcuts` block, faultsim.reports.shortcuts)
        self.clean_why: str | None = None
        self.lead_why: str | None = None
        self.probe = (diagnostic.Probe(course.diagnosis)
                      if diagnostic is not None and course.diagnosis else None)

    def __call__(self, request: Any) -> None:
        if threading.get_ident() != self.runner or self.cut is not None:
            return
        if self.probe is None:
            return self.meet(request)
        frame = sys._getframe(1)
        try:
            self.meet(request)
        except Converged:
            self.probe(self.ex, self.world, request, frame, True, self._state(request, frame))
            raise
        self.probe(self.ex, self.world, request, frame, False, self._state(request, frame))

    def _state(self, request: Any, frame: Any) -> str:
        """The key and memory a cut compares (for the diagnostic's lines)."""
        return f"{state_key(self.ex, self.world, request)}:{read_memory(frame)[0]}"

    def tracking(self) -> tuple[dict, dict, set]:
        """Its first touches so far (split at its first request where it may lead)."""
        ip = self.ex.interposer
        if self.before is None:
            return dict(ip.first_content), dict(ip.first_presence), set(ip.listed)
        return leads.then(self.before, (ip.first_content, ip.first_presence, ip.listed))

    def meet(self, request: Any) -> None:
        self.seen += 1
        if not self.exact:
            return self._beyond(request)
        key = state_key(self.ex, self.world, request)
        memory: tuple | None = None  # (fingerprint, why), read once
        found = self.course.by_key.get(key)
        if found:
            usable = [n for n in found if self.course.usable(n) is None]
            if not usable:
                self.clean_why = self.clean_why or self.course.usable(found[0])
            else:
                memory = read_memory(sys._getframe(2))
                match = next((n for n in usable if self.course.points[n].memory ==
                              memory[0]), None)
                if memory[0] is None or match is None:
                    self.clean_why = self.clean_why or memory[1] or CLEAN_MEMORY
                else:
                    self._stop(match)
        self._beyond(request)
        if self.leads is None:
            return

        world = self.world
        lk = leads.lead_key(key, determinism.draws(), world.incarnation)
        first = self.start is None
        if first:  # its first request: where it can lead another run from
            memory = memory or read_memory(sys._getframe(2))
            if memory[0] is not None:
                ip = self.ex.interposer
                self.before = _segment(ip)  # its touches from here on are the lead's
                self.start = leads.Start(lk, memory[0], len(world.ledger.entries),
                                         len(world.model.requests), len(world.unrouted),
                                         len(world.processes), self.before, marks())
            else:
                self.start = False  # no lead: its memory cannot be compared
                self.lead_why = self.lead_why or memory[1]
        lead = self.leads.get(lk)
        board = self.ex.board  # in a forked child only
        if lead is None and first and self.start and board is not None:
            # a sibling process may be running that state's lead now (board.py): claim it,
            # or wait for that run's remainder
            name = board.name(lk, self.start.memory)
            if board.claim(name):
                self.claimed = name
            else:
                with held():
                    found = board.wait(name)
                if found is not None and found.key == lk:
                    leads.learn(self.leads, self.ex.lead_contents, found)
                    lead = found
        if lead is not None:
            memory = memory or read_memory(sys._getframe(2))
            if leads.same_memory(memory[0], lead):
                self.lead = lead
                # what it would have been refused against the clean run after the cut is
                # what the lead was (the same state from there): its count does not depend
                # on which runs happened to lead
                self.clean_why = self.clean_why or lead.why
                self._stop(-1)
            self.lead_why = self.lead_why or memory[1] or LEAD_MEMORY

    def _beyond(self, request: Any) -> None:
        """The horizon (--horizon): past its first `horizon` requests, the run is cut at its
        first request whose `horizon_key` (the request, the effects applied, the services)
        equals exactly one clean request's, and its rest taken as the clean run's after
        that request (what that assumes: "The horizon", in this module's docstring)."""
        if self.horizon is None or self.seen <= self.horizon:
            return
        found = self.course.by_request.get(horizon_key(self.world, request))
        if found is not None and len(found) == 1:
            self._stop(found[0], horizon=True)

    def _stop(self, at: int, horizon: bool = False) -> None:
        ip, world = self.ex.interposer, self.world
        self.cut = Cut(at, len(world.model.requests), len(world.ledger.entries),
                       self.tracking(), list(ip.escapes), self.result.first_position,
                       len(self.ex.tracer.events), horizon, marks() == self.result.began)
        ip.kill()
        world.sealed = True
        raise finality.killed(Converged("the resumed run reached the clean run's state"))


def complete(course: Course, cut: Cut, world: Any, tag: str | None) -> int | None:
    """The converged run's world as it would be at its end: its own calls and requests up
    to the cut, then the clean run's after clean point `cut.at`, renumbered and under this
    incarnation. Returns its first model position asked (as `traced_world` notes it)."""
    point = course.points[cut.at]
    ledger, requests = world.ledger.entries, world.model.requests
    del ledger[cut.ledger:], requests[cut.requests:]
    for e in course.world.ledger.entries[point.ledger:]:
        ledger.append(replace(e, seq=len(ledger) + 1, incarnation=world.incarnation))
    first = cut.first_position
    for q in course.world.model.requests[point.requests:]:
        requests.append(replace(q, index=len(requests) + 1, incarnation=world.incarnation))
        if first is None and q.position is not None and q.script == tag:
            first = q.position
    return first


def course_events(course: Course, cut: Cut, events: list) -> list:
    """The trace the converged run would have had: its own events up to the cut, then the
    clean run's after clean point `cut.at`, renumbered (what the pair stage kills)."""
    shift = cut.events - course.points[cut.at].events
    return list(events[:cut.events]) + [replace(e, index=e.index + shift)
                                         for e in course.trace[course.points[cut.at].events:]]


def tracked(course: Course, cut: Cut) -> tuple[dict, dict, frozenset]:
    """What the run would have recorded of the files it started from: its own first
    touches, then the clean run's after the cut."""
    content, presence, listed = (dict(cut.tracking[0]), dict(cut.tracking[1]),
                                 set(cut.tracking[2]))
    later = course.after(cut.at)
    for k, v in later[0].items():
        content.setdefault(k, v)
    for k, v in later[1].items():
        presence.setdefault(k, v)
    return content, presence, frozenset(listed | later[2])
