"""The pair stage's first crashes, taken from one run of the clean run instead of one run of
its prefix per first crash (issue 52).

To kill a first crash's resumed run again, the pair stage needs that first crash: the world
as the kill left it (ledger, model, clock, services), the crash states the model allows
there (to check the one judged before is among them), the file the kill left last touched
(`watch`, what a second crash at the resumed run's start is looked up by) and how the kill
unwound. `Explorer.crash` makes them by running the clean run again up to the point: O(N)
events for each of O(N) first crashes, the pair stage's quadratic term. A `CrashFeed` forks
one driver process that runs the clean run once and, at each first crash point the stage
will ask for, forks a child that takes the kill there and sends back what `Explorer.crash`
returns. The pair stage itself still runs in the parent, one first crash after another in
first-crash order, with its memos, leads and counts where they were: only where each first
crash comes from changes.

Why each crash is the one `Explorer.crash` gives (and so every decision and verdict after
it: which second state shares which verdict, which is resumed, the counts):

- The same run to the same kill. The driver is the first incarnation `Explorer.crash` runs
  (sandbox reset, a new world, incarnation 1 under the same seeded streams), untimed as the
  forking executor's driver is (its children have limits). The agent is deterministic (the
  golden guard checks two clean runs against each other), so up to the point its events
  are the crash run's; the child kills at the same event with the same seal (the
  interposer's kill and the sealed world) or tears the same write at the same offset, as
  `KillAt` does, and what the kill sets off as it unwinds happens in the child, under the
  limit the forking executor's children have (`time_limit` from the kill: the unwound note
  is theirs). The forking executor's first crashes, the whole single-crash sweep, rest on
  the same argument.
- What crosses is what the pair stage reads of the crash. The world, pickled under
  `faithful_copies`: each datetime keeps its class, the clock its instant. The stage only ever
  uses deep copies of it (`pristine`, `converged_course`), and a pickled world's copy is
  the same text to `world_signature` and `fingerprints.world_key` as the crash run's
  (tests/test_crash_feed.py compares them crash by crash). It is attached to the clock as
  the crash run's was, so the fake time is the kill's until the next incarnation moves
  it. The crash states' digests: the stage reads the states only to check that the one
  judged is there. The file last touched, set on the interposer as the crash run leaves
  it (a run that touched no file before its kill leaves the process's own, from whatever
  ran before: then the parent's is left as it is, as the crash run would leave it). The
  kill point's unwound note, recorded as `Explorer.crash` records it.
- What does not cross: the crash run's sandbox. Every incarnation the pair stage runs after
  a first crash (its course learned afresh, the driver of its second crashes, their resumed
  runs) begins with `Explorer.prepare`, which puts the judged state's bytes on disk
  (restoring them where the sandbox holds other bytes) and marks them all durable. A crash
  state is its bytes (`CrashState`: what the memos key, what a restart finds): the states
  of the power model and every second state of the replaying executor after the first of
  its course are restored so already, and the report is the same on any worker count
  (tests/test_worker_count.py). What a restore renews, file objects' timestamps and inode
  numbers, is not part of a crash state anywhere in faultsim.
- Order. The parent asks for the crashes where it called `Explorer.crash`, in the same
  order, and nothing else moves; messages that arrive before they are asked for wait in a
  buffer. A crash the feed cannot give (the run ended before the point or went on another
  thread, the child died or its world could not be pickled, a fork failed) is made the
  long way, by `Explorer.crash` itself, which raises what it raised before (a kill point
  that never came: KillDidNotLand).
"""
from __future__ import annotations

import pickle
import posix as _os  # the real OS: pyfakefs patches every module's `os`, not `posix`
import signal
import struct
import sys
import threading
from collections import Counter
from dataclasses import dataclass

from ..core.trace import Event, Killed, Tracer
from ..host.hugepages import before_fork
from ..interpose import finality
from ..killpoints import KillPoint
from ..pipeline.incarnation import CLEAN_LIMIT, time_limit
from ..pipeline.sweep import by_event
from ..world.clock import faithful_copies
from .forks import fork
from .isolated import dies_with_parent
from .sandbox import Crashed, Explorer, crash_states

_UNTOUCHED = "\0faultsim: no file touched"  # not a path: a path has no NUL
_HEADER = struct.Struct("<II")  # a message: its point id's length, its payload's


@dataclass(frozen=True)
class Digested:
    """A crash state known by its digest: all the pair stage reads of the states a first
    crash leaves (it checks the one judged before is among them)."""

    value: str

    def digest(self) -> str:
        return self.value


class CrashFeed:
    """`crash(point)`: what `Explorer.crash(point, model)` returns, for the `points` given
    (in the order the pair stage will ask, repeats allowed), from one driver run."""

    def __init__(self, ex: Explorer, model: str, points: list[KillPoint]) -> None:
        self.ex, self.model = ex, model
        self.uses = Counter(p.id for p in points)
        self.got: dict[str, bytes] = {}  # point id -> its payload (b"": the long way)
        self.pid: int | None = None
        self.fd: int | None = None
        # before the first event there is nothing to fork from: those are crashed here
        driven = {p.id: p for p in points if p.index > 0}
        if driven:
            self._start(list(driven.values()))

    def __enter__(self) -> "CrashFeed":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def crash(self, point: KillPoint) -> Crashed:
        data = self._take(point) if point.index > 0 else b""
        if not data:  # the long way (see the module's docstring)
            return self.ex.crash(point, self.model)
        message = pickle.loads(data)
        world = message["world"]
        self.ex.use_world(world)  # the fake time the kill left, as the crash run's world
        if message["touched"] != _UNTOUCHED:  # else left as it is, as the crash run
            self.ex.interposer.last_touched = message["touched"]  # that touched no file
        if message["unwound"]:
            self.ex.unwound.setdefault(point.id, message["unwound"])
        return Crashed(world, [Digested(d) for d in message["digests"]],
                       message["after_kill"])

    def close(self) -> None:
        if self.pid is not None:
            try:
                _os.kill(self.pid, signal.SIGKILL)  # its child goes with it (PDEATHSIG)
            except ProcessLookupError:
                pass
            try:
                _os.waitpid(self.pid, 0)
            except ChildProcessError:
                pass
            self.pid = None
        if self.fd is not None:
            _os.close(self.fd)
            self.fd = None

    # -- the parent's side --------------------------------------------------------------
    def _take(self, point: KillPoint) -> bytes:
        while point.id not in self.got and self.fd is not None:
            message = self._receive()
            if message is None:  # the driver is done (or died): the rest the long way
                _os.close(self.fd)
                self.fd = None
                break
            self.got[message[0]] = message[1]
        data = self.got.get(point.id, b"")
        self.uses[point.id] -= 1
        if self.uses[point.id] <= 0:
            self.got.pop(point.id, None)
        return data

    def _receive(self) -> tuple[str, bytes] | None:
        header = _read(self.fd, _HEADER.size)
        if header is None:
            return None
        name, size = _HEADER.unpack(header)
        body = _read(self.fd, name + size)
        if body is None:
            return None
        return body[:name].decode(), body[name:]

    def _start(self, points: list[KillPoint]) -> None:
        sys.stdout.flush()
        sys.stderr.flush()
        read_fd, write_fd = _os.pipe()
        before_fork()
        try:
            pid = fork()  # forks.py: the threads alive here
        except OSError:  # every crash the long way
            _os.close(read_fd)
            _os.close(write_fd)
            return
        if pid == 0:
            _os.close(read_fd)
            _drive(self.ex, self.model, points, write_fd)  # never returns
        _os.close(write_fd)
        self.pid, self.fd = pid, read_fd


def _read(fd: int, size: int) -> bytes | None:
    """`size` bytes from `fd`, or None at its end."""
    out = bytearray()
    while len(out) < size:
        chunk = _os.read(fd, min(size - len(out), 1 << 20))
        if not chunk:
            return None
        out += chunk
    return bytes(out)


def _write(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[_os.write(fd, view):]


# -- the driver and its children (forked processes; each ends in _os._exit) ---------------
def _drive(ex: Explorer, model: str, points: list[KillPoint], out: int) -> None:
    """The driver: the clean run, forking a child at each of `points`; a child takes the
    kill and sends what `Explorer.crash` would return. Ends after the last point's child
    (or where the run ends)."""
    status = 70
    try:
        dies_with_parent()
        ex.reset_sandbox()
        world = ex.new_world()
        # a crash run that touches no file before its kill leaves the process's last
        # touched file as it was (`Explorer.crash` does not reset it): the parent's
        ex.interposer.last_touched = _UNTOUCHED
        policy = _ForkAt(ex, points, out, seal=lambda: (ex.interposer.kill(),
                                                        setattr(world, "sealed", True)))
        inc = ex.incarnation(world, policy, timed=False)
        if policy.child is not None:  # a child: its kill has unwound
            point, reply = policy.child
            policy.unwinding.__exit__(None, None, None)
            states = crash_states(ex, model, ex.interposer.snapshot())
            world.sealed = False
            with faithful_copies():  # its datetimes as they were (world/clock.py)
                data = pickle.dumps({
                    "world": world, "digests": [s.digest() for s in states],
                    "after_kill": [inc.went_on] if inc.went_on else [],
                    "unwound": inc.unwound, "touched": ex.interposer.last_touched})
            _write(reply, data)
        # the driver: the run ended before its last point; the parent crashes the points
        # it still asks for the long way (which says the point never came)
        status = 0
    except BaseException:
        pass
    finally:
        _os._exit(status)


class _ForkAt:
    """The driver's tracer policy: at each point, a child that dies there; the driver waits
    for it (one at a time, so messages go in the run's order and the driver runs at most
    one point ahead of the parent's reading), passes on what it sent, and goes on."""

    def __init__(self, ex: Explorer, points: list[KillPoint], out: int, seal) -> None:
        self.ex, self.out, self._seal = ex, out, seal
        self.boundary, self.torn = by_event(points)
        self.last = max(p.index for p in points)
        self.child: tuple[KillPoint, int] | None = None  # in a child: (its point, its pipe)
        self.unwinding = None
        # a fork copies the calling thread only: points met on another thread are left
        # to the parent's long way
        self.runner = threading.get_ident()

    def after(self, tracer: Tracer, event: Event) -> None:
        if self.child is not None or threading.get_ident() != self.runner:
            return
        point = self.boundary.get(event.index)
        if point is not None and self._fork(point):
            self._seal()
            raise finality.killed(Killed(point.id))
        if event.index >= self.last:  # every point is behind: nothing more to send
            _os._exit(0)

    def before_write(self, tracer: Tracer, write) -> bytes | None:
        if self.child is not None or threading.get_ident() != self.runner:
            return None
        for point in self.torn.get(tracer.next_index, ()):
            if self._fork(point):  # the kill is raised by the write's hook (fs.py)
                self._seal()
                return write.torn(point.offset)
        return None

    def _fork(self, point: KillPoint) -> bool:
        """True in the child that dies at `point`."""
        sys.stdout.flush()
        sys.stderr.flush()
        read_fd, write_fd = _os.pipe()
        before_fork()
        try:
            pid = fork()
        except OSError:
            _os.close(read_fd)
            _os.close(write_fd)
            self._send(point, b"")
            return False
        if pid == 0:
            _os.close(read_fd)
            _os.close(self.out)
            self.child = (point, write_fd)
            # the kill must unwind within the limit the forking executor's children have
            self.unwinding = time_limit(self.ex.timeout or CLEAN_LIMIT)
            self.unwinding.__enter__()
            return True
        _os.close(write_fd)
        data = bytearray()
        while chunk := _os.read(read_fd, 1 << 20):
            data += chunk
        _os.close(read_fd)
        _, status = _os.waitpid(pid, 0)
        self._send(point, bytes(data) if status == 0 else b"")
        return False

    def _send(self, point: KillPoint, data: bytes) -> None:
        name = point.id.encode()
        _write(self.out, _HEADER.pack(len(name), len(data)) + name + data)
