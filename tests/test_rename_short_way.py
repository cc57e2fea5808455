"""A rename's short way (`fs._short_rename`) and the remembered folder paths (`fs._folder_path`)
give what the long way gives: the same answers and errors, the same tree, the same trace
events, the same first touches and the same durability record, for any sequence of file
operations over files, folders, symlinks and hard links, renames of every kind among them
(relative, trailing separators, `..`, path objects, folders with contents, a file over
itself, over a folder, into a missing folder, outside the sandbox). Each sequence is run
twice on a fresh fake file system with faultsim's interposer watching and tracking, once
each way; the short way must also have been taken, or the comparison proved nothing."""
from __future__ import annotations

import stat
from pathlib import PurePosixPath

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyfakefs import fake_file, fake_filesystem, fake_open, fake_os, helpers

import faultsim.inprocess.fs as fsmod
from faultsim.core.trace import Tracer

SB = "/sb"
NAMES = ["/sb/a", "/sb/b", "/sb/c", "/sb/d", "/sb/d/a", "/sb/d/b", "/sb/d/e", "/sb/d/e/a",
         "/sb/l", "/sb/l/a", "/out/a"]
ODD = ["/sb/a/", "/sb/./a", "/sb/d/../b", "sb/a", "/sb//c", "/sb", "/", "/sb/d/e/../a"]
PATHS = st.one_of(st.sampled_from(NAMES), st.sampled_from(NAMES[:5]), st.sampled_from(ODD),
                  st.sampled_from(NAMES).map(PurePosixPath),
                  st.sampled_from(NAMES[:4]).map(str.encode))
# every sequence starts from files and a folder to move (else few renames would find any)
SETUP = [("mkdir", "/sb/d"), ("write", "/sb/a", b"a"), ("write", "/sb/b", b"b"),
         ("write", "/sb/d/a", b"da"), ("mkdir", "/sb/d/e"), ("write", "/sb/d/e/a", b"dea")]
RENAMES = st.tuples(st.sampled_from(["rename", "replace"]), PATHS, PATHS)
FILES = st.sampled_from(["/sb/a", "/sb/b", "/sb/c", "/sb/d/a", "/sb/d/b"])
FILE_OVER_FILE = st.tuples(st.sampled_from(["rename", "replace"]),  # the short way's case
                           st.one_of(FILES, FILES.map(PurePosixPath)), FILES)
FOLDERS = st.sampled_from(["/sb/d", "/sb/d/e", "/sb/c", "/sb/l"])
FOLDER_MOVES = st.tuples(st.sampled_from(["rename", "replace"]),  # the paths below move
                         FOLDERS, st.one_of(FOLDERS, st.sampled_from(NAMES)))
OPS = st.one_of(RENAMES, FILE_OVER_FILE, FOLDER_MOVES, st.one_of(
    st.tuples(st.just("write"), st.sampled_from(NAMES), st.binary(max_size=3)),
    st.tuples(st.just("mkdir"), st.sampled_from(NAMES)),
    st.tuples(st.just("symlink"), st.sampled_from(["/sb/d", "/sb/a", "d", "/sb/zz", "/sb/l"]),
              st.sampled_from(NAMES)),
    st.tuples(st.just("link"), st.sampled_from(NAMES), st.sampled_from(NAMES)),
    st.tuples(st.sampled_from(["remove", "rmdir"]), st.sampled_from(NAMES)),
))


def _outcome(call) -> tuple:
    try:
        return ("ok", call())
    except OSError as e:
        return (type(e).__name__, e.errno, e.filename, e.filename2)
    except (TypeError, ValueError) as e:
        return (type(e).__name__, str(e))


def _tree(fs) -> list:
    out = []

    def walk(folder, path):
        for name in sorted(folder.entries):
            entry = folder.entries[name]
            mode = entry.st_mode
            item = (f"{path}/{name}", stat.S_IFMT(mode), entry.st_ino, entry.st_nlink)
            if stat.S_ISDIR(mode):
                out.append(item)
                walk(entry, f"{path}/{name}")
            else:
                out.append(item + (entry.byte_contents,))

    walk(fs.root, "")
    return out


def _long_path(obj) -> str | None:
    """A path the long way: up the parents, every step checked (what `_path_of` gives)."""
    names, node = [], obj
    while True:
        ref = node.parent_dir
        parent = ref() if callable(ref) else ref
        if parent is None:
            return None if node is obj else "/" + "/".join(reversed(names))
        if parent.entries.get(node.name) is not node:
            return None
        names.append(node.name)
        node = parent


def _run(ops, short: bool, setup: int = 0) -> dict:
    fsmod.SHORT_RENAME = short
    fs = fake_filesystem.FakeFilesystem()
    os_ = fake_os.FakeOsModule(fs)
    opener = fake_open.FakeFileOpen(fs)
    fs.create_dir(SB)
    fs.create_dir("/out")
    tracer = Tracer()
    ip = fsmod.FsInterposer(fs, SB, tracer)
    seen: list = []  # every object ever in the tree: its remembered path is checked
    results, paths = [], []

    def write(path, data):
        with opener(path, "wb") as f:
            f.write(data)

    run = {"write": write, "mkdir": os_.mkdir, "symlink": os_.symlink, "link": os_.link,
           "rename": os_.rename, "replace": os_.replace, "remove": os_.remove,
           "rmdir": os_.rmdir}
    with ip:
        for kind, *args in ops[:setup]:  # the state the run starts from: not its touches
            run[kind](*args)
        ip.start_tracking("a")
        for kind, *args in ops[setup:]:
            results.append(_outcome(lambda: run[kind](*args)))
            ip.tracking = False  # the checks' own lookups are not the run's first touches
            for path in NAMES:  # the lookup caches agree with pyfakefs's own answers
                for link in (False, True):
                    assert _outcome(lambda: fs.exists(path, check_link=link)) == \
                        _outcome(lambda: fakefs_exists(fs, path, link)), (path, ops)
            stack = [fs.root]
            while stack:
                folder = stack.pop()
                for entry in list(folder.entries.values()):
                    if not any(entry is s for s in seen):
                        seen.append(entry)
                    if isinstance(entry, fake_file.FakeDirectory):
                        stack.append(entry)
            paths.append([fsmod._path_of(obj) for obj in seen])
            assert paths[-1] == [_long_path(obj) for obj in seen], ops
            ip.tracking = True
        ip.stop_tracking()
    return {"results": results, "tree": _tree(fs), "paths": paths,
            "events": [(e.kind, e.subject, e.detail) for e in tracer.events],
            "first_content": list(ip.first_content.items()),
            "first_presence": list(ip.first_presence.items()), "listed": ip.listed,
            "watch": ip.watch_state, "escapes": ip.escapes,
            "last_written": ip.durability.last_written}


def fakefs_exists(fs, path, check_link):
    return fake_filesystem.FakeFilesystem.exists.__wrapped__(fs, path, check_link)


@pytest.fixture
def as_root():
    """The short way is for root, whom pyfakefs checks no permission for (faultsim's
    sandbox runs as the user who runs it: CI's may not be root)."""
    helpers.set_uid(0)
    try:
        yield
    finally:
        helpers.reset_ids()
        fsmod.SHORT_RENAME = True


@pytest.fixture
def taken(as_root, monkeypatch) -> list:
    """What each call of the short way's case finder found (None: the long way)."""
    fsmod.install()
    found, out = fsmod._rename_in_place, []
    monkeypatch.setattr(fsmod, "_rename_in_place", lambda *a: out.append(found(*a)) or out[-1])
    return out


def test_the_short_way_gives_the_long_ways_answers(taken):

    @settings(max_examples=300, deadline=None, derandomize=True, database=None,
              suppress_health_check=list(HealthCheck))
    @given(st.lists(OPS, min_size=2, max_size=12))
    def check(ops):
        ops = SETUP + ops
        assert _run(ops, True, len(SETUP)) == _run(ops, False, len(SETUP)), ops

    check()
    short = sum(1 for t in taken if t is not None)
    assert short >= 50, f"the short way was taken {short} times: nothing was compared"
    assert len(taken) - short >= 100  # and the cases it leaves to the long way came up


def test_an_atomic_write_takes_the_short_way(taken):
    """The case it is for: a temp file moved over the file it replaces, by `Path`."""
    ops = [("mkdir", "/sb/d"), ("write", "/sb/d/a", b"1"), ("write", "/sb/d/b", b"2"),
           ("replace", PurePosixPath("/sb/d/b"), PurePosixPath("/sb/d/a")),
           ("write", "/sb/d/b", b"3"), ("rename", "/sb/d/b", "/sb/c")]
    long = _run(ops, short=False)
    assert taken == []  # off: never asked
    assert _run(ops, short=True) == long
    assert [t is not None for t in taken] == [True, True]
    renames = [e for e in long["events"] if e[0] == "fs.rename"]
    assert renames == [("fs.rename", "d/a", "from d/b"), ("fs.rename", "c", "from d/b")]
    assert long["tree"][-3:] == [("/sb/c", stat.S_IFREG, 7, 1, b"3"),
                                 ("/sb/d", stat.S_IFDIR, 4, 3),
                                 ("/sb/d/a", stat.S_IFREG, 6, 1, b"2")]
