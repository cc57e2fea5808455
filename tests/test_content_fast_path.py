"""The cheap ways a content write is handled are the long way's answers (issue 53, item 1).

Two shortcuts, each compared here against the way they replace:
- `trace.common_prefix` (every write's `PendingWrite.start`): the byte loop it replaced;
- a handle in append mode appends from its first flush (`appends.first_end`): open, add a
  line, close, the way a transcript or a log is written, costs what it adds, where
  pyfakefs's own flush and faultsim's whole-file hook copied, compared and hashed the
  whole file each time.

The long way is forced by refusing every append (`FsInterposer.appended` answers False:
the flush goes to pyfakefs and the whole-file hook, as before these shortcuts) and by the
old prefix loop. Hypothesis draws sequences of appends (`a`, `ab`, `os.write` on
O_APPEND), an `a+b` handle kept open across them (writes, flushes, reads, truncates), whole
rewrites, renames, fsyncs and reads, each sequence run both ways, intact and with a kill
inside its k-th write: the events, the bytes, what every read returned, sizes, times (a
clock that counts its readings), inode identity and the durability record must be equal.
"""
from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from faultsim.core import trace
from faultsim.core.trace import Killed, common_prefix
from faultsim.inprocess.fs import FsInterposer

from conftest import SB


def loop_prefix(a: bytes, b: bytes) -> int:
    """`PendingWrite.start` before `common_prefix`, verbatim."""
    n = min(len(a), len(b))
    i = 0
    while i + 4096 <= n and a[i:i + 4096] == b[i:i + 4096]:
        i += 4096
    while i < n and a[i] == b[i]:
        i += 1
    return i


@settings(max_examples=400, deadline=None, derandomize=True)
@given(base=st.binary(max_size=70_000), cut=st.integers(0, 70_000),
       tail=st.binary(max_size=300), flip=st.booleans())
def test_common_prefix_is_the_byte_loop(base, cut, tail, flip):
    cut = min(cut, len(base))
    other = base[:cut] + tail
    a, b = (base, other) if flip else (other, base)
    assert common_prefix(a, b) == loop_prefix(a, b)


@pytest.mark.parametrize("size", [0, 1, 15, 16, 17, 255, 4095, 4096, 4097, 65535, 65536,
                                  65537, 200_000])
def test_common_prefix_at_every_block_edge(size):
    data = bytes(range(256)) * (size // 256 + 1)
    for at in {0, size // 2, max(size - 1, 0), size}:
        if at >= size:
            changed = data[:size]
        else:
            changed = data[:at] + bytes([data[at] ^ 1]) + data[at + 1:size]
        for a, b in ((data[:size], changed), (changed, data[:size] + b"x"),
                     (data[:size], data[:at])):
            assert common_prefix(a, b) == loop_prefix(a, b)


# -- appends from a handle's first flush: the long way's every observable answer --------

line = st.binary(min_size=1, max_size=40).map(lambda b: b.replace(b"\n", b".") + b"\n")
op = st.one_of(
    st.tuples(st.just("append"), st.sampled_from(["a", "ab", "os.write"]), line),
    st.tuples(st.just("h_open")),
    st.tuples(st.just("h_write"), line),
    st.tuples(st.just("h_flush")),
    st.tuples(st.just("h_read")),
    st.tuples(st.just("h_truncate"), st.integers(0, 120)),
    st.tuples(st.just("h_close")),
    st.tuples(st.just("rewrite"), line),
    st.tuples(st.just("overwrite"), st.sampled_from([0, 0, 3, 80]), line),
    st.tuples(st.just("rename")),
    st.tuples(st.just("fsync")),
    st.tuples(st.just("read")),
)


class TearAt:
    """Tears the k-th write `offset` bytes into its written region, then the kill."""

    def __init__(self, k: int, offset: int) -> None:
        self.k, self.offset, self.seen = k, offset, 0

    def before_write(self, tracer, write):
        self.seen += 1
        if self.seen == self.k:
            return write.torn(min(self.offset, len(write.new) - write.start))
        return None

    def after(self, tracer, event):
        pass


def run(sandbox, monkeypatch, ops, tear, long_way):
    """The sequence in a fresh sandbox; everything it observed."""
    from pyfakefs import helpers

    fs, ip, tracer = sandbox
    ip.restore({})
    tracer.events.clear()
    tracer.policy = TearAt(*tear) if tear else None
    ticks = iter(range(1, 10**6))
    monkeypatch.setattr(helpers, "now", lambda: float(next(ticks)))
    with monkeypatch.context() as m:
        if long_way:
            m.setattr(FsInterposer, "appended", lambda *args: False)
            m.setattr(trace, "common_prefix", loop_prefix)
        seen: list = []
        names = [f"{SB}/log", f"{SB}/log2"]
        handle = None
        try:
            with ip:
                for o in ops:
                    seen.append(step(o, names, handle))
                    if o[0] == "h_open" and handle is None:
                        handle = seen[-1] = open(names[0], "a+b")
                        seen[-1] = "opened"
                    elif o[0] == "h_close" and handle is not None:
                        handle.close()
                        handle = None
                if handle is not None:
                    handle.close()
        except Killed:
            seen.append("killed")
        inos: dict[int, int] = {}
        files = {}
        for path in names:
            if fs.exists(path):
                obj = fs.resolve(path)
                files[path] = (obj.st_size, obj.st_mtime, obj.st_ctime,
                               inos.setdefault(obj.st_ino, len(inos)))
        d = ip.durability
        return {"events": [(e.kind, e.subject, e.detail, e.size) for e in tracer.events],
                "snapshot": ip.snapshot(), "seen": seen, "files": files,
                "synced": sorted((inos.get(k, -1), v) for k, v in d.data.items()),
                "last_written": list(d.last_written)}


def step(o, names, handle):
    kind, path = o[0], names[0]
    if kind == "append":
        if o[1] == "os.write":
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
            os.write(fd, o[2])
            os.close(fd)
        else:
            with open(path, o[1]) as f:
                f.write(o[2] if o[1] == "ab" else o[2].decode("latin-1"))
        return None
    if kind == "rewrite":
        with open(path, "wb") as f:
            f.write(o[1])
        return None
    if kind == "overwrite":
        if os.path.exists(path):
            with open(path, "r+b") as f:
                if o[1]:  # a seek flushes first; without one the first flush holds it
                    f.seek(o[1])
                f.write(o[2])
        return None
    if kind == "rename":
        if os.path.exists(path):
            os.replace(path, names[1])
            names.reverse()
        return None
    if kind == "fsync":
        if os.path.exists(path):
            fd = os.open(path, os.O_RDONLY)
            os.fsync(fd)
            os.close(fd)
        return None
    if kind == "read":
        if not os.path.exists(path):
            return "absent"
        with open(path, "rb") as f:
            return f.read()
    if handle is None:
        return None
    if kind == "h_write":
        return handle.write(o[1])
    if kind == "h_flush":
        return handle.flush()
    if kind == "h_read":
        handle.seek(0)
        return handle.read()
    if kind == "h_truncate":
        return handle.truncate(o[1])
    return None


@settings(max_examples=150, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=st.lists(op, min_size=1, max_size=14).map(
    lambda ops: [("append", "ab", b"start\n"), ("h_open",), *ops]),
       tear=st.one_of(st.none(), st.tuples(st.integers(1, 12), st.integers(0, 60))))
def test_appends_from_the_first_flush_answer_as_the_long_way(sandbox, monkeypatch, ops, tear):
    fast = run(sandbox, monkeypatch, ops, tear, long_way=False)
    slow = run(sandbox, monkeypatch, ops, tear, long_way=True)
    assert fast == slow


def test_the_shortcut_is_taken_and_the_comparison_can_fail(sandbox, monkeypatch):
    """The fast run does append from a handle's first flush (the whole-file hook sees no
    byte of an append-only log after its creation), and the comparison above tells the
    ways apart when one of them lands other bytes."""
    fs, ip, tracer = sandbox
    ops = [("append", "ab", b"x" * 50 + b"\n")] * 5 + [("append", "a", b"y\n")]
    seen: list[int] = []
    whole = FsInterposer._content

    def counting(self, obj, contents, apply):
        seen.append(len(contents))
        return whole(self, obj, contents, apply)

    monkeypatch.setattr(FsInterposer, "_content", counting)
    fast = run(sandbox, monkeypatch, ops, None, long_way=False)
    assert sum(seen) == 0  # every line appended: only its creation passed (empty)
    seen.clear()
    slow = run(sandbox, monkeypatch, ops, None, long_way=True)
    assert sum(seen) == sum(51 * k for k in range(1, 6)) + 257  # the whole file each time
    assert fast == slow
    import test_content_fast_path as me  # a wrong start on the long way: other sizes

    monkeypatch.setattr(me, "loop_prefix", lambda a, b: 0)
    assert run(sandbox, monkeypatch, ops, None, long_way=True)["events"] != fast["events"]
