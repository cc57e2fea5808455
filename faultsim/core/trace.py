"""The trace: one ordered list of everything an incarnation did that a crash could split.

File operations (from the pyfakefs interposer), model answers (from the fake transport),
effects (from the world's receivers) and the agent's own protocol marks all become
`Event`s with a stable index. A kill point is a boundary between two events, or a place
inside one write.
"""
from __future__ import annotations

import hashlib
from functools import cached_property
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol


class Killed(BaseException):
    """A simulated SIGKILL. A BaseException, so no `except Exception` in an agent (nor the
    SDK's tool runner) can swallow it."""


class WorldSealed(BaseException):
    """The dead incarnation tried to act on the world after its kill."""


def hasher(data: bytes = b""):
    """A `digest` that can be carried on: its `hexdigest()` is `digest` of every byte it
    was given (a file's digest after an append, from the digest before it)."""
    return hashlib.blake2b(data, digest_size=6)


def digest(data: bytes) -> str:
    return hasher(data).hexdigest()


@dataclass(frozen=True)
class Event:
    index: int  # 1-based position in the incarnation's trace
    kind: str  # fs.create fs.write fs.truncate fs.rename fs.unlink fs.mkdir fs.rmdir fs.fsync
    #            model.response model.stream effect.<outcome> mark.<name>
    subject: str  # the path, service call or mark name it concerns
    detail: str = ""  # stable extra facts (sizes, digests, keys)
    size: int = 0  # bytes written, for writes
    # what a digest in `detail` stands for, shortened (an SQL statement): shown where two
    # runs part on it, never compared (the digest is)
    text: str = field(default="", compare=False)

    def signature(self) -> tuple:
        """What two deterministic runs must agree on."""
        return (self.kind, self.subject, self.detail)

    def describe(self) -> str:
        extra = f" {self.detail}" if self.detail else ""
        return f"#{self.index} {self.kind} {self.subject}{extra}"


class TracerPolicy(Protocol):
    """What acts on a traced incarnation as it runs. Six policies: inprocess.sandbox.KillAt
    (kill at one kill point), inprocess.forking.ForkAt (fork a child that dies at each
    point), inprocess.counting's counting pass, formats.record's recorder (hand each state
    over, kill nothing), real.child.RealKill and real.child.ForkAtEach (SIGKILL)."""

    def after(self, tracer: Tracer, event: Event) -> None:
        """Called once `event` happened; may end the incarnation (raise Killed)."""

    def before_write(self, tracer: Tracer, write: PendingWrite) -> bytes | None:
        """Called before a content write lands: the bytes that land instead (a torn write),
        or None for the whole write."""


@dataclass
class Tracer:
    """Collects events and lets a policy act at each one (kill, fork, tear a write)."""

    events: list[Event] = field(default_factory=list)
    policy: TracerPolicy | None = None

    @property
    def next_index(self) -> int:
        return len(self.events) + 1

    def emit(self, kind: str, subject: str, detail: str = "", size: int = 0,
             text: str = "") -> Event:
        event = Event(self.next_index, kind, subject, detail, size, text)
        self.events.append(event)
        if self.policy is not None:
            self.policy.after(self, event)
        return event

    def before_write(self, write: "PendingWrite") -> bytes | None:
        """Called before a content write lands; a policy may tear it (return partial bytes)."""
        if self.policy is not None:
            return self.policy.before_write(self, write)
        return None


@dataclass(frozen=True)
class PendingWrite:
    path: str  # relative to the sandbox
    old: bytes
    new: bytes
    apply: Callable[[bytes], Any]  # puts bytes into the file (bypassing the trace)

    @cached_property
    def start(self) -> int:
        """Where the written region begins: the common prefix of old and new."""
        return common_prefix(self.old, self.new)

    def torn(self, offset: int) -> bytes:
        """The file after `offset` bytes of the written region reached it (a process kill)."""
        s = self.start
        return self.new[:s + offset] + self.old[s + offset:]


def common_prefix(a: bytes, b: bytes) -> int:
    """The length of the longest common prefix of `a` and `b`, compared in C.

    Every write asks it (`PendingWrite.start`). A byte-by-byte loop in Python cost up to
    4,095 steps a write past the last whole block, and an append (`old` a prefix of `new`,
    a transcript's every line) always ended there: 7 % of a traced run of an append-only
    transcript at 100 steps. Here: one comparison when one is a prefix of the other (an
    append, a truncate, an unchanged file), else blocks of 64 KiB, then 4 KiB, 256, 16 and
    1 bytes, each size at most 15 times once the larger one stopped, and no block copied
    (`startswith` at an offset against a memoryview). The same number as the loop: the
    invariant is `a[:i] == b[:i]`, and each size stops where the next block differs."""
    n = min(len(a), len(b))
    short, other = (a, b) if len(a) <= len(b) else (b, a)
    if other.startswith(short):
        return n
    view, i = memoryview(b), 0
    for size in (65536, 4096, 256, 16, 1):
        while i + size <= n and a.startswith(view[i:i + size], i):
            i += size
    return i
