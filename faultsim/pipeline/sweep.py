"""Sweep bookkeeping shared by every executor of both modes: the crash models asked for,
what one resumed run showed, the verdicts per crash model, and the memos that let equal
(or equivalent) crash states share one resumed run."""
from __future__ import annotations

import posixpath
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from ..core.crashmodel import CrashState, files_digest
from ..killpoints import KillPoint, torn_bounded_line, write_runs
from ..judge.oracle import (OUTPUTS, RESUME_GUARDS, STATE_GUARDS, CrashRun, Golden, Violation,
                      judge, no_work_after_kill)
from ..reports.report import ModelRun, ResumeSummary, Verdict
from ..core.trace import Event


@dataclass
class ResumeResult:
    """What one resumed run showed: the resume guards' violations, and what the state
    guards need to know of it."""

    violations: list[Violation]
    summary: ResumeSummary | None
    first_position: int | None
    seconds: float = 0.0  # how long the bare resumed run took
    first_content: dict = field(default_factory=dict)  # path -> observed | destroyed
    first_presence: dict = field(default_factory=dict)
    listed: frozenset = frozenset()
    events: list | None = None  # its trace, kept where a further crash will be tried in it
    escalated: bool = False  # it stopped with an explicit escalation to a person (P11)
    # it reached the clean run's state at a model request and was completed from the clean
    # run's remainder (faultsim.inprocess.convergence)
    converged: bool = False
    # it was cut past the horizon instead (--horizon; faultsim.inprocess.convergence)
    at_horizon: bool = False
    # kept with the trace, for the pair stage (faultsim.inprocess.after_convergence): the
    # events of its course and of the clean run's before the request where it met the
    # clean run (None: it did not), whether that cut was the horizon's (pairs.within_horizon),
    # and what it added to the world (its Tail)
    meets: tuple[int, int, bool] | None = None
    tail: Any = None
    # it reached an earlier resumed run's state at that run's first model request and was
    # completed from its remainder (faultsim.inprocess.leads); the remainder it leaves for
    # later runs (the forking executor's parent learns it, then drops it here)
    met: bool = False
    lead: Any = None
    # why it was not cut: against the clean run, against an earlier resumed run (each None
    # where it was cut so, or nothing was tried); the `shortcuts` block counts them
    refused: tuple = (None, None)

    @classmethod
    def of_run(cls, golden: Golden, crash_run: CrashRun, first_position: int | None,
               seconds: float) -> "ResumeResult":
        """A resumed run of real processes judged by the resume guards (the command
        backend's, the Claude Agent SDK adapter's). Its summary is kept whatever the resume
        guards say: a state guard may fail a state whose resumed run broke no rule, and its
        counterexample still says what that run did."""
        outcome = crash_run.outcome
        return cls(judge(golden, crash_run, RESUME_GUARDS), ResumeSummary.of(crash_run),
                   first_position, seconds,
                   escalated=outcome is not None and outcome.status == "escalated")

    def blind_to_content(self, path: str) -> bool:
        """The run's course could not depend on this file's old content, nor its outputs."""
        first = self.first_content.get(path)
        return first == "destroyed" or (first is None and not path.startswith(OUTPUTS))

    def blind_to_presence(self, path: str) -> bool:
        """... nor on whether the file existed at all."""
        if posixpath.dirname(path) in self.listed or (path.count("/") == 0 and "." in
                                                      self.listed):
            return False
        first = self.first_presence.get(path)
        return self.blind_to_content(path) and (
            first == "destroyed" or (first is None and not path.startswith(OUTPUTS)))


def masked_digest(state: CrashState, path: str | None) -> str | None:
    """The state's digest with one file's content blanked out (its name kept)."""
    # Straight from the sorted files (no dict, no re-sort): asked at every kill point.
    if path is None or not isinstance(_content(state, path), bytes):
        return None
    return files_digest(tuple((p, b"\0faultsim:masked" if p == path else d)
                              for p, d in state.files))


def absent_digest(state: CrashState, path: str | None) -> str | None:
    """The digest of the state without one file (its directory kept)."""
    if path is None or not isinstance(_content(state, path), bytes):
        return None
    return files_digest(tuple((p, d) for p, d in state.files if p != path))


def _content(state: CrashState, path: str) -> bytes | None:
    for p, d in state.files:
        if p == path:
            return d
    return None


def schedule_violations(golden: Golden, schedule: list[KillPoint], state: CrashState,
                        result: ResumeResult, after_kill: list[str],
                        guarded: dict | None = None) -> list[Violation]:
    """All of a crash state's violations: the state guards (checked for every state), what
    the resumed run showed, and writes after the last kill. `guarded` memoises the state
    guards' verdicts, which depend only on the state and where its resumed run began: a
    pair sweep meets the same second crash state after many first crashes."""
    probe = CrashRun(schedule, state, None, after_kill=after_kill,
                     resume_positions=[result.first_position]
                     if result.first_position is not None else [])
    key = (state.digest(), result.first_position)
    guards = guarded.get(key) if guarded is not None else None
    if guards is None:
        guards = judge(golden, probe, STATE_GUARDS)
        if guarded is not None:
            guarded[key] = guards
    return (list(guards) + result.violations +
            judge(golden, probe, (no_work_after_kill,)))


@dataclass
class Shared:
    """The resumed runs of a sweep on real processes (the command backend's, the Claude
    Agent SDK adapter's), by the key of the crash state each was run from. A state whose
    key equals one resumed already shares that run (`Sweep`'s memo of equal states, no
    masked classes: `equivalences=False`); every state is judged on its own bytes all the
    same (`schedule_violations`: the state guards and what the run showed). The key is the
    backend's, (the state as it compares states, the signature of what else decides the
    resumed run); its argument that equal keys give the same run is written beside it.
    `share=False` resumes every state (for comparing with the memo's verdicts)."""

    golden: Golden
    share: bool = True
    sweep: Sweep = field(init=False)
    origins: dict[int, str] = field(default_factory=dict)  # id(result) -> its state, named

    def __post_init__(self) -> None:
        self.sweep = Sweep(self.golden, {}, equivalences=False)

    def judge(self, schedule: list[KillPoint], state: CrashState,
              key: tuple[CrashState, str] | None, resume: Callable[[], ResumeResult],
              origin: str) -> tuple[list[Violation], ResumeResult, str | None, tuple | None]:
        """(the state's violations, the resumed run they were judged on, the state that run
        was resumed for when shared (None: resumed now, for this one), the exact key it is
        known by (None: not shared)). `key` None: the state is resumed, never shared."""
        exact: tuple | None = None
        result: ResumeResult | None = None
        if key is not None and self.share:
            known = self.sweep.known(key[0], key[1], None)
            exact, result = known.key, known.result
        shared = None if result is None else self.origins[id(result)]
        if result is None:
            result = resume()
            if exact is not None and key is not None:
                self.sweep.learn(exact, key[0], key[1], None, result)
                self.origins[id(result)] = origin
        return (schedule_violations(self.golden, schedule, state, result, []), result,
                shared, exact)


@dataclass(frozen=True)
class Earlier:
    """A crash of a schedule before its last one: where, and which crash state it left."""

    point: KillPoint
    order: int  # among the crash states the model allows there
    persisted: str
    next_trace: tuple  # the clean course of the incarnation resumed after it


@dataclass(frozen=True)
class Known:
    """What a sweep knows of one crash state (`Sweep.known`)."""

    key: tuple  # (state digest, world signature): equal states share it
    result: ResumeResult | None  # its resumed run, if judged or equivalent to one judged
    masked: str | None  # digest with the watched file's content blanked (None: not needed)
    absent: str | None  # digest without the watched file (None: not needed)
    # not decided: a lookup `known` makes could be answered by a state still being judged
    # (the forking executor's `pending`); what a serial sweep would find is not known yet
    busy: bool = False


@dataclass
class Sweep:
    """Bookkeeping shared by both executors: verdicts per model, and what is known of
    crash states already judged.

    Memos make a sweep cheap without making it less exact. Equal crash states (same
    files, same world) give the same resumed run. States that differ only in the content
    of one file F give the same resumed run when that run destroyed F (truncated, replaced
    or removed it) before reading it: a torn temp file is the common case. And a state
    that has one more file F than a judged one gives the same run when that run never
    looked for F (no exists, stat, read, listing of its folder) before creating it over.

    A sweep with `earlier` crashes explores the last crash of longer schedules: the kill
    points of one resumed incarnation. Its verdicts are counted, and kept when they fail.
    """

    golden: Golden
    runs: dict[str, ModelRun]
    memo: dict[tuple, ResumeResult] = field(default_factory=dict)
    insensitive: dict[tuple, ResumeResult] = field(default_factory=dict)
    guarded: dict[tuple, list] = field(default_factory=dict)  # state guards' verdicts
    recorded: set[tuple] = field(default_factory=set)
    done_points: int = 0
    equivalences: bool = True  # False: only equal states share a verdict (for checking)
    earlier: tuple[Earlier, ...] = ()
    keep_traces: bool = False  # results keep their trace: a further crash will be tried
    # the pair stage after its first crash's resumed run met the clean run: composes a
    # second crash's verdict from the clean run's first crash there, or None (resume it);
    # called (model, point, order, state, world, schedule), faultsim.inprocess.after_convergence
    shortcut: Callable | None = None
    # the pair stage: second crashes resumed after earlier first crashes, by crash state and
    # observable world (search_after_convergence.Known: key, compose, learn), that a second
    # crash here is composed from; frozen while this sweep runs, so that what is composed
    # does not depend on how children interleave (faultsim.inprocess.after_convergence)
    observed: Any = None
    observed_keys: dict = field(default_factory=dict)  # memo key -> its observable key
    fresh_observed: list = field(default_factory=list)  # (observable key, result) learned here
    reused: set = field(default_factory=set)  # (model, point id, order) composed from `observed`
    instances: list["Judged"] = field(default_factory=list)  # first crash states judged
    resumed_from: dict = field(default_factory=dict)  # id(result) -> the key it was run for
    # --shard: whether this shard owns a first crash state, by its memo key (None: all).
    # The others are neither resumed nor reported here (faultsim.inprocess.sharding).
    owns: Callable[[tuple], bool] | None = None
    # --shard with pairs: every first crash state is resumed and decided here as in the
    # whole run (the pair stage needs every course and every single crash's run), but only
    # those this predicate owns (by memo key) are counted and reported: None, all
    # (faultsim.inprocess.sharding, `state_owner`)
    reports: Callable[[tuple], bool] | None = None
    # first crashes' kill point id -> why its kill's aftermath is not read from the code
    # (None: it is; faultsim.inprocess.unwind), as each executor found it at the kill
    unwinds: dict[str, str | None] = field(default_factory=dict)

    def mine(self, state: CrashState, signature: str, model: str | None = None,
             point: KillPoint | None = None, order: int = 0) -> bool:
        """Whether this shard resumes `state` (all do without --shard). Given where it was
        met: a first crash's state 0 at a boundary that is not, is kept for the
        counterexamples (`ModelRun.clean_states`)."""
        if self.owns is None or self.owns((state.digest(), signature)):
            return True
        if point is not None and model is not None:
            self._keep_clean(model, point, order, state)
        return False

    def _keep_clean(self, model: str, point: KillPoint, order: int, state: CrashState
                    ) -> None:
        if not self.earlier and order == 0 and not point.torn:
            self.runs[model].clean_states.setdefault(point.index, state)

    @property
    def trace(self) -> list:
        """The clean course of the incarnation this sweep kills."""
        return list(self.earlier[-1].next_trace) if self.earlier else self.golden.trace

    def schedule(self, point: KillPoint) -> list[KillPoint]:
        return [e.point for e in self.earlier] + [point]

    def known(self, state: CrashState, signature: str, watch: str | None,
              pending: Callable[[tuple], bool] | None = None) -> Known:
        """What is known of `state`: its exact key, its result if judged (or equivalent to
        one judged), and the digests its class is looked up by.

        `pending` (the forking executor's): whether a lookup, an exact key `(digest,
        signature)` or a class `(masked, watch, signature)`, may yet be answered by an
        earlier state whose judging is not done. The lookups are made in their order, and
        the first one `pending` holds makes the answer `busy` (nothing is changed): a
        serial sweep, which has every earlier answer, might have stopped there."""
        key = (state.digest(), signature)
        if key in self.memo:
            return Known(key, self.memo[key], None, None)
        if pending is not None and pending(key):
            return Known(key, None, None, None, busy=True)
        if not self.equivalences:
            return Known(key, None, None, None)
        masked = masked_digest(state, watch)
        if masked is not None and (masked, watch, signature) in self.insensitive:
            result = self.insensitive[(masked, watch, signature)]
            self.memo[key] = result
            return Known(key, result, masked, None)
        if masked is not None and pending is not None and pending((masked, watch, signature)):
            return Known(key, None, masked, None, busy=True)
        absent = absent_digest(state, watch)
        if absent is not None and pending is not None and pending((absent, signature)):
            return Known(key, None, masked, absent, busy=True)
        without = self.memo.get((absent, signature)) if absent is not None else None
        if without is not None and without.blind_to_presence(watch):
            self.memo[key] = without
            return Known(key, without, masked, absent)
        return Known(key, None, masked, absent)

    def learn(self, key: tuple, state: CrashState, signature: str, watch: str | None,
              result: ResumeResult) -> None:
        # A resumed run that hung (stopped at the time limit) is learned like any other, and
        # shared as exactly: the agent is deterministic (the golden guard checks it), so its
        # course up to any moment depends only on what it observed by then, and what a hung
        # run records (first_content, first_presence, listed) is what it observed before it
        # was stopped. An equal state, or one differing only in a file that run had not
        # looked at, takes the same course into the same stuck loop, doing the same work:
        # the same hang, at the same place (tests/test_hangs.py compares it with resuming
        # every state).
        self.memo[key] = result
        self.resumed_from.setdefault(id(result), key)
        if self.observed is not None and result.tail is not None:
            observed = self.observed_keys.get(key)
            if observed is not None and result.tail.reusable:
                self.fresh_observed.append((observed, result))
            else:  # no later second crash can be composed from it: its tail is not kept
                result.tail = None  # (every resumed pair's would be, with the memo's copy)
        masked = masked_digest(state, watch)
        if masked is not None and result.blind_to_content(watch):
            self.insensitive[(masked, watch, signature)] = result

    def compose(self, model: str, point: KillPoint, order: int, state: CrashState,
                world, key: tuple, signature: str, watch: str | None
                ) -> tuple[ResumeResult, list[str] | None] | None:
        """A second crash's result composed without resuming it (`shortcut`, then
        `observed`), learned like a resumed one; None where it must be resumed. The second
        item is what the kill set off where that is known (the shortcut's), else None."""
        found = None
        if self.shortcut is not None:
            found = self.shortcut(model, point, order, state, world, self.schedule(point))
        if found is None and self.observed is not None:
            observed = self.observed.key(state, world)
            composed = self.observed.compose(observed, self.schedule(point), state, world)
            if composed is None:
                self.observed_keys[key] = observed  # learnt once resumed (`learn`)
                return None
            found = (composed, None)
            self.reused.add((model, point.id, order))
        if found is not None:
            self.learn(key, state, signature, watch, found[0])
        return found

    def record(self, model: str, point: KillPoint, order: int, state: CrashState,
               result: ResumeResult, after_kill: list[str], fresh: bool,
               key: tuple | None = None, composed: bool = False) -> None:
        if (model, point.id, order) in self.recorded:
            return  # a second driver pass meets states the first one settled
        self.recorded.add((model, point.id, order))
        result.lead = None  # learnt by now (faultsim.inprocess.leads): not kept per verdict
        violations = schedule_violations(self.golden, self.schedule(point), state, result,
                                         after_kill, self.guarded)
        run = self.runs[model]
        verdict = Verdict(point, model, state.persisted, violations, state, result.summary,
                          self.golden, order, earlier=self.earlier,
                          resumed_at=result.first_position, escalated=result.escalated)
        if fresh and (self.earlier or self.reports is None or key is None
                      or self.reports(key)):
            run.refusal(result.refused)
        if self.earlier:
            depth = run.depth(len(self.earlier) + 1)
            depth.explored += 1
            depth.resumed += fresh
            depth.converged += fresh and result.converged
            depth.at_horizon += fresh and result.at_horizon
            depth.met += fresh and result.met
            reused = (model, point.id, order) in self.reused
            depth.after_convergence += composed and not reused
            depth.composed += reused
            depth.resume_seconds += result.seconds if fresh else 0.0
            if violations:
                run.deep_failures.append(verdict)
            return
        self.instances.append(Judged(model, point, order, state, result, not violations, key,
                                     tuple(after_kill)))
        if self.reports is not None and key is not None and not self.reports(key):
            # another shard's state: decided and kept for the pairs, reported there
            self._keep_clean(model, point, order, state)
            return
        run.verdicts.append(verdict)
        run.escalated += result.escalated
        if point.id in self.unwinds:  # killed in process (not before its first event)
            run.unwound(self.unwinds[point.id])
        if fresh:
            run.judged += 1
            run.converged += result.converged
            run.at_horizon += result.at_horizon
            run.met += result.met
            run.resume_seconds += result.seconds
        else:
            run.reused += 1


@dataclass(frozen=True)
class Judged:
    """One first crash state a sweep judged: where, which, what the resumed run did, and
    the memo key it was judged under (None: shared from an equivalent state)."""

    model: str
    point: KillPoint
    order: int  # which of the point's crash states
    state: CrashState
    result: ResumeResult
    ok: bool
    key: tuple | None
    after_kill: tuple = ()  # what the killed incarnation did after the kill


@dataclass(frozen=True)
class FirstCrash:
    """A first crash the pair stage explores further: a class's earliest member, and how
    many first crashes the class stands for."""

    point: KillPoint
    order: int
    state: CrashState
    result: ResumeResult | None  # the resumed run, when it was run for this very state
    count: int


@dataclass(frozen=True)
class Plan:
    """What a run is about to explore (told before its sweep starts)."""

    scenario: str
    kill_points: int  # in the clean run
    explored: int  # of those, the ones this run crashes at (all, or a shard, or --kill-point)
    crash_states: dict[str, int]  # first crash states, per crash model
    crashes: int  # the most crashes in one schedule
    # the forecast of its largest costs (None: not known to this backend): what one
    # incarnation may take, and the write with the most torn kill points
    clean_seconds: float | None = None  # the slower clean incarnation took
    timeout: float | None = None  # a crash run's limit (None: none)
    largest_write: tuple[int, int, str] | None = None  # `largest_write` of the explored
    # the clean run's writes whose torn cuts are bounded (killpoints.torn_bounded):
    # {"file", "bytes", "cuts", "of"} each
    torn_bounded: tuple[dict, ...] = ()
    # the sweep's cost forecast per coverage (pipeline/forecast.py), exhaustive first; ()
    # where this backend makes none
    forecasts: tuple = ()


def largest_write(points: Sequence[KillPoint], trace: Sequence[Event] = ()
                  ) -> tuple[int, int, str] | None:
    """The write with the most torn kill points among `points`: (its torn kill points, its
    length in bytes, the write in words); None without any. Given the clean run's `trace`,
    a series of consecutive writes extending one file (killpoints.write_runs: cut as one
    write) is one write here, named by its first, and its length is what it wrote.
    Without it, its length is its last cut plus one: every torn write is cut one byte
    short of its end (killpoints.torn_offsets), so this is exact for a write explored
    whole and a lower bound for one narrowed."""
    first: dict[int, int] = {}  # a write's event index -> its series' first write's
    length: dict[int, int] = {}  # the first write's index -> the series' bytes
    for run in write_runs(trace):
        length[run[0] + 1] = sum(trace[i].size for i in run)
        first.update((i + 1, run[0] + 1) for i in run)
    torn: dict[int, list[KillPoint]] = {}
    for p in points:
        if p.torn:
            torn.setdefault(first.get(p.index, p.index), []).append(p)
    if not torn:
        return None
    index, cuts = max(torn.items(), key=lambda kv: len(kv[1]))  # the first of the largest
    if index in length:
        return len(cuts), length[index], trace[index - 1].describe()
    return len(cuts), max(p.offset for p in cuts) + 1, cuts[0].where  # type: ignore


def bounded_cuts(golden: Golden, runs: list[ModelRun]) -> list[dict]:
    """The clean run's writes whose torn cuts are bounded (killpoints.torn_offsets), put
    on every run's report and said once on the console: no cut is skipped unsaid."""
    bounded = golden.torn_bounded()
    for run in runs:
        run.torn_bounded = bounded
    line = torn_bounded_line(bounded)
    if line is not None and runs:
        runs[0].notes.append(line)
    return bounded


def by_event(points: Sequence[KillPoint]) -> tuple[dict[int, KillPoint],
                                                   dict[int, list[KillPoint]]]:
    """Kill points after an event, by its index; kill points inside a write, by the index
    of that write (a driver acts on both as the run goes)."""
    boundary = {p.index: p for p in points if not p.torn and p.index > 0}
    torn: dict[int, list[KillPoint]] = {}
    for p in points:
        if p.torn:
            torn.setdefault(p.index, []).append(p)
    return boundary, torn


def first_crashes(sweep: Sweep, model: str, position: dict[str, int]) -> list[FirstCrash]:
    """The first crashes to explore further: one per class of equal (or equivalent) crash
    states that passed, with how many first crashes the class stands for.

    A class is the states that share one resumed run, by the state that run was resumed
    for: two children that happened to resume equal states at once (more likely with
    more workers) still make one class. It is represented by its earliest member (kill
    point, then crash state), never by the one that happened to be resumed: which one
    that is depends on how the workers' children interleaved, and the report must not.
    The resumed run's trace is reused as the course when the representative is the very
    state it was run for; otherwise its course is run afresh."""
    classes: dict[object, list] = {}
    for j in sweep.instances:
        if j.model == model and j.ok:
            resumed = sweep.resumed_from.get(id(j.result))
            exact = j.key is not None and j.key == resumed
            group = resumed if resumed is not None else id(j.result)
            classes.setdefault(group, []).append(
                (position[j.point.id], j.order, not exact, j))
    reps = []
    for members in classes.values():
        members.sort(key=lambda m: m[:3])
        _, _, inexact, j = members[0]
        reps.append(FirstCrash(j.point, j.order, j.state, j.result if not inexact else None,
                               len(members)))
    reps.sort(key=lambda r: (position[r.point.id], r.order))
    return reps
