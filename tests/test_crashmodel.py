"""Crash models (process, power) over real interposer states, and kill points over traces."""
from __future__ import annotations

import os

import pytest

from faultsim.core.crashmodel import SECTOR, CrashState, power_states, process_state
from faultsim.inprocess.explore import KillAt
from faultsim.inprocess.fs import DIR, FsInterposer
from faultsim.killpoints import (CATEGORIES, REQUIRED_ON_REFERENCE, KillPoint, categories,
                                 kill_points, torn_offsets)
from faultsim.core.trace import Event, Killed

from conftest import SB, dir_fsync  # the shared sandbox fixture comes from conftest too

OLD = b'{"version": "old"}'
NEW = b'{"version": "new", "pad": "' + b"n" * 1500 + b'"}'  # 1529 bytes: 3 sectors


def write(path: str, data: bytes, *, fsync: bool) -> None:
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        if fsync:
            os.fsync(f.fileno())


def power(ip: FsInterposer) -> list[CrashState]:
    return power_states(ip.snapshot(), ip.inodes(), ip.durability)


def by_name(states: list[CrashState]) -> dict[str, dict]:
    out = {s.persisted: s.as_dict() for s in states}
    assert len(out) == len(states), "two variants share a name"
    return out


def assert_well_formed(states: list[CrashState]) -> None:
    assert states and states[0].persisted == "everything persisted"
    assert all(s.model == "power" for s in states)
    assert len({s.files for s in states}) == len(states)  # deduplicated
    for s in states:
        assert [p for p, _ in s.files] == sorted(p for p, _ in s.files)


# -- process --------------------------------------------------------------------------------

def test_process_state_is_the_snapshot():
    snap = {"b": b"2", "a": DIR, "a/f": b"1"}
    [state] = process_state(snap)
    assert (state.model, state.persisted) == ("process", "every completed operation")
    assert state.files == (("a", None), ("a/f", b"1"), ("b", b"2"))
    assert state.as_dict() == snap


# -- power: scenarios built with the interposer -------------------------------------------

class Watch:
    """Tracer policy: compute the power states after every event."""

    def __init__(self, ip: FsInterposer) -> None:
        self.ip = ip
        self.seen: list[tuple[str, list[CrashState]]] = []

    def before_write(self, tracer, write):
        return None

    def after(self, tracer, event):
        self.seen.append((event.describe(), power(self.ip)))


def test_safe_pattern_is_old_or_new_at_every_step(sandbox):
    fs, ip, tracer = sandbox
    ip.restore({"a": OLD})
    watch = tracer.policy = Watch(ip)
    with ip:
        write("/sb/a.tmp", NEW, fsync=True)
        os.replace("/sb/a.tmp", "/sb/a")
        before_dir_fsync = power(ip)
        dir_fsync(SB)
    assert [e.kind for e in tracer.events] == ["fs.create", "fs.write", "fs.fsync",
                                               "fs.rename", "fs.fsync"]
    for where, states in watch.seen:
        assert_well_formed(states)
        for s in states:
            assert s.as_dict().get("a") in (OLD, NEW), (where, s.persisted)
    # before the directory fsync: both complete versions are possible, nothing else
    assert {s.as_dict()["a"] for s in before_dir_fsync} == {OLD, NEW}
    assert by_name(before_dir_fsync)["data persisted, unsynced names lost"] == {"a": OLD}
    # after it: every variant has the new content under the final name
    final = watch.seen[-1][1]
    assert final == power(ip)
    assert [s.as_dict() for s in final] == [{"a": NEW}]


def test_rename_without_file_fsync_can_leave_an_empty_file(sandbox):
    fs, ip, tracer = sandbox
    ip.restore({"a": OLD})
    with ip:
        write("/sb/a.tmp", NEW, fsync=False)
        os.replace("/sb/a.tmp", "/sb/a")
        dir_fsync(SB)
    states = by_name(power(ip))
    assert states["everything persisted"] == {"a": NEW}
    assert states["names persisted, unsynced data lost"] == {"a": b""}


def test_rename_without_file_fsync_can_tear_the_renamed_file(sandbox):
    """The new file's data was never synced, so a power loss may tear it at sector
    granularity whatever its name now is. `Durability.last_written` records the path written
    ("a.tmp") and the rename never updates it, so `power_states` finds no torn candidate
    once the file has been renamed to "a": the torn variants of the classic
    write-then-rename-without-fsync bug are never explored."""
    fs, ip, tracer = sandbox
    ip.restore({"a": OLD})
    with ip:
        write("/sb/a.tmp", NEW, fsync=False)
        torn_before = [s.persisted for s in power(ip) if "torn" in s.persisted]
        os.replace("/sb/a.tmp", "/sb/a")
    sectors = -(-len(NEW) // SECTOR)
    region = f"of unsynced bytes 0-{len(NEW)}"
    assert torn_before == [f"a.tmp torn after sector 1/{sectors} {region}, zero-filled",
                           f"a.tmp torn after sector 1/{sectors} {region}, garbage-filled",
                           f"a.tmp torn after sector {sectors - 1}/{sectors} {region}, "
                           "zero-filled"]
    torn_after = [s.persisted for s in power(ip) if "torn" in s.persisted]
    assert f"a torn after sector 1/{sectors} {region}, zero-filled" in torn_after


def test_rename_without_dir_fsync_can_lose_the_new_name(sandbox):
    fs, ip, tracer = sandbox
    ip.restore({"a": OLD})
    with ip:
        write("/sb/a.tmp", NEW, fsync=True)
        os.replace("/sb/a.tmp", "/sb/a")
    states = by_name(power(ip))
    assert states["everything persisted"] == {"a": NEW}
    assert states["data persisted, unsynced names lost"] == {"a": OLD}
    # the file's data is synced: no variant loses it under the name it has
    assert "names persisted, unsynced data lost" not in states


def test_new_directory_needs_its_parent_fsynced(sandbox):
    fs, ip, tracer = sandbox
    ip.restore({"keep": b"kept"})
    with ip:
        os.mkdir("/sb/new")
        write("/sb/new/f", b"payload", fsync=True)
        dir_fsync("/sb/new")
        with open("/sb/keep", "wb") as f:  # unsynced: tells the two name-loss variants apart
            f.write(b"changed")
    states = power(ip)
    assert_well_formed(states)
    named = by_name(states)
    assert named["everything persisted"] == {"keep": b"changed", "new": DIR,
                                             "new/f": b"payload"}
    assert named["data persisted, unsynced names lost"] == {"keep": b"changed"}
    assert named["nothing unsynced persisted"] == {"keep": b"kept"}
    # once the parent is synced, the directory and its synced entry survive everything
    with ip:
        dir_fsync(SB)
    for s in power(ip):
        files = s.as_dict()
        assert files["new"] is DIR and files["new/f"] == b"payload", s.persisted


def test_unsynced_multi_sector_write_is_torn_at_sectors(sandbox):
    fs, ip, tracer = sandbox
    ip.restore({"keep": b"k"})
    data = bytes((i * 7) % 251 for i in range(5 * SECTOR - 100))  # 5 sectors, last partial
    with ip:
        write("/sb/big", data, fsync=False)
    states = power(ip)
    assert_well_formed(states)
    assert states == power(ip)  # deterministic
    names = [s.persisted for s in states]
    assert names == [
        "everything persisted",
        "names persisted, unsynced data lost",
        "data persisted, unsynced names lost",
        # "nothing unsynced persisted" is the same tree as the one before: deduplicated
        "big torn after sector 1/5 of unsynced bytes 0-2460, zero-filled",
        "big torn after sector 2/5 of unsynced bytes 0-2460, zero-filled",
        "big torn after sector 2/5 of unsynced bytes 0-2460, garbage-filled",
        "big torn after sector 4/5 of unsynced bytes 0-2460, zero-filled",
    ]
    named = by_name(states)
    assert named["names persisted, unsynced data lost"] == {"keep": b"k", "big": b""}
    assert named["data persisted, unsynced names lost"] == {"keep": b"k"}
    for name, files in named.items():
        if "torn" not in name:
            continue
        k = int(name.split("sector ")[1].split("/")[0])
        fill = b"\0" if name.endswith("zero-filled") else b"\xa5"
        torn = files["big"]
        assert len(torn) == len(data)
        assert torn[:k * SECTOR] == data[:k * SECTOR]
        assert torn[k * SECTOR:] == fill * (len(data) - k * SECTOR)
        assert files["keep"] == b"k"


@pytest.mark.parametrize("size, expected", [
    (SECTOR, []),  # one sector: nothing to tear
    (SECTOR + 1, ["f torn after sector 1/2 of unsynced bytes 0-513, zero-filled",
                  "f torn after sector 1/2 of unsynced bytes 0-513, garbage-filled"]),
    (3 * SECTOR, ["f torn after sector 1/3 of unsynced bytes 0-1536, zero-filled",
                  "f torn after sector 1/3 of unsynced bytes 0-1536, garbage-filled",
                  "f torn after sector 2/3 of unsynced bytes 0-1536, zero-filled"]),
])
def test_torn_variants_by_size(sandbox, size, expected):
    fs, ip, tracer = sandbox
    ip.restore({})
    with ip:
        write("/sb/f", b"x" * size, fsync=False)
    assert [s.persisted for s in power(ip) if "torn" in s.persisted] == expected


def test_synced_write_has_no_torn_variant_and_the_last_unsynced_file_is_torn(sandbox):
    fs, ip, tracer = sandbox
    ip.restore({})
    with ip:
        write("/sb/first", b"1" * 1200, fsync=False)
        write("/sb/second", b"2" * 1200, fsync=False)
        write("/sb/synced", b"3" * 1200, fsync=True)
    torn = {s.persisted.split(" torn")[0] for s in power(ip) if "torn" in s.persisted}
    assert torn == {"second"}


def test_a_fresh_incarnation_is_all_durable(sandbox):
    fs, ip, tracer = sandbox
    start = {"a": OLD, "d": DIR, "d/e": DIR, "d/e/f": b"deep"}
    ip.restore(start)
    [state] = power(ip)
    assert state.as_dict() == start


# -- CrashState --------------------------------------------------------------------------------

def test_crash_state_digest_and_round_trip():
    files = {"b": b"\x00\x01", "a": DIR, "a/f": b"hello"}
    s = CrashState.of("power", "everything persisted", files)
    assert s.digest() == CrashState.of("power", "everything persisted", dict(files)).digest()
    assert s.digest() == CrashState.of("process", "other words", files).digest()  # files only
    assert len(s.digest()) == 32
    assert s.as_dict() == files
    assert CrashState.of(s.model, s.persisted, s.as_dict()) == s
    changed = {**files, "a/f": b"hellp"}
    assert CrashState.of("power", "x", changed).digest() != s.digest()
    # a directory is not an empty file, and a byte cannot move between path and content
    assert CrashState.of("p", "", {"x": DIR}).digest() != CrashState.of("p", "", {"x": b""}).digest()
    assert CrashState.of("p", "", {"ab": b"c"}).digest() != CrashState.of("p", "", {"a": b"bc"}).digest()
    assert CrashState.of("p", "", {}).digest() != CrashState.of("p", "", {"x": b""}).digest()


# -- kill points -----------------------------------------------------------------------------

def test_torn_offsets():
    assert torn_offsets(0) == [] and torn_offsets(1) == []
    assert torn_offsets(2) == [1]
    assert torn_offsets(3) == [1, 2]
    offs = torn_offsets(1500)
    assert offs == sorted(set(offs))
    assert {1, 750, 1499, 512, 1024} <= set(offs)
    assert set(offs) == {1, 512, 750, 1024, 1499}
    assert all(0 < o < 1500 for o in offs)
    assert torn_offsets(1024) == [1, 512, 1023]  # half is a sector boundary: once
    big = torn_offsets(5000)
    assert set(range(512, 5000, 512)) <= set(big) and big == sorted(set(big))


def ev(i: int, kind: str, subject: str = "", detail: str = "", size: int = 0) -> Event:
    return Event(i, kind, subject, detail, size)


TRACE = [
    ev(1, "model.response", "main@0", "200"),
    ev(2, "mark.checkpoint.A", "email.send"),
    ev(3, "fs.create", "runs/checkpoint.json.tmp"),
    ev(4, "fs.write", "runs/checkpoint.json.tmp", "0->1100 abc", size=1100),
    ev(5, "fs.fsync", "runs/checkpoint.json.tmp"),
    ev(6, "fs.rename", "runs/checkpoint.json", "from runs/checkpoint.json.tmp"),
    ev(7, "mark.tool.start", "email.send"),
    ev(8, "model.response", "sub@0", "429 rate_limit_error"),
    ev(9, "effect.applied", "email.send", "d1g3st key=k1"),
    ev(10, "mark.tool.end", "email.send"),
    ev(11, "fs.write", "notes/out file.txt", "0->1 x", size=1),
    ev(12, "fs.write", "notes/out file.txt", "1->4 y", size=3),
    ev(13, "mark.checkpoint.B", ""),
    ev(14, "model.response", "main@1", "200"),
    ev(15, "fs.truncate", "notes/out file.txt", "4->0"),
    ev(16, "fs.rename", "out/data.json", "from out/data.json.tmp"),
    ev(17, "fs.write", "out/data.json", "0->9 z", size=9),
]


def test_kill_points_boundaries_and_categories():
    points = kill_points(TRACE)
    assert points[0] == KillPoint(0, None, "start", "k0-start",
                                  "nothing (before the first event)")
    boundaries = [p for p in points if not p.torn]
    assert [p.index for p in boundaries] == list(range(len(TRACE) + 1))
    assert [p.category for p in boundaries] == [
        "start",
        "after-model-response",  # 1: a 200
        "between-A-and-tool",  # 2
        "between-A-and-tool",  # 3
        "between-A-and-tool",  # 4
        "checkpoint-rename",  # 5: the next event renames checkpoint.json into place
        "between-A-and-tool",  # 6
        "in-tool",  # 7
        "in-tool",  # 8: a 429 changes no phase
        "after-effect",  # 9
        "after-tool-before-B",  # 10
        "after-tool-before-B",  # 11
        "after-tool-before-B",  # 12
        "after-B",  # 13
        "after-model-response",  # 14
        "after-model-response",  # 15: the next rename is not a checkpoint's
        "after-model-response",  # 16
        "after-model-response",  # 17
    ]
    for p in boundaries[1:]:
        assert p.where == TRACE[p.index - 1].describe()


def test_kill_points_torn_points():
    points = kill_points(TRACE)
    torn = [p for p in points if p.torn]
    assert [(p.index, p.offset) for p in torn] == (
        [(4, o) for o in torn_offsets(1100)] + [(12, 1), (12, 2)]
        + [(17, o) for o in torn_offsets(9)])
    assert {p.category for p in torn if p.index == 4} == {"checkpoint-mid-write"}
    assert {p.category for p in torn if p.index != 4} == {"mid-write"}
    # a torn point inside event i comes before the boundary after it
    order = [(p.index, 1 if p.offset is None else 0, p.offset or 0) for p in points]
    assert order == sorted(order)
    assert all(p.where == TRACE[p.index - 1].describe() for p in torn)
    assert "after 512 bytes" in next(p for p in torn if p.offset == 512).describe()


def test_kill_point_ids_are_unique_stable_and_readable():
    points = kill_points(TRACE)
    again = kill_points(list(TRACE))
    assert points == again
    ids = [p.id for p in points]
    assert len(set(ids)) == len(ids)
    assert not any(c.isspace() for i in ids for c in i)
    by_index = {p.id: p for p in points}
    assert "k2-between-A-and-tool-checkpoint.A-email.send#1" in by_index
    assert "k1-after-model-response-model@main@0#1" in by_index
    assert "k4.512-checkpoint-mid-write-checkpoint.json.tmp#2@512" in by_index
    assert "k12-after-tool-before-B-out_file.txt#2" in by_index
    for p in points:
        assert p.id.startswith(f"k{p.index}.{p.offset}-" if p.torn else f"k{p.index}-")
        assert p.category in p.id
    counts = categories(points)
    assert set(counts) == set(CATEGORIES)
    assert sum(counts.values()) == len(points)
    assert all(counts[c] > 0 for c in REQUIRED_ON_REFERENCE)


def test_kill_points_of_an_empty_trace():
    assert [p.id for p in kill_points([])] == ["k0-start"]


def test_non_200_model_response_before_any_phase():
    trace = [ev(1, "model.response", "main@0", "529 overloaded_error"),
             ev(2, "model.response", "main@0", "200")]
    assert [p.category for p in kill_points(trace)] == ["start", "start",
                                                        "after-model-response"]


# -- kill points replayed on the interposer ------------------------------------------------

INITIAL = {"runs": DIR, "runs/checkpoint.json": OLD, "log": b"start\n"}


def workload() -> None:
    with open("/sb/runs/checkpoint.json.tmp", "wb") as f:
        f.write(NEW)
        f.flush()
        os.fsync(f.fileno())
    os.replace("/sb/runs/checkpoint.json.tmp", "/sb/runs/checkpoint.json")
    dir_fsync("/sb/runs")
    with open("/sb/log", "ab") as f:
        f.write(b"step done\n")


class Record:
    def __init__(self, ip):
        self.ip = ip
        self.states: dict[int, tuple[dict, list[CrashState]]] = {}

    def before_write(self, tracer, write):
        return None

    def after(self, tracer, event):
        self.states[event.index] = (self.ip.snapshot(), power(self.ip))


def test_every_kill_point_of_a_golden_trace_lands_where_it_says(sandbox):
    """The explorer's loop in miniature: a golden run, its kill points, one run per point
    with `KillAt`; each crash leaves exactly the golden state after that event (process
    model), the same power variants, or a write torn after exactly `offset` bytes."""
    fs, ip, tracer = sandbox
    open0 = (list(fs.open_files), list(fs._free_fd_heap))

    ip.restore(INITIAL)
    record = tracer.policy = Record(ip)
    with ip:
        workload()
    golden = list(tracer.events)
    assert [(e.kind, e.subject) for e in golden] == [
        ("fs.create", "runs/checkpoint.json.tmp"), ("fs.write", "runs/checkpoint.json.tmp"),
        ("fs.fsync", "runs/checkpoint.json.tmp"), ("fs.rename", "runs/checkpoint.json"),
        ("fs.fsync", "runs"), ("fs.write", "log")]
    states = {0: (INITIAL, None), **record.states}

    points = kill_points(golden)
    assert {p.category for p in points} == {"start", "checkpoint-mid-write",
                                            "checkpoint-rename", "mid-write"}
    for point in points[1:]:
        ip.restore(INITIAL)
        tracer.events = []
        policy = tracer.policy = KillAt(point, seal=ip.kill)
        with ip:
            with pytest.raises(Killed):
                workload()
        tracer.policy = None
        fs.open_files[:], fs._free_fd_heap[:] = open0
        assert policy.landed, point.id
        snap = ip.snapshot()
        if not point.torn:
            assert snap == states[point.index][0], point.id
            assert power(ip) == states[point.index][1], point.id
            assert [e.signature() for e in tracer.events] == \
                [e.signature() for e in golden[:point.index]]
        else:
            before, after = states[point.index - 1][0], states[point.index][0]
            path = golden[point.index - 1].subject
            old, new = before.get(path, b""), after[path]
            assert new.startswith(old)
            assert snap == {**after, path: new[:len(old) + point.offset]}, point.id
            assert len(tracer.events) == point.index - 1


def test_a_torn_state_is_the_state_it_was_cut_from_to_every_reader():
    import copy
    import pickle

    from faultsim.core.crashmodel import LARGE, TornState, kept_torn
    from faultsim.core.trace import PendingWrite

    old, new = NEW * 3, NEW * 6  # a checkpoint rewritten longer: the cut in its new tail
    write = PendingWrite("checkpoint.json", old, new, lambda data: None)
    for offset in (0, 7, len(new) - write.start - 1, len(new) - write.start):
        torn = write.torn(offset)
        state = CrashState.of("process", "every completed operation",
                              {"checkpoint.json": torn, "notes.md": b"n", "d": None})
        kept = kept_torn(state, write, offset, torn)
        assert isinstance(kept, TornState) and len(torn) >= LARGE
        assert len(pickle.dumps(kept)) < len(pickle.dumps(state)) + len(new) + len(old)
        for other in (kept, pickle.loads(pickle.dumps(kept)), copy.deepcopy(kept)):
            assert other == state and state == other and hash(other) == hash(state)
            assert other.files == state.files and other.as_dict() == state.as_dict()
            assert other.digest() == state.digest() == CrashState.of(
                "process", "every completed operation", state.as_dict()).digest()
            assert other.persisted == state.persisted and other.model == state.model
            assert other != CrashState.of("process", "every completed operation",
                                          {**state.as_dict(), "notes.md": b"m"})
    # the states of one write share one tuple of their other files
    bases: dict = {}
    a, b = (kept_torn(CrashState.of("process", "p", {"checkpoint.json": t, "n": b"n"}), write,
                      o, t, bases) for o, t in ((7, write.torn(7)), (9, write.torn(9))))
    assert a._base is b._base and a != b and a.as_dict()["n"] == b"n"
    # only the very bytes the write's cut made; small files are kept as they are
    torn = write.torn(9)
    state = CrashState.of("process", "p", {"checkpoint.json": torn})
    assert kept_torn(state, write, 9, torn[:1] + torn[1:]) is state  # equal, not those bytes
    small = PendingWrite("s.json", b"", b"x" * 100, lambda data: None)
    cut = small.torn(50)
    assert kept_torn(CrashState.of("process", "p", {"s.json": cut}), small, 50, cut).files \
        == (("s.json", cut),)


@pytest.mark.parametrize("save", ["atomic", "direct"])
def test_a_sweep_keeps_torn_states_as_cuts_and_judges_as_before(tmp_path, monkeypatch, save):
    """The states of kill points inside a write are kept as the write's cut once keyed
    (a checkpoint rewritten whole each turn: O(N^2) bytes of torn copies otherwise); every
    verdict and its state is what keeping them whole gives, failing ones too (`direct`
    saves in place: a torn state.json is read by the resume)."""
    import convergence_agents
    from faultsim import explore, load_scenario
    from faultsim.core.crashmodel import TornState
    from faultsim.inprocess import forking

    path = tmp_path / "lookups_16.toml"
    path.write_text(convergence_agents.scenario_text(16))
    scen = load_scenario(path)

    def seen():
        report = explore(convergence_agents.factory(save), scen, crash_model="process",
                         crashes=1, workers=2)
        (run,) = report.runs
        verdicts = [(v.kill_point.id, v.order, v.persisted, v.state.files,
                     [x.explanation for x in v.violations]) for v in run.verdicts]
        kept = sum(isinstance(v.state, TornState) for v in run.verdicts)
        return verdicts, run.judged, kept, report.ok

    on, judged_on, kept, ok = seen()
    monkeypatch.setattr(forking, "kept_torn", lambda state, *how: state)
    off, judged_off, none, _ = seen()
    assert kept > 0 and none == 0  # cuts were kept, and the long way kept states whole
    assert on == off and judged_on == judged_off
    assert ok == (save == "atomic")  # an in-place save is caught, torn states and all
