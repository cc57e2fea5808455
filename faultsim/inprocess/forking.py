"""The forking executor: one driver run of the agent, and at each chosen kill point a
forked child that dies there, resumes each new crash state and sends its verdicts back."""
from __future__ import annotations

import copy
import posix as _os  # the real OS: pyfakefs patches every module's `os`, not `posix`
import sys
import threading
from typing import Callable

import freezegun.api as _real_time  # time.perf_counter is frozen in here; these are not

from ..interpose import finality
from ..errors import ForkFailed
from ..host.hugepages import before_fork
from ..core.crashmodel import each_torn_version, forget, kept_torn
from ..killpoints import KillPoint
from ..judge.oracle import Violation
from ..pipeline.golden import compare_traces
from ..pipeline.incarnation import CLEAN_LIMIT, starved, time_limit, world_signature
from ..pipeline.sweep import ResumeResult, Sweep, absent_digest, by_event, masked_digest
from ..reports.interrupted import is_interrupt, unwinding_interrupt
from ..core.trace import Event, Killed, Tracer
from ..world import World
from ..world.clock import faithful_copies
from .board import Board
from .forks import fork
from .isolated import death, dies_with_parent
from .leads import learn
from .replaying import sweep_replaying
from .sandbox import Explorer, crash_states, resume_and_judge
from . import unwind


class ForkAt:
    """Tracer policy for the forking executor: at each chosen kill point the driver forks;
    the child dies there (and resumes), the parent goes on to the next point."""

    def __init__(self, pool: "_Pool", boundary: dict[int, KillPoint],
                 torn: dict[int, list[KillPoint]], seal: Callable[[], None],
                 until: int | None = None) -> None:
        self.pool, self.boundary, self.torn, self._seal = pool, boundary, torn, seal
        # the driver ends after this event (its last chosen point's; None: runs to its end)
        self.until, self.stopped = until, False
        # A fork copies only the calling thread: one forked from another thread of the
        # agent would have no driver to resume and judge. Those points are replayed.
        self.runner, self.elsewhere = threading.get_ident(), []

    def _here(self, points: list[KillPoint]) -> bool:
        if threading.get_ident() == self.runner:
            return True
        self.elsewhere += points
        return False

    def after(self, tracer: Tracer, event: Event) -> None:
        if self.pool.cut_short():  # the driver is unwinding Ctrl-C or SIGTERM (_Pool)
            return
        point = self.boundary.get(event.index)
        if point is not None and self._here([point]) and self.pool.fork_for(
                [point], None, sys._getframe(1)):  # the kill is raised here, in emit's call
            self._seal()
            raise finality.killed(Killed(point.id))
        if self.until is not None and event.index >= self.until and not self.stopped \
                and not self.pool.in_child and threading.get_ident() == self.runner:
            # every chosen point is behind the driver (its children are forked, its
            # torn write's too): the rest of the run forks nothing (sweep_forking, `stop`)
            self.stopped = True
            self._seal()
            raise finality.killed(Killed("faultsim: past the last chosen kill point"))

    def before_write(self, tracer: Tracer, write) -> bytes | None:
        if self.pool.cut_short():
            return None
        points = self.torn.get(tracer.next_index)
        # the kill is raised by the write's hook (inprocess/fs.py), two calls up
        if points and self._here(points) and self.pool.fork_for(points, write,
                                                                sys._getframe(2)):
            self._seal()
            return write.torn(self.pool.dies_at.offset)
        return None


def sweep_forking(ex: Explorer, sweep: Sweep, chosen: list[KillPoint], models: list[str],
                  workers: int, progress, start: Callable[[], World] | None = None,
                  stop: bool = False, last: int | None = None) -> None:
    """`stop`: end each driver run after the event of its last chosen kill point, not at
    the run's end (the pair stage under representative coverage: `pairs.sweep_after_first`
    says why no verdict depends on the rest). Its check that the run does what the course
    it was given says then covers that prefix. `last`: end it after this event at the
    latest (a course known only up to there: pairs.within_horizon)."""
    boundary, torn = by_event(chosen)
    if any(p.index == 0 for p in chosen):  # before the first event: nothing to fork from
        sweep_replaying(ex, sweep, [p for p in chosen if p.index == 0], models, None, start)
    # A forked child that dies without a verdict is its point's finding (`_finish`), not
    # retried in the second pass below: an agent that ends its process on every resume
    # (tests/broken_agents.py:dies_on_resume) was seen to end faultsim itself there.
    revisit = _drive(ex, sweep, models, workers, progress, len(chosen), boundary, torn, False,
                     start, _upto(_last(chosen) if stop else None, last))
    if revisit:  # second pass: only the states whose class turned out to read the file
        sweep.done_points -= len(revisit)
        boundary_again, torn_again = by_event(revisit)
        _drive(ex, sweep, models, workers, progress, len(chosen), boundary_again, torn_again,
               True, start, _upto(_last(revisit) if stop else None, last))


def _upto(until: int | None, last: int | None) -> int | None:
    """The earlier of two events a driver may end after (None: no limit)."""
    return last if until is None else until if last is None else min(until, last)


def _last(points: list[KillPoint]) -> int | None:
    """The event after which a driver that forks at `points` has nothing left to fork."""
    return max((p.index for p in points if p.index > 0), default=None)


def _drive(ex: Explorer, sweep: Sweep, models, workers, progress, total, boundary, torn,
           no_parking: bool, start: Callable[[], World] | None = None,
           until: int | None = None) -> list[KillPoint]:
    """One driver run: the agent runs clean while children fork off at the kill points."""
    import gc

    if start is None:
        ex.reset_sandbox()
        world = ex.new_world()
    else:
        world = start()
    pool = _Pool(ex, sweep, models, world, workers, ex.timeout, total, progress)
    pool.board = Board.create()
    pool.no_parking = no_parking
    pool.every_kill = start is None  # first crashes; pairs: see _Pool.fork_for
    # Children share the parent's memory copy-on-write; a garbage collection in a child
    # would touch (and so copy) every page. Freeze what exists now out of the collector
    # (no collection first: with the memos of a pair sweep it costs more than it saves).
    gc.freeze()
    policy = ForkAt(pool, boundary, torn, seal=lambda: (ex.interposer.kill(),
                                                        setattr(world, "sealed", True)),
                    until=until)
    try:
        inc = ex.incarnation(world, policy, timed=False)  # the driver: children have limits
        if pool.in_child:  # only a child gets here: it died at its kill point
            pool.child_main([inc.went_on] if inc.went_on else [], inc.unwound)
        if pool.fork_failed:  # the run went on without its kill: no evidence of anything
            raise ForkFailed(f"{ex.scenario.path}: could not fork the process that dies at "
                             f"{pool.fork_failed} (the machine's limit on processes or "
                             "memory): lower --workers or free memory")
        if policy.stopped:  # ended after event `until`: the course's prefix is checked
            compare_traces(sweep.trace[:until], inc.events[:until])
        else:
            compare_traces(sweep.trace, inc.events)
        again = pool.wait_all()
        if policy.elsewhere:
            sweep_replaying(ex, sweep, policy.elsewhere, models, None, start)
        return again
    finally:
        pool.kill_all()
        if pool.board is not None and not pool.in_child:
            pool.board.remove()
        gc.unfreeze()


class _Pool:
    """Forked children, at most `workers` at a time. Each dies at one kill point (a torn
    write's points go to one child together), resumes each new crash state there and sends
    the results back through a pipe. Deterministic: verdicts are sorted at the end, however
    the children interleave."""

    def __init__(self, ex, sweep, models, world, workers, timeout, total, progress) -> None:
        self.ex, self.sweep, self.models, self.world = ex, sweep, models, world
        self.workers, self.total, self.progress = max(1, workers), total, progress
        self.deadline = None if not timeout else 3 * timeout + 5
        # how long a child's killed incarnation may take to end (with no limit asked, the
        # clean runs' own): a child whose kill never unwinds ends all the same
        self.unwind_limit = timeout or CLEAN_LIMIT
        self.unwinding = None  # in a child: the limit on that (`time_limit`)
        self.children: dict[int, dict] = {}
        self.waiting: dict[tuple, int] = {}  # masked class or exact key -> child pid
        # the lookups (`Sweep.known`) a parked state may still answer: its exact key, its
        # masked class, and its digest without the watched file (see `fork_for`)
        self.blocked: set[tuple] = set()
        self.in_child = False
        self.job: list = []
        self.parked: list = []  # (entry, signature) waiting for another child's answer
        self.no_parking = False  # second pass: wait for the answer instead of parking
        self.fork_failed: str | None = None  # the point where fork() failed (fork_for)
        self.aftermath: dict[str, list[str]] = {}  # point id -> what its kill set off
        self.dies_at: KillPoint | None = None  # in a child: where it dies
        self.every_kill = True  # a child at every point, even where every state is known
        self.composed: set[tuple] = set()  # (model, point id, order) composed, not resumed
        self.board: Board | None = None  # leads shared while children run (board.py)
        # Children waiting on the board for a sibling's remainder hold no worker's place
        # (the parent forks another meanwhile), up to this many children in all.
        self.most = 4 * self.workers
        # Ctrl-C or SIGTERM is unwinding the driver (`cut_short`): it forks, collects and
        # records nothing more
        self.interrupted = False

    # -- parent ---------------------------------------------------------------------------
    def cut_short(self) -> bool:
        """Whether Ctrl-C or SIGTERM is unwinding the driver: then it forks no child,
        collects none and records no verdict (ForkAt acts on no event).

        Why: a partial report holds exactly the verdicts recorded before the interrupt was
        raised in the driver, each one as the whole run records it. An interrupt unwinds
        the agent's own frames (the driver is the agent's run, forking inside its code),
        and their `finally` blocks and `with` exits run traced code: a file closed in
        `with open(...)` flushes again the write the interrupt cut (seen: SIGTERM landing
        while `fork_for` collected a child, inside the flush of the reference agent's
        atomic write; the close re-entered `fork_for` at the same torn points, forked a
        child and collected a sibling that had finished meanwhile, so the report counted
        one verdict more or not, as the timing went; tests/test_interrupted_forking.py).
        Such code is not the clean run's course, so a state forked from it could belong
        to no kill point of the clean run; and a verdict collected there was recorded
        after the stop, at a moment the timing decides. So the interrupt is the stop:
        known once it passes through `fork_for` (`interrupted`) or is being handled by
        the code that emits the event (`unwinding_interrupt`: a `finally`, an exit)."""
        if not self.interrupted and unwinding_interrupt():
            self.interrupted = True
        return self.interrupted

    def fork_for(self, points: list[KillPoint], write, frame=None) -> bool:
        """Decide in the parent; fork if some crash state here is new. True in the child.
        `frame`: where the kill would be raised (for `unwind.quiet`)."""
        if self.cut_short():
            return False
        try:
            return self._fork_for(points, write, frame)
        except BaseException as exc:
            if is_interrupt(exc):  # raised while collecting or recording (`cut_short`)
                self.interrupted = True
            raise

    def _fork_for(self, points: list[KillPoint], write, frame=None) -> bool:
        signature = world_signature(self.world)
        if self.every_kill:  # a first crash: whether its kill is read (unwind.py), counted
            # per state by the sweep as the replaying executor counts it (KillAt)
            loud = unwind.refusal_here(frame) if frame is not None else unwind.NO_FRAME
            for point in points:
                self.sweep.unwinds[point.id] = loud
        # The file whose content (or presence) a class of states may differ in: the one
        # last created or written, as the replaying executor finds it after its kill. Not
        # the file a torn write is writing: until that write lands, the interposer's last
        # touched is the file before it (fs.py), and where the two differ, sharing over the
        # other file would make the counts the worker count's (issue 54).
        watch = self.ex.interposer.last_touched
        base = self.ex.interposer.snapshot()
        job, settled, parked = [], [], len(self.parked)
        aftermath = None  # a composed state's: what the kill at this point set off
        # one torn version at a time, dropped once its states are keyed (kept_torn)
        versions = each_torn_version(write, [p.offset for p in points]) if write else None
        bases: dict = {}
        torn = None
        for point in points:
            if versions is not None:
                if torn is not None:
                    forget([torn])  # the last point's: every state of it is keyed
                torn = next(versions)
            snapshot = base if write is None else {**base, write.path: torn}
            for model in self.models:
                for i, state in enumerate(crash_states(self.ex, model, snapshot)):
                    if not self.sweep.mine(state, signature, model, point, i):
                        continue  # another shard's state
                    # Each state is decided as the replaying executor (a serial sweep)
                    # decides it, whatever the children's timing: see `_pending`.
                    known = self.sweep.known(state, signature, watch, self._pending)
                    while known.busy and self.no_parking and self.children:
                        # second pass: wait for that answer (no child waits on the
                        # parent, board.py, so this ends) and look again
                        self._collect(block=True)
                        known = self.sweep.known(state, signature, watch, self._pending)
                    key, result, masked = known.key, known.result, known.masked
                    if known.busy and not self.no_parking:
                        self._block(key, state, watch, signature)
                    if write is not None:  # keyed: from now on kept as the write's cut
                        state = kept_torn(state, write, point.offset, torn, bases)
                    entry = (model, point, i, state, key, watch, masked)
                    if result is not None:
                        settled.append((entry, result))
                    elif known.busy and not self.no_parking:
                        # An earlier state's answer may decide this one: settle it when
                        # that answer is in (`wait_all`; or in a second pass, if it is
                        # not shared after all). Before composing: the replaying executor
                        # would find it judged, and the counts must not depend on the
                        # worker count.
                        self.parked.append((entry, signature))
                    else:
                        composed = self.sweep.compose(model, point, i, state, self.world,
                                                      key, signature, watch)
                        if composed is None:
                            job.append(entry)
                        else:  # composed, not resumed (after_convergence.py)
                            settled.append((entry, composed[0]))
                            self.composed.add((model, point.id, i))
                            if composed[1] is not None:  # the clean run's, there
                                aftermath = composed[1]
        if torn is not None:  # every state made of it is keyed, the ones kept are TornStates
            forget([torn])
            torn = snapshot = None
        # What the kill sets off (code that catches it and goes on writing) belongs to the
        # kill point, not to the state: states shared from a judged one take it from the
        # child that dies here. Where every state is known, a first crash's point still
        # gets a child that only dies and reports (waited for at once, in no worker's
        # place): without it the point's verdict would depend on which other points
        # (crash models, shards, selections) were judged first. A pair sweep's second
        # points skip that (a fork at each of thousands of points): see `every_kill`.
        # A point where this shard owns no state gets no child at all.
        none_mine = self.sweep.owns is not None and not settled and len(self.parked) == parked
        # Nor where the kill provably unwinds to run() running nothing of the agent's
        # (unwind.py): its aftermath is known, empty, without the child.
        if not job and (not self.every_kill or none_mine or unwind.decided(loud)):
            # where a state was composed, the kill's aftermath is the clean run's at that
            # point (after_convergence.py), as the child that would have died here saw it
            for entry, known in settled:
                model, point, i, state, key, _, _ = entry
                self.sweep.record(model, point, i, state, known, aftermath or [], False, key,
                                  (model, point.id, i) in self.composed)
            for _ in points:
                self._done_point()
            return False
        while job and (self._busy() >= self.workers or len(self.children) >= self.most):
            self._collect(block=True)
        import sys

        sys.stdout.flush()
        sys.stderr.flush()
        read_fd, write_fd = _os.pipe()
        before_fork()  # fewer page-table entries to copy once forks add up (hugepages)
        try:
            pid = fork()  # forks.py: the threads alive here
        except OSError as exc:  # the machine's limit: the driver run ends here (_drive)
            _os.close(read_fd)
            _os.close(write_fd)
            self.fork_failed = f"{points[0].id}: {exc}"
            raise finality.killed(Killed(f"faultsim could not fork at {points[0].id}"))
        if pid == 0:  # the child: die here, then resume from what is left
            _os.close(read_fd)
            dies_with_parent()
            # the killed incarnation must end within the limit (`child_main` lifts it): a
            # kill some code holds up is named, and its states judged as it left them
            self.unwinding = time_limit(self.unwind_limit)
            self.unwinding.__enter__()
            self.in_child, self.job, self.fd, self.children = True, job, write_fd, {}
            self.dies_at = job[0][1] if job else points[0]
            if self.board is not None:
                self.ex.board = self.board
                self.board.notify = self._tell
            return True
        _os.close(write_fd)
        self.children[pid] = {"fd": read_fd, "buf": bytearray(), "job": job,
                              "settled": settled, "points": points, "signature": signature,
                              "started": _real_time.real_perf_counter(), "waiting": False,
                              "unwound": False}
        for entry in job:
            self.waiting[entry[4]] = pid
            if entry[6] is not None:
                self.waiting[(entry[6], entry[5], signature)] = pid
        if not job:  # waited for at once, under the same deadlines as any child
            self._wait_for(pid)
        return False

    @staticmethod
    def _take(child: dict, chunk: bytes) -> None:
        """A child's bytes: its verdicts' pickle, after any number of one-byte notes that it
        waits on the board (W) or runs again (R). A pickle starts with \x80 (PROTO), so
        the notes can only come before it."""
        if not child["buf"]:
            while chunk[:1] in (b"W", b"R", b"U"):
                if chunk[:1] == b"U":  # its kill has unwound: it resumes from here
                    child["unwound"], child["started"] = True, _real_time.real_perf_counter()
                else:
                    child["waiting"] = chunk[:1] == b"W"
                chunk = chunk[1:]
        child["buf"] += chunk

    def _pending(self, lookup: tuple) -> bool:
        """Whether a lookup `Sweep.known` makes may still be answered by an earlier state
        (`known`'s `pending`): one a running child is judging, or one parked.

        Why this makes the counts (which states are resumed, which share a run, and whose)
        the replaying executor's on any worker count and load. That executor decides each
        state, in the order of the kill points, with every earlier state's answer in the
        memo; the driver decides in the same order, but some earlier answers are not in yet.
        `known` makes at most three lookups, in order: the state's exact key, its masked
        class (learned only from a run resumed for a state of that class, that turned out
        blind to the watched file), its key without the watched file. An earlier state can
        only add to what those lookups find through its own exact key (every decided state's
        key goes into the memo), its masked class, or, for the third lookup, its key. So
        while an earlier state is undecided or its run unfinished, its key and masked class
        are `pending`, and a lookup that meets one stops there (`busy`): the state is parked
        and decided later in kill-point order (`wait_all`), or, in a second pass, waited
        for. A lookup no pending state can answer finds what the serial sweep finds,
        because every other earlier state's answer is in. Parked states' answers must not
        come from later ones either: a later state's exact key or masked class equal to a
        parked one's is pending, so it is parked too; and the parked state's key without
        the watched file is blocked as a key (`_block`), so a later state with that key
        waits rather than putting an answer under it that the serial sweep would not have
        had yet. Within one child's job the child decides as the serial sweep does
        (`child_main`). Which pass resumes a state depends on the load; whether it is
        resumed does not."""
        return lookup in self.waiting or lookup in self.blocked

    def _block(self, key: tuple, state, watch: str | None, signature: str) -> None:
        """A parked state's lookups, `_pending` until it is decided."""
        self.blocked.add(key)
        masked = masked_digest(state, watch)
        if masked is not None:
            self.blocked.add((masked, watch, signature))
        absent = absent_digest(state, watch)
        if absent is not None:
            self.blocked.add((absent, signature))

    def _busy(self) -> int:
        return sum(1 for c in self.children.values() if not c["waiting"])

    def _tell(self, note: bytes) -> None:  # in a child
        _os.write(self.fd, note)

    def _done_point(self) -> None:
        self.sweep.done_points += 1
        if self.progress is not None:
            self.progress(self.sweep.done_points, self.total)

    def _wait_for(self, pid: int) -> None:
        while pid in self.children:
            self._collect(block=True)

    def _collect(self, block: bool) -> None:
        import pickle
        import select

        while self.children:
            fds = {c["fd"]: pid for pid, c in self.children.items()}
            ready, _, _ = select.select(list(fds), [], [], 0.5 if block else 0)
            now = _real_time.real_perf_counter()
            for pid, child in list(self.children.items()):
                # the child's own limit (time_limit) does not count time it waited for
                # a CPU; nor does this backstop: on a loaded machine a starved child
                # still reports its hang itself, with where it was stuck
                # Every child has a deadline: until its kill has unwound (its U), twice
                # the limit it sets itself on that; then `deadline` for each state it
                # resumes (each resumed run has its own limit too).
                limit = self.deadline * max(1, len(child["job"])) if child["unwound"] \
                    and self.deadline else None if child["unwound"] \
                    else 2 * self.unwind_limit + 5
                if limit and now - child["started"] > limit \
                        and now - child["started"] - starved(pid) > limit \
                        and child["fd"] not in ready:
                    _os.kill(pid, 9)
                    self._finish(pid, None, f"the crash run did not finish within "
                                 f"{limit:g} s and was killed" if child["unwound"] else
                                 _Unjudged(f"the kill did not unwind: its crash run's "
                                           f"process had not ended {limit:g} s after it and "
                                           "was stopped; try --mode subprocess, where a "
                                           "kill stops every thread at once"))
            for fd in ready:
                pid = fds[fd]
                if pid not in self.children:
                    continue
                chunk = _os.read(fd, 1 << 16)
                if chunk:
                    self._take(self.children[pid], chunk)
                    continue
                buf = bytes(self.children[pid]["buf"])
                try:
                    result = pickle.loads(buf) if buf else None
                except Exception:
                    result = None
                self._finish(pid, result, None if result is not None else _DIED)
            if ready or not block:
                return

    def _finish(self, pid: int, result, problem: str | None) -> None:
        child = self.children.pop(pid)
        _os.close(child["fd"])
        try:
            _, status = _os.waitpid(pid, 0)
        except ChildProcessError:
            status = 0
        for key in [k for k, p in self.waiting.items() if p == pid]:
            del self.waiting[key]
        if problem is _DIED:
            # The point's own finding, and the sweep goes on (kill_point_judged). Not retried
            # in process: a retry needs a second driver pass to fork there again, and an
            # agent that ends its process on every resume was seen to end faultsim itself
            # in one. Subprocess mode retries in a fresh process (real/explore.py).
            problem = _Unjudged(death(status, child["points"][0]))
        if result is None:
            rule = "kill_point_judged" if isinstance(problem, _Unjudged) \
                else "completes_or_escalates"
            failure = ResumeResult([Violation.of(rule, str(problem or "no verdict"))], None,
                                   None)
            # the states known already are this point's too: its finding stands for them
            result = {"after_kill": [], "results": [failure] * len(child["job"])}
            if isinstance(problem, _Unjudged):
                child["settled"] = [(entry, failure) for entry, _ in child["settled"]]
        for point in child["points"]:
            self.aftermath[point.id] = result["after_kill"]
            if result.get("unwound"):
                self.ex.unwound.setdefault(point.id, result["unwound"])
        for entry, known in child["settled"]:
            model, point, i, state, key, _, _ = entry
            self.sweep.record(model, point, i, state, known, result["after_kill"], False, key,
                              (model, point.id, i) in self.composed)
        resumed = set()
        for entry, outcome in zip(child["job"], result["results"]):
            model, point, i, state, key, watch, masked = entry
            # states of one job that shared a resumed run (one object through pickle)
            # count it once, as the replaying executor does
            fresh = id(outcome) not in resumed
            resumed.add(id(outcome))
            if outcome.lead is not None:  # children forked from now on start with it
                learn(self.ex.leads, self.ex.lead_contents, outcome.lead)  # record drops it
            if fresh:
                self.sweep.learn(key, state, child["signature"], watch, outcome)
            else:  # shared in the child: known under its key, as `Sweep.known` leaves it
                self.sweep.memo[key] = outcome
            self.sweep.record(model, point, i, state, outcome, result["after_kill"], fresh,
                              key)
        for _ in child["points"]:
            self._done_point()

    def wait_all(self) -> list[KillPoint]:
        """Wait for every child; settle parked states; return the kill points whose states
        still need a run of their own (their class turned out to read the file)."""
        while self.children:
            self._collect(block=True)
        # in kill-point order, as the serial sweep decides them; a state left undecided
        # blocks its lookups for the later ones (`_pending`), which go to the second pass
        # with it where they could depend on it
        again = []
        self.blocked = set()
        for entry, signature in self.parked:
            model, point, i, state, key, watch, masked = entry
            known = self.sweep.known(state, signature, watch, self._pending)
            if known.result is not None:
                self.sweep.record(model, point, i, state, known.result,
                                  self.aftermath.get(point.id, []), False, known.key)
                continue
            self._block(key, state, watch, signature)
            if point not in again:
                again.append(point)
        self.parked, self.blocked = [], set()
        return again

    def kill_all(self) -> None:
        if self.in_child:
            return
        for pid, child in list(self.children.items()):
            try:
                _os.kill(pid, 9)
                _os.waitpid(pid, 0)
            except (ProcessLookupError, ChildProcessError):
                pass
            _os.close(child["fd"])
        self.children.clear()

    # -- child ----------------------------------------------------------------------------
    def child_main(self, after_kill: list[str], unwound: str | None = None) -> None:
        import pickle

        status = 0
        try:
            self.unwinding.__exit__(None, None, None)  # the kill has unwound
            _os.write(self.fd, b"U")
            self.world.sealed = False
            results, by_class, by_key = [], {}, {}
            for n, (model, point, i, state, key, watch, masked) in enumerate(self.job):
                # an equal state of another crash model (a power loss after every write
                # was synced leaves what a process kill does): one resumed run, as the
                # replaying executor has, so counts do not depend on the executor; the
                # three lookups of `Sweep.known`, in its order, among this job's runs
                known = by_key.get(key)
                if known is None and masked is not None:
                    known = by_class.get((masked, watch))
                absent = absent_digest(state, watch) if known is None and masked else None
                if absent is not None:
                    without = by_key.get((absent, key[1]))
                    if without is not None and without.blind_to_presence(watch):
                        known = without
                if known is not None:  # known under its key from now on, as in the memo
                    by_key[key] = known
                    results.append(known)
                    continue
                w = copy.deepcopy(self.world) if n < len(self.job) - 1 else self.world
                result = resume_and_judge(self.ex, self.sweep.golden, w, state,
                                          self.sweep.schedule(point), watch,
                                          self.sweep.keep_traces,
                                          keep_tail=self.sweep.observed is not None)
                if masked is not None and result.blind_to_content(watch):
                    by_class[(masked, watch)] = result
                by_key[key] = result
                results.append(result)
            with faithful_copies():  # its verdicts' worlds as they were (world/clock.py)
                data = pickle.dumps({"after_kill": after_kill, "results": results,
                                     "unwound": unwound})
            view = memoryview(data)
            while view:
                written = _os.write(self.fd, view)
                view = view[written:]
        except BaseException:
            status = 70
        finally:
            _os._exit(status)


_DIED = "the crash run's process died without a verdict"


class _Unjudged(str):
    """Why a child's point could not be judged (`kill_point_judged`), not a hang."""
