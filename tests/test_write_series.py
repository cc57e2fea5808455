"""A large file written by many small writes (issue 51, item 4): `json.dump(index, f)` or a
loop of `f.write` reaches the file as a flush of the writer's buffer at a time, each an
event. Its kill points are bounded as one write of the same bytes is
(`killpoints.write_runs`, `run_cuts`), and each flush costs what it adds, not the whole
file (`inprocess/appends.py`), with the same events, digests and bytes as before. The
sweeps of such agents are in tests/test_torn_bounds.py."""
from __future__ import annotations

import json
import os

import pytest

from faultsim.killpoints import (TORN_ALL_UP_TO, every_cut, kill_points, torn_bounded,
                                 torn_bounded_line, torn_offsets, write_runs)
from faultsim.pipeline.sweep import largest_write
from faultsim.core.trace import Event, Killed, digest

from conftest import SB


def _trace(*parts: tuple[str, list[int]] | str) -> list[Event]:
    """Events: ("FILE", [sizes]) appends those writes to FILE (from its length so far), a
    string is a mark between them."""
    events: list[Event] = []
    lengths: dict[str, int] = {}
    for part in parts:
        if isinstance(part, str):
            events.append(Event(len(events) + 1, "mark.step", part))
            continue
        path, sizes = part
        for size in sizes:
            old = lengths.get(path, 0)
            lengths[path] = old + size
            events.append(Event(len(events) + 1, "fs.write", path,
                                f"{old}->{old + size} {len(events):012x}", size))
    return events


def test_a_series_of_small_writes_has_the_kill_points_of_one_write_of_its_bytes():
    """A 50 MB json.dump's 6,400 flushes: before, every one had its 17 cuts and a boundary
    (115,000 kill points); now the series has exactly the kill points of one 50 MB write,
    at the same offsets into it, some of them boundaries between two flushes."""
    sizes = [8192] * 6400 + [1000]  # flushes on 8 KiB boundaries: many cuts fall between
    series = _trace(("index.json", sizes))
    total = sum(sizes)
    one = _trace(("index.json", [total]))
    points = kill_points(series)
    assert len(points) == len(kill_points(one)) == 2 + len(torn_offsets(total))
    starts = {e.index: int(e.detail.split("->")[0]) for e in series}
    where = sorted(starts[p.index] + p.offset if p.torn else starts[p.index] + series[
        p.index - 1].size for p in points if p.index)  # each point as an offset into it
    assert where == torn_offsets(total) + [total]  # every cut of the one write, and all
    assert any(not p.torn and p.index < len(series) for p in points)  # between flushes
    assert torn_bounded(series) == [{"file": "index.json", "bytes": total,
                                     "cuts": len(torn_offsets(total)),
                                     "of": sum(map(every_cut, sizes)) + len(sizes) - 1,
                                     "writes": len(sizes)}]
    line = torn_bounded_line(torn_bounded(series))
    assert "a series of consecutive writes extending one file, cut as one" in line
    assert f"{total} bytes in 6401 writes, {len(torn_offsets(total))} of" in line
    torn = sum(p.torn for p in points)  # the rest of its cuts fall between two flushes
    assert largest_write(points, series) == (torn, total, series[0].describe())


def test_small_series_and_torn_cuts_all_keep_every_cut_and_boundary():
    """Up to 64 KiB written (every bundled scenario's files), and under torn_cuts = "all",
    each write keeps every cut and each boundary, as before."""
    small = _trace(("checkpoint.json", [8040] * 7 + [3553]))  # 59,833 bytes
    assert sum(e.size for e in small) <= TORN_ALL_UP_TO
    every = 1 + len(small) + sum(len(torn_offsets(e.size)) for e in small)
    assert len(kill_points(small)) == every and torn_bounded(small) == []
    big = _trace(("index.json", [8040] * 130))
    assert len(kill_points(big, torn_cuts="all")) == 1 + len(big) + sum(
        every_cut(e.size) for e in big)
    assert torn_bounded(big, "all") == []


def test_only_consecutive_appends_to_one_file_are_one_series():
    """Another file's write, any other event, or a write that does not start where the
    last one ended (an overwrite) ends a series: each part is cut on its own."""
    trace = _trace(("a", [40_000, 40_000]), ("b", [40_000]), ("a", [40_000]), "step",
                   ("a", [40_000, 40_000]))
    assert write_runs(trace) == [[0, 1], [2], [3], [5, 6]]
    overwrite = trace[:2] + [Event(3, "fs.write", "a", "80000->80000 x", 100)]
    assert write_runs(overwrite) == [[0, 1], [2]]
    # each series over 64 KiB is bounded on its own; a lone 40 KB write keeps every cut
    assert [b["writes"] for b in torn_bounded(trace)] == [2, 2]


# -- the interposer: each flush costs what it adds ------------------------------------------


def _whole_file_bytes(ip) -> list[int]:
    """Bytes the interposer's whole-file hook handles, per call (appends bypass it)."""
    seen: list[int] = []
    whole = ip._content

    def counting(obj, contents, apply):
        seen.append(len(contents))
        return whole(obj, contents, apply)

    ip._content = counting
    return seen


INDEX = {"rows": ["x" * 1000] * 1000}  # ~1 MB of JSON


def test_a_json_dump_is_a_flush_at_a_time_without_copying_the_file(sandbox):
    """The same events as before (a write per 8 KiB flush, each naming the length and
    digest of the bytes the file then held) and the same bytes, but the whole-file hook
    sees only the handle's first flush: 8 KiB, where it saw every flush's whole file
    (131 of them, 69 MB for this 1 MB file, O(n^2))."""
    fs, ip, tracer = sandbox
    whole = _whole_file_bytes(ip)
    with ip:
        with open(f"{SB}/index.json", "w") as f:
            json.dump(INDEX, f)
    data = json.dumps(INDEX).encode()
    writes = [e for e in tracer.events if e.kind == "fs.write"]
    assert len(writes) == 125 > len(data) // 8192  # a flush per 8 KiB buffer
    for e in writes:
        old, new = map(int, e.detail.split()[0].split("->"))
        assert e.detail.split()[1] == digest(data[:new]) and e.size == new - old
    assert ip.snapshot()["index.json"] == data
    assert sum(whole) <= 8192


@pytest.mark.parametrize("mode", ["w", "wb", "a", "os.write"])
def test_appends_read_back_and_tear_as_whole_file_writes(sandbox, mode):
    """Every way of appending in a loop goes the cheap way after its first flush; a reader
    in the middle meets the bytes flushed so far, a seek back and overwrite lands (not an
    append: the whole-file path), and a kill inside the tenth flush leaves exactly the
    bytes before its cut."""
    fs, ip, tracer = sandbox
    line = "y" * 3000 + "\n"
    path = f"{SB}/log"

    def write_lines(n):
        if mode == "os.write":
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
            for _ in range(n):
                os.write(fd, line.encode())
            return os.close(fd)
        with open(path, mode) as f:
            for _ in range(n):
                f.write(line.encode() if mode == "wb" else line)

    whole = _whole_file_bytes(ip)
    with ip:
        write_lines(20)
        assert sum(whole) <= 8192  # the first flush only: the rest appended
        with open(path, "rb") as r:
            assert r.read() == line.encode() * 20
        write_lines(20) if mode in ("a", "os.write") else None
        with open(path, "r+b") as f:
            f.seek(3)
            f.write(b"ZZ")
            f.seek(0, 2)
            f.write(b"end")
    n = 40 if mode in ("a", "os.write") else 20
    expected = bytearray(line.encode() * n + b"end")
    expected[3:5] = b"ZZ"
    assert ip.snapshot()["log"] == bytes(expected)
    writes = [e for e in tracer.events if e.kind == "fs.write"]
    for e in writes:
        assert int(e.detail.split()[0].split("->")[1]) <= len(expected)
    assert writes[-1].detail.split()[1] == digest(bytes(expected))

    class TearTenth:
        def __init__(self):
            self.seen = 0

        def before_write(self, tracer, write):
            self.seen += 1
            if self.seen == 10:
                self.start = write.start
                return write.torn(1000)
            return None

        def after(self, tracer, event):
            pass

    ip.restore({})
    tracer.events.clear()
    tracer.policy = policy = TearTenth()
    with ip, pytest.raises(Killed):
        write_lines(60)  # 180 KB: over 20 flushes in every mode
    assert policy.seen == 10
    assert ip.snapshot()["log"] == (line.encode() * 60)[:policy.start + 1000]


# -- a small series keeps every boundary: a bug there is found ---------------------------------
class _ChunkedSave:
    """A user's agent that saves its state.json in three os.write calls (a series of three
    writes extending the file), in place or to a temp file renamed over it."""

    def __init__(self, env, atomic: bool):
        import user_agents

        self.inner, self.atomic, self._module = user_agents.Agent(env), atomic, user_agents

    def _save(self, path: str, data: dict) -> None:
        text = json.dumps(data).encode()
        target = path + ".tmp" if self.atomic else path
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        third = len(text) // 3
        for chunk in (text[:third], text[third:2 * third], text[2 * third:]):
            os.write(fd, chunk)
        os.close(fd)
        if self.atomic:
            os.replace(target, path)

    def run(self):  # the module's `save` is this agent's while it runs
        real, self._module.save = self._module.save, self._save
        try:
            return self.inner.run()
        finally:
            self._module.save = real


@pytest.mark.parametrize("atomic", [False, True])
def test_a_bug_at_a_boundary_inside_a_small_series_is_found(atomic):
    """Guard proven twice: a state file under 64 KiB saved in place in three writes fails
    at the boundaries between them (a kill there leaves a shorter file that does not
    parse), so those boundaries are kill points of the sweep, each failing; saved to a
    temp file renamed over it, every point passes."""
    import faultsim
    from conftest import DATA

    report = faultsim.explore(lambda env: _ChunkedSave(env, atomic),
                              faultsim.load_scenario(DATA / "one_charge.toml"), crashes=1,
                              crash_model="process", workers=1)
    (run,) = report.runs
    trace = run.verdicts[0].golden.trace if run.verdicts else []
    series = [r for r in write_runs(trace) if len(r) == 3]
    assert series and all(sum(trace[i].size for i in r) <= TORN_ALL_UP_TO for r in series)
    # the boundaries after the first and the second write of each series
    inside = {i + 1 for r in series for i in r[:-1]}
    boundaries = [p for p in run.kill_points if not p.torn and p.index in inside]
    assert len(boundaries) == 2 * len(series)
    failing = {v.kill_point.id for v in run.failures}
    if atomic:
        assert report.ok
    else:
        assert {p.id for p in boundaries} <= failing
