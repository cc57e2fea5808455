"""The pyfakefs interposer: every mutation under the sandbox becomes one trace event, a kill
can land before or inside a write, nothing lands after the kill, snapshots round-trip and
fsyncs feed the durability record of the power model."""
from __future__ import annotations

import ast
import functools
import importlib.util
import inspect
import io
import os
import shutil
import tempfile
from pathlib import Path

import pytest
from pyfakefs import fake_file, fake_filesystem, fake_open, fake_os, fake_path
from pyfakefs.fake_filesystem_unittest import Patcher

import faultsim.inprocess.fs as fsmod
from faultsim.inprocess.fs import DIR, FsInterposer, install
from faultsim.core.trace import Killed, PendingWrite, Tracer

from conftest import SB, dir_fsync  # the shared sandbox fixture comes from conftest too


def kinds(tracer: Tracer) -> list[tuple[str, str]]:
    return [(e.kind, e.subject) for e in tracer.events]


class Tear:
    """Tracer policy: tear the first content write after `k` bytes of its region."""

    def __init__(self, k: int) -> None:
        self.k = k
        self.writes: list[PendingWrite] = []
        self.events = []

    def before_write(self, tracer, write):
        self.writes.append(write)
        return write.torn(self.k)

    def after(self, tracer, event):
        self.events.append(event)


# -- the contract with pyfakefs --------------------------------------------------------------

def _class_defs(module, cls: str) -> dict[str, ast.FunctionDef]:
    tree = ast.parse(inspect.getsource(module))
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == cls:
            out: dict[str, ast.FunctionDef] = {}
            for item in node.body:
                if isinstance(item, ast.FunctionDef):
                    # a property and its setter share a name: keep both decorators
                    prev = out.get(item.name)
                    if prev is not None:
                        item.decorator_list = prev.decorator_list + item.decorator_list
                    out[item.name] = item
            return out
    raise AssertionError(f"class {cls} is gone from {module.__name__}")


def _params(fn: ast.FunctionDef) -> list[str]:
    return [a.arg for a in fn.args.args]


def _decorators(fn: ast.FunctionDef) -> set[str]:
    return {ast.unparse(d) for d in fn.decorator_list}


def test_pyfakefs_internals_are_where_we_hook():
    """pyfakefs has no hook API: the hooks wrap its internals by name. The originals are read
    from pyfakefs's own source (so this holds whatever was installed earlier), then the
    installed attributes are checked to be faultsim's."""
    import pyfakefs

    assert pyfakefs.__version__.startswith("6.3."), pyfakefs.__version__

    ff = _class_defs(fake_file, "FakeFile")
    assert _params(ff["set_initial_contents"])[:2] == ["self", "contents"]
    assert {"property", "size.setter"} <= _decorators(ff["size"])
    assert "_encode_contents" in ff

    fd = _class_defs(fake_file, "FakeDirectory")
    assert _params(fd["add_entry"])[:2] == ["self", "path_object"]
    assert _params(fd["remove_entry"])[:3] == ["self", "pathname_name", "recursive"]

    fsdefs = _class_defs(fake_filesystem, "FakeFilesystem")
    assert _params(fsdefs["rename"])[:4] == ["self", "old_file_path", "new_file_path",
                                             "force_replace"]
    assert _params(fsdefs["stat"])[:3] == ["self", "entry_path", "follow_symlinks"]
    for name in ("absnormpath", "normpath", "_path_components", "splitpath", "splitdrive",
                 "resolve_path", "resolve", "get_open_file", "remove_object", "create_dir",
                 "create_file"):
        assert name in fsdefs, name

    osdefs = _class_defs(fake_os, "FakeOsModule")
    assert _params(osdefs["fsync"])[:2] == ["self", "fd"]
    assert _params(osdefs["fdatasync"])[:2] == ["self", "fd"]
    for name in ("mkdir", "makedirs", "remove", "unlink", "rmdir"):  # refused outside
        assert _params(osdefs[name])[:2] in (["self", "path"], ["self", "dir_name"],
                                             ["self", "name"]), name
    real_dir = _class_defs(fake_file, "FakeDirectoryFromRealDirectory")
    assert "property" in _decorators(real_dir["entries"])  # lazily listed real folders
    # appends.py: a flush that only extends a file, and the file's bytes kept apart
    wrapper = _class_defs(fake_file, "FakeFileWrapper")
    assert _params(wrapper["flush"]) == ["self"]
    for name in ("update_flush_pos", "_flush_related_files", "_check_open_file", "_is_open"):
        assert _params(wrapper[name]) == ["self"], name
    assert _params(ff["is_large_file"]) == ["self"]
    assert _params(fsdefs["change_disk_usage"])[:4] == ["self", "usage_change", "file_path",
                                                         "st_dev"]

    call = _class_defs(fake_open, "FakeFileOpen")["call"]
    assert _params(call)[:3] == ["self", "file_", "mode"]
    assert "open_modes" in _params(call)
    assert _params(_class_defs(fake_path, "FakePathModule")["getsize"])[:2] == ["self", "path"]

    # attributes the interposer reads on live objects
    fs = fake_filesystem.FakeFilesystem()
    assert isinstance(fs.open_files, list) and isinstance(fs._free_fd_heap, list)
    assert hasattr(fs, "_is_windows_fs") and hasattr(fs, "_is_macos") and hasattr(fs, "cwd")
    f = fs.create_file("/x", contents=b"abc")
    assert f._byte_contents == b"abc"
    assert isinstance(f.epoch, int) and f._side_effect is None
    with fake_open.FakeFileOpen(fs)("/x", "a") as handle:
        assert (handle._file_epoch, handle._binary) == (f.epoch, False)
        assert isinstance(handle._encoding, str)
        assert handle.allow_update and not handle.is_stream and handle.open_modes.append
        assert handle._io._bytestream.getvalue() == b"abc"
    assert isinstance(f.st_ino, int) and f.parent_dir is not None
    assert f.path == "/x" and f.name == "x"
    assert fs.resolve("/").entries["x"] is f

    # after install(): faultsim's wrappers are in place
    install()
    ours = "faultsim.inprocess.fs"
    assert fake_file.FakeFile.set_initial_contents.__module__ == ours
    size = inspect.getattr_static(fake_file.FakeFile, "size")
    assert isinstance(size, property) and size.fset is not None
    assert size.fset.__module__ == ours and size.fget.__module__ == "pyfakefs.fake_file"
    assert fake_file.FakeDirectory.add_entry.__module__ == ours
    assert fake_file.FakeDirectory.remove_entry.__module__ == ours
    assert fake_filesystem.FakeFilesystem.rename.__module__ == ours
    for name in ("mkdir", "makedirs", "remove", "unlink", "rmdir"):
        assert getattr(fake_os.FakeOsModule, name).__module__ == ours, name
    entries = inspect.getattr_static(fake_file.FakeDirectoryFromRealDirectory, "entries")
    assert entries.fget.__module__ == ours
    assert fake_filesystem.FakeFilesystem.stat.__module__ == ours
    assert fake_os.FakeOsModule.fsync.__module__ == ours
    assert fake_os.FakeOsModule.fdatasync.__module__ == ours
    assert fake_open.FakeFileOpen.call.__module__ == ours
    assert fake_path.FakePathModule.getsize.__module__ == ours
    for name in ("absnormpath", "normpath", "_path_components", "splitpath", "splitdrive",
                 "resolve_path"):
        wrapper = getattr(fake_filesystem.FakeFilesystem, name)
        assert wrapper.__module__ == ours, name
        assert wrapper.__wrapped__.__module__ == "pyfakefs.fake_filesystem", name
        assert wrapper.__wrapped__.__name__ == name
    for cls in (fake_file.FakeBinaryFileWrapper, fake_file.FakeTextFileWrapper):
        assert "__getattribute__" not in cls.__dict__, cls  # theirs removed: the generic one
        assert type(cls.__dict__["read"]).__module__ == ours, cls  # a forward
        assert type(cls.__dict__["write"]).__module__ == ours, cls
    appends = "faultsim.inprocess.appends"
    assert fake_file.FakeFileWrapper.flush.__module__ == appends
    assert fake_file.FakeFileWrapper.flush.__wrapped__.__module__ == "pyfakefs.fake_file"
    assert fake_file.FakeFile.is_large_file.__module__ == appends
    assert type(inspect.getattr_static(fake_file.FakeFile, "_byte_contents")).__module__ \
        == appends
    from pyfakefs import fake_io, fake_pathlib, helpers

    assert "_bytestream" in inspect.getsource(helpers.TextBufferIO.__init__)  # appends.py

    skipped = helpers.is_called_from_skipped_module
    assert skipped.__module__ == ours and skipped.__wrapped__.__module__ == "pyfakefs.helpers"
    for module in (fake_io, fake_open, fake_os, fake_path, fake_pathlib):
        assert module.is_called_from_skipped_module is skipped, module
    # installing twice does not wrap twice
    before = fake_filesystem.FakeFilesystem.absnormpath
    install()
    assert fake_filesystem.FakeFilesystem.absnormpath is before


def test_the_skipped_module_check_answers_as_pyfakefs_does(tmp_path):
    """faultsim answers pyfakefs's "is the caller a skipped module?" from code objects
    instead of `traceback.extract_stack`: the same answer for callers in and out of a
    skipped module, directly and a few frames down, and where the caller is too deep."""
    from pyfakefs import helpers

    install()
    ours = helpers.is_called_from_skipped_module
    theirs = ours.__wrapped__
    (tmp_path / "skipme.py").write_text("def call(f, *args):\n    return f(*args)\n")
    # loaded, not imported: nothing of it stays in sys.modules after the test
    spec = importlib.util.spec_from_file_location("skipme", tmp_path / "skipme.py")
    skipme = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(skipme)

    names = {"skipme", "os", "path", "io", "genericpath"}

    def deep(f, n):
        return f(names, True) if n == 0 else deep(f, n - 1)

    cases = {
        "here": lambda f: f(names, True),
        "in skipme": lambda f: skipme.call(f, names, True),
        "under skipme": lambda f: skipme.call(lambda: skipme.call(f, names, True)),
        "case-insensitive": lambda f: skipme.call(f, names, False),
        "no names": lambda f: skipme.call(f, set(), True),
        "skipme far up": lambda f: skipme.call(lambda: deep(f, 6)),
        "skipme four up": lambda f: skipme.call(lambda: deep(f, 2)),
        # called from the standard library (a frame both pass over), from skipme or not
        "stdlib in skipme": lambda f: skipme.call(functools.singledispatch(f), names, True),
        "stdlib here": lambda f: functools.singledispatch(f)(names, True),
    }
    answers = {name: (case(ours), case(theirs)) for name, case in cases.items()}
    assert all(a == b for a, b in answers.values()), answers
    assert answers["in skipme"] == answers["stdlib in skipme"] == (True, True)
    assert answers["here"] == answers["stdlib here"] == (False, False)


def _theirs(wrapper, name):
    """An attribute read on an open file as pyfakefs's own `__getattribute__` of its file
    wrappers answers it (pyfakefs/fake_file.py, FakeBinaryFileWrapper.__getattribute__)."""
    base = fake_file.FakeFileWrapper
    if hasattr(base, name) or name in object.__getattribute__(wrapper, "__dict__"):
        return base.__getattribute__(wrapper, name)
    return type(wrapper).__getattr__(wrapper, name)


def _answer(read):
    """What a read gave, comparable across two reads: a bound method by its function and
    object, a closure pyfakefs makes per read by its name, an error by its type."""
    try:
        value = read()
    except Exception as e:  # noqa: BLE001 - the kind of error is the answer
        return ("raised", type(e))
    if hasattr(value, "__self__") and hasattr(value, "__func__"):
        return ("method", value.__func__, id(value.__self__))
    if callable(value) and getattr(value, "__qualname__", "").count("<locals>"):
        return ("made", value.__qualname__)
    if callable(value) and hasattr(value, "__self__"):  # a C method of the stream
        return ("bound", getattr(value, "__name__", None), id(value.__self__))
    return ("value", value if isinstance(value, (str, int, bool, type(None))) else id(value))


@pytest.mark.parametrize("mode", ["rb", "wb", "ab", "r+b", "r", "w", "a", "r+"])
def test_an_open_files_every_attribute_reads_as_pyfakefs_reads_it(mode):
    """faultsim drops pyfakefs's `__getattribute__` of its file wrappers for the generic
    lookup plus forwards (fs._direct_wrapper_lookup): every name either class or its io
    base has, the instance's own attributes, a name io's data descriptor shadows and one
    no one has read the same both ways, in every mode; and setting an io name behaves as
    the generic way does. (Checked to fail when a forward is left out, `write` giving
    io's method, and when the forwards skip the instance's own values.)"""
    install()
    with Patcher() as patcher:
        patcher.fs.create_file("/f", contents=b"abc\n")
        with open("/f", mode) as f:
            cls = type(f)
            assert cls in (fake_file.FakeBinaryFileWrapper, fake_file.FakeTextFileWrapper)
            names = set(dir(cls)) | set(vars(f)) | {"no_such_name", "_io", "encoding"}
            names -= {n for n in names if n.startswith("__") and n.endswith("__")}
            names -= {n for n in names if n.startswith("_abc")}
            differ = {n: (_answer(lambda: getattr(f, n)), _answer(lambda: _theirs(f, n)))
                      for n in sorted(names)}
            differ = {n: pair for n, pair in differ.items() if pair[0] != pair[1]}
            assert not differ, differ
            # an instance's own value under a forwarded name that no data descriptor of
            # io's holds wins, as in the generic lookup theirs did for it
            f.__dict__["readlines"] = "own"
            assert f.readlines == _theirs(f, "readlines") == "own"
            del f.readlines
            assert _answer(lambda: f.readlines) == _answer(lambda: _theirs(f, "readlines"))
            if "b" not in mode:  # io's read-only data descriptor refuses a set both ways
                with pytest.raises(AttributeError):
                    f.encoding = "latin-1"


def test_a_fake_files_stat_names_read_and_set_its_stat_result_as_pyfakefs_does():
    """faultsim drops FakeFile's `__getattr__` / `__setattr__` for a property per stat name
    (fs._direct_stat_attributes). What theirs did: every stat name set on `stat_result`,
    read from it (the generic lookup failing first); any other name the generic way. Each
    kind of fake file, after the operations a run makes, in every stat name. (Checked to
    fail when a stat name is left without its property: its read raises.)"""
    install()
    assert "__getattr__" not in fake_file.FakeFile.__dict__
    assert "__setattr__" not in fake_file.FakeFile.__dict__
    with Patcher() as patcher:
        patcher.fs.create_file("/d/f", contents=b"abc")
        os.replace("/d/f", "/d/g")
        with open("/d/g", "ab") as f:
            f.write(b"more")
        os.chmod("/d/g", 0o600)
        os.utime("/d/g", (5, 7))
        os.stat("/d/g")
        files = [patcher.fs.get_object("/d/g"), patcher.fs.get_object("/d"),
                 fake_file.FakeNullFile(patcher.fs)]
        for obj in files:
            for name in fake_file.FakeFile.stat_types:
                assert name not in vars(obj), (obj, name)  # never held by an instance
                assert getattr(obj, name) == getattr(obj.stat_result, name), (obj, name)
            obj.st_nlink = 3
            obj.st_mtime = 11.5
            assert obj.stat_result.st_nlink == 3 and obj.stat_result.st_mtime == 11.5
            assert "st_nlink" not in vars(obj) and "st_mtime" not in vars(obj)
            obj.faultsim_probe = 1  # any other name: the instance's own
            assert vars(obj)["faultsim_probe"] == 1
            del obj.faultsim_probe
            with pytest.raises(AttributeError, match="no attribute 'no_such_name'"):
                obj.no_such_name
        assert os.stat("/d/g").st_size == 7 and os.stat("/d/g").st_mode & 0o777 == 0o600


# -- the trace --------------------------------------------------------------------------------

def test_trace_of_common_file_operations(sandbox):
    fs, ip, tracer = sandbox
    with ip:
        with open("/sb/a.tmp", "wb") as f:
            f.write(b"hello")
            f.flush()
            os.fsync(f.fileno())
        os.replace("/sb/a.tmp", "/sb/a")
        dir_fsync(SB)
        os.remove("/sb/a")
        os.mkdir("/sb/d")
        Path("/sb/d/p.txt").write_text("hi")
        Path("/sb/d/p.txt").replace("/sb/p2.txt")
        shutil.move("/sb/p2.txt", "/sb/d/p3.txt")
        with open("/sb/d/p3.txt", "r+b") as f:
            f.truncate()
        fd = os.open("/sb/raw", os.O_WRONLY | os.O_CREAT)
        os.write(fd, b"xyz")
        os.close(fd)
        fd, name = tempfile.mkstemp(dir=SB)
        os.close(fd)
    tmpname = os.path.basename(name)
    assert kinds(tracer) == [
        ("fs.create", "a.tmp"),
        ("fs.write", "a.tmp"),
        ("fs.fsync", "a.tmp"),
        ("fs.rename", "a"),
        ("fs.fsync", "."),
        ("fs.unlink", "a"),
        ("fs.mkdir", "d"),
        ("fs.create", "d/p.txt"),
        ("fs.write", "d/p.txt"),
        ("fs.rename", "p2.txt"),
        ("fs.rename", "d/p3.txt"),
        ("fs.truncate", "d/p3.txt"),
        ("fs.create", "raw"),
        ("fs.write", "raw"),
        ("fs.create", tmpname),
    ]
    ev = tracer.events
    assert [e.index for e in ev] == list(range(1, len(ev) + 1))
    assert ev[1].detail.startswith("0->5 ") and ev[1].size == 5
    assert ev[3].detail == "from a.tmp"
    assert ev[9].detail == "from d/p.txt"
    assert ev[10].detail == "from p2.txt"
    assert ev[11].detail.startswith("2->0")
    assert ev[13].size == 3
    assert ip.escapes == []
    assert ip.snapshot() == {"d": DIR, "d/p3.txt": b"", "raw": b"xyz", tmpname: b""}


def test_flush_that_changes_nothing_is_not_an_event(sandbox):
    fs, ip, tracer = sandbox
    with ip:
        with open("/sb/f", "wb") as f:
            f.write(b"abc")
            f.flush()
            n = len(tracer.events)
            f.flush()
            f.flush()
            assert len(tracer.events) == n
        # closing flushes nothing new either
        assert len(tracer.events) == n
        # rewriting the same bytes in place is no event
        with open("/sb/f", "r+b") as f:
            f.write(b"abc")
    assert kinds(tracer) == [("fs.create", "f"), ("fs.write", "f")]


def test_buffered_writer_flushes_on_its_own_are_separate_writes(sandbox):
    fs, ip, tracer = sandbox
    # two and a half buffers (3.14 made io.DEFAULT_BUFFER_SIZE 128 KiB, from 8 KiB)
    size = io.DEFAULT_BUFFER_SIZE * 5 // 2 // 10 * 10
    data = bytes(range(10)) * (size // 10)
    with ip:
        with open("/sb/big", "wb") as f:
            for i in range(0, len(data), 10):
                f.write(data[i:i + 10])
    writes = [e for e in tracer.events if e.kind == "fs.write"]
    assert len(writes) >= 2  # the buffer filled up before close
    assert all(e.subject == "big" for e in writes)
    lengths = [int(e.detail.split()[0].split("->")[1]) for e in writes]
    assert lengths == sorted(set(lengths)) and lengths[-1] == size
    assert all(n < size for n in lengths[:-1])
    # each event is an append: its size is the bytes it added
    assert sum(e.size for e in writes) == size
    assert ip.snapshot()["big"] == data


def test_fdatasync_is_recorded(sandbox):
    fs, ip, tracer = sandbox
    with ip:
        fd = os.open("/sb/f", os.O_WRONLY | os.O_CREAT)
        os.write(fd, b"q")
        os.fdatasync(fd)
        os.close(fd)
    assert kinds(tracer)[-1] == ("fs.fdatasync", "f")


def test_os_truncate_goes_through_the_size_setter(sandbox):
    fs, ip, tracer = sandbox
    ip.restore({"g": b"hello"})
    with ip:
        os.truncate("/sb/g", 2)
        os.truncate("/sb/g", 2)  # no change: no event
        os.truncate("/sb/g", 4)
    assert [(e.kind, e.subject, e.detail) for e in tracer.events] == [
        ("fs.truncate", "g", "5->2"), ("fs.truncate", "g", "2->4")]
    assert ip.snapshot()["g"] == b"he\0\0"


# -- escapes ---------------------------------------------------------------------------------

def test_operations_outside_the_sandbox_are_refused_and_reported():
    """Refused before they land, with a PermissionError (as subprocess mode refuses them on
    the real disk): in the fake file system too, nothing outside the sandbox changes."""
    real = "/faultsim-interpose-test-elsewhere"
    assert not os.path.exists(real)
    install()
    with Patcher() as patcher:
        patcher.fs.create_dir(SB)
        patcher.fs.create_file("/elsewhere/old", contents="o")  # there before the run
        tracer = Tracer()
        ip = FsInterposer(patcher.fs, SB, tracer)
        with ip:
            for attempt in (lambda: os.mkdir(real),
                            lambda: open(real + "-x", "w"),
                            lambda: os.open("/elsewhere/old", os.O_WRONLY),
                            lambda: os.rename("/elsewhere/old", "/elsewhere/new"),
                            lambda: os.remove("/elsewhere/old"),
                            lambda: os.rename("/elsewhere/old", SB + "/stolen")):
                with pytest.raises(PermissionError, match="outside the sandbox refused"):
                    attempt()
            with open("/sb/inside", "wb") as f:
                f.write(b"i")
        what = [e.rsplit(" (at ", 1)[0] for e in ip.escapes]
        assert what == [f"mkdir {real}", f"open for writing {real}-x",
                        "open for writing /elsewhere/old",
                        "rename /elsewhere/old -> /elsewhere/new", "unlink /elsewhere/old",
                        f"rename /elsewhere/old -> {SB}/stolen"]
        assert all(e.endswith(")") and "test_interpose.py:" in e for e in ip.escapes)
        escapes = [e for e in tracer.events if e.kind == "sandbox.escape"]
        assert len(escapes) == len(ip.escapes)
        # inside the sandbox the trace is unaffected
        assert [(e.kind, e.subject) for e in tracer.events if e.kind.startswith("fs.")] == [
            ("fs.create", "inside"), ("fs.write", "inside")]
        assert not os.path.exists(real) and not os.path.exists(real + "-x")
        assert open("/elsewhere/old").read() == "o"  # unchanged
        assert sorted(os.listdir(SB)) == ["inside"]
    assert not os.path.exists(real)  # and never reached the real one


# -- sealing after a kill ------------------------------------------------------------------

def test_after_kill_nothing_lands(sandbox):
    fs, ip, tracer = sandbox
    ip.restore({"keep": b"k", "dd": DIR})
    with ip:
        f = open("/sb/open", "wb")
        f.write(b"buffered")  # still in the writer's buffer at the kill
        n = len(tracer.events)
        ip.kill()
        f.close()  # the unwinding flushes it: discarded
        # what cleanup code does as the kill unwinds: discarded too, and no event
        with open("/sb/new", "wb") as g:
            g.write(b"data")
        os.rename("/sb/keep", "/sb/kept")
        os.remove("/sb/keep")
        os.mkdir("/sb/m")
        fd = os.open("/sb/keep", os.O_RDONLY)
        os.fsync(fd)  # no durability, no event
        os.close(fd)
    assert len(tracer.events) == n  # nothing after the kill is traced
    assert ip.snapshot() == {"dd": DIR, "keep": b"k", "open": b""}
    assert ip.durability.data.get(fs.resolve("/sb/keep").st_ino) == b"k"


def test_os_write_to_a_file_open_at_the_kill_is_discarded(sandbox):
    fs, ip, tracer = sandbox
    ip.restore({"log": b"a"})
    with ip:
        fd = os.open("/sb/log", os.O_WRONLY | os.O_APPEND)
        ip.kill()
        os.write(fd, b"b")
        os.close(fd)
    assert ip.snapshot() == {"log": b"a"}
    assert tracer.events == []


def test_restore_unseals(sandbox):
    fs, ip, tracer = sandbox
    with ip:
        ip.kill()
        ip.restore({})
        assert not ip.killed
        with open("/sb/f", "wb") as f:
            f.write(b"1")
    assert ip.snapshot() == {"f": b"1"}
    assert kinds(tracer) == [("fs.create", "f"), ("fs.write", "f")]


# -- torn writes -----------------------------------------------------------------------------

def test_torn_write_lands_exactly_k_bytes_then_kills(sandbox):
    fs, ip, tracer = sandbox
    payload = bytes(range(256)) * 4  # 1024 bytes
    policy = Tear(300)
    tracer.policy = policy
    with ip:
        with pytest.raises(Killed, match="inside the write to f"):
            with open("/sb/f", "wb") as f:
                f.write(payload)
        assert ip.killed
        # anything after the torn write is sealed
        os.mkdir("/sb/later")
    assert ip.snapshot() == {"f": payload[:300]}
    assert kinds(tracer) == [("fs.create", "f")]  # the torn write is no completed event
    assert len(policy.writes) == 1
    w = policy.writes[0]
    assert (w.path, w.old, w.new, w.start) == ("f", b"", payload, 0)
    assert not fs.exists("/sb/later")


def test_torn_append_keeps_the_common_prefix(sandbox):
    fs, ip, tracer = sandbox
    ip.restore({"log": b"hello "})
    policy = Tear(3)
    tracer.policy = policy
    with ip:
        with pytest.raises(Killed):
            with open("/sb/log", "ab") as f:
                f.write(b"world!")
    w = policy.writes[0]
    assert w.start == 6 and w.old == b"hello " and w.new == b"hello world!"
    assert ip.snapshot() == {"log": b"hello wor"}


def test_pending_write_start_and_torn():
    w = PendingWrite("p", b"hello ", b"hello world!", apply=lambda b: None)
    assert w.start == 6
    assert w.torn(0) == b"hello "
    assert w.torn(1) == b"hello w"
    assert w.torn(6) == b"hello world!"
    # a long identical prefix (the block comparison) and a difference right after it
    old = b"x" * 10_000 + b"a" + b"z" * 10
    new = b"x" * 10_000 + b"b" + b"z" * 10
    assert PendingWrite("p", old, new, apply=print).start == 10_000
    assert PendingWrite("p", b"x" * 8192, b"x" * 8192 + b"y", apply=print).start == 8192
    assert PendingWrite("p", b"", b"abc", apply=print).start == 0
    # a shrinking rewrite: the old tail beyond the torn point is still there
    shrink = PendingWrite("p", b"0123456789", b"01ab", apply=print)
    assert shrink.start == 2
    assert shrink.torn(1) == b"01a3456789"


def test_torn_in_place_overwrite_keeps_the_old_tail(sandbox):
    """An in-place overwrite of the first 50 bytes of a 100-byte file, killed after 10
    bytes: a process kill leaves B*10 + A*90 (the write only replaced bytes, the file never
    shrinks). PendingWrite.torn keeps the old tail only when old is LONGER than new."""
    fs, ip, tracer = sandbox
    ip.restore({"f": b"A" * 100})
    tracer.policy = Tear(10)
    with ip:
        fd = os.open("/sb/f", os.O_WRONLY)
        try:
            with pytest.raises(Killed):
                os.write(fd, b"B" * 50)
        finally:
            os.close(fd)
    assert ip.snapshot()["f"] == b"B" * 10 + b"A" * 90


# -- snapshots, inodes -----------------------------------------------------------------------

def test_snapshot_restore_round_trip_is_untraced(sandbox):
    fs, ip, tracer = sandbox
    with ip:
        os.makedirs("/sb/a/b")
        os.mkdir("/sb/empty")
        with open("/sb/a/b/f", "wb") as f:
            f.write(b"x")
        with open("/sb/top", "wb") as f:
            f.write(b"\0\xff")
        snap = ip.snapshot()
        assert snap == {"a": DIR, "a/b": DIR, "a/b/f": b"x", "empty": DIR, "top": b"\0\xff"}
        n = len(tracer.events)
        ip.restore({"z": b"1", "deep/er/g": b"2"})
        assert ip.snapshot() == {"deep": DIR, "deep/er": DIR, "deep/er/g": b"2", "z": b"1"}
        ip.restore(snap)
        assert ip.snapshot() == snap
        ip.restore({})
        assert ip.snapshot() == {}
        assert len(tracer.events) == n
    assert fs.exists(SB)  # restore empties the sandbox, never removes it


def test_inodes_follow_a_file_across_a_rename(sandbox):
    fs, ip, tracer = sandbox
    with ip:
        os.mkdir("/sb/d")
        with open("/sb/d/f", "wb") as f:
            f.write(b"1")
        before = ip.inodes()
        os.rename("/sb/d/f", "/sb/g")
        after = ip.inodes()
        with open("/sb/d/f", "wb") as f:  # a new file under the old name
            f.write(b"2")
        again = ip.inodes()
    assert set(before) == {"d", "d/f"} and set(after) == {"d", "g"}
    assert after["g"] == before["d/f"]
    assert after["d"] == before["d"]
    assert again["d/f"] != before["d/f"]
    assert len(set(again.values())) == len(again)


# -- durability --------------------------------------------------------------------------------

def test_durability_follows_fsync(sandbox):
    fs, ip, tracer = sandbox
    ip.restore({"f": b"old", "sub": DIR})
    with ip:
        ip.mark_all_durable()
        ino = ip.inodes()["f"]
        d = ip.durability
        assert d.data[ino] == b"old"
        assert d.root == fs.resolve(SB).st_ino
        assert d.entries[d.root] == {"f": ino, "sub": ip.inodes()["sub"]}
        assert ip.inodes()["sub"] in d.dirs
        with open("/sb/f", "wb") as f:
            f.write(b"new")
        assert ip.durability.data[ino] == b"old"
        assert ip.durability.last_written == ["f"]
        with open("/sb/f", "r+b") as f:
            os.fsync(f.fileno())
        assert ip.durability.data[ino] == b"new"
        assert ip.durability.last_written == []
        # an fsync before flush syncs what reached the file, not the writer's buffer
        with open("/sb/f", "ab") as f:
            f.write(b"+")
            os.fsync(f.fileno())
            assert ip.durability.data[ino] == b"new"
        # a directory fsync records its entries by inode
        with open("/sb/h", "wb") as f:
            f.write(b"h")
        os.mkdir("/sb/newdir")
        assert "h" not in ip.durability.entries[d.root]
        dir_fsync(SB)
        inodes = ip.inodes()
        assert ip.durability.entries[d.root] == {n: inodes[n] for n in ("f", "h", "newdir",
                                                                        "sub")}
        assert inodes["newdir"] in ip.durability.dirs
        assert inodes["h"] not in ip.durability.data  # its name is durable, its data is not


# -- the watched file --------------------------------------------------------------------------

def _watch(sandbox, action, existing=True) -> tuple:
    fs, ip, tracer = sandbox
    ip.restore({"x.tmp": b"old", "other": b"o"} if existing else {"other": b"o"})
    with ip:
        ip.start_tracking("x.tmp")
        action()
        ip.stop_tracking()
    presence = ip.first_presence.get("x.tmp")
    if "." in ip.listed:
        presence = "listed"
    return ip.watch_state, presence


def _open_close(path, mode):
    return lambda: open(path, mode).close()


@pytest.mark.parametrize("action, content, presence", [
    (_open_close("/sb/x.tmp", "wb"), "destroyed", "destroyed"),
    (lambda: os.close(os.open("/sb/x.tmp", os.O_WRONLY | os.O_TRUNC)), "destroyed",
     "observed"),  # no O_CREAT: it fails if the file is not there
    (lambda: os.close(os.open("/sb/x.tmp", os.O_WRONLY | os.O_CREAT | os.O_TRUNC)),
     "destroyed", "observed"),  # conservative: pyfakefs's os.open checks existence first
    (_open_close("/sb/x.tmp", "rb"), "observed", "observed"),
    (lambda: Path("/sb/x.tmp").read_text(), "observed", "observed"),
    (lambda: os.stat("/sb/x.tmp"), "observed", "observed"),
    (lambda: os.path.getsize("/sb/x.tmp"), "observed", "observed"),
    (lambda: os.path.getmtime("/sb/x.tmp"), "observed", "observed"),
    (lambda: os.replace("/sb/other", "/sb/x.tmp"), "destroyed", "destroyed"),
    (lambda: shutil.move("/sb/other", "/sb/x.tmp"), "destroyed", "observed"),  # it asks
    (lambda: os.rename("/sb/x.tmp", "/sb/y"), "observed", "observed"),
    (lambda: os.remove("/sb/x.tmp"), "destroyed", "observed"),
    (lambda: os.path.exists("/sb/x.tmp"), None, "observed"),
    (lambda: os.path.isfile("/sb/x.tmp"), None, "observed"),
    (lambda: os.listdir("/sb"), None, "listed"),
    (lambda: list(os.scandir("/sb")), None, "listed"),
    (_open_close("/sb/other", "rb"), None, None),
], ids=["open-wb", "os.open-trunc", "os.open-creat-trunc", "open-rb", "read_text", "stat",
        "getsize", "getmtime", "replace-over", "move-over", "rename-away", "remove", "exists",
        "isfile", "listdir", "scandir", "other-file"])
def test_watch_first_touch(sandbox, action, content, presence):
    assert _watch(sandbox, action) == (content, presence)


def test_watch_keeps_the_first_touch(sandbox):
    def read_then_truncate():
        assert os.path.exists("/sb/x.tmp")
        open("/sb/x.tmp", "rb").close()
        open("/sb/x.tmp", "wb").close()

    assert _watch(sandbox, read_then_truncate) == ("observed", "observed")


def test_watch_relative_path_and_nonexistent_file(sandbox):
    def relative():
        os.chdir(SB)
        open("x.tmp", "wb").close()

    assert _watch(sandbox, relative, existing=False) == ("destroyed", "destroyed")


def test_nothing_is_tracked_unless_asked(sandbox):
    fs, ip, tracer = sandbox
    ip.restore({"x.tmp": b"1"})
    with ip:
        open("/sb/x.tmp", "rb").close()
        os.remove("/sb/x.tmp")
    assert ip.first_content == {} and ip.first_presence == {} and ip.watch_state is None


# -- memoised path functions -----------------------------------------------------------------

def _cache(fs) -> dict:
    return fs.__dict__.get("_faultsim_paths") or {}


def test_memoised_path_functions_only_while_active(sandbox):
    fs, ip, tracer = sandbox
    assert fs.absnormpath("/sb/./q/../outside") == "/sb/outside"
    assert fs.resolve_path("/sb/outside2") == "/sb/outside2"
    keys = {k[1] for k in _cache(fs)}
    assert "/sb/./q/../outside" not in keys and "/sb/outside2" not in keys
    with ip:
        assert fs.absnormpath("/sb/./q/../inside") == "/sb/inside"
        assert fs.resolve_path("/sb/inside2") == "/sb/inside2"
        assert fs.splitpath("/sb/a/b") == fs.splitpath.__func__.__wrapped__(fs, "/sb/a/b")
        comps = fs._path_components("/sb/a/b")
        comps.append("mutated")  # a cached list is handed out as a copy
        assert fs._path_components("/sb/a/b") == ["sb", "a", "b"]
    cache = _cache(fs)
    assert ("absnormpath", "/sb/./q/../inside") in {k[:2] for k in cache}
    assert "/sb/inside2" in fs.__dict__["_faultsim_tree"]["resolve"]
    n = len(cache)
    fs.absnormpath("/sb/after")
    assert len(_cache(fs)) == n


def test_memoised_absnormpath_follows_cwd(sandbox):
    fs, ip, tracer = sandbox
    fs.create_dir("/sb/one")
    fs.create_dir("/sb/two")
    with ip:
        os.chdir("/sb/one")
        assert fs.absnormpath("f") == "/sb/one/f"
        os.chdir("/sb/two")
        assert fs.absnormpath("f") == "/sb/two/f"


def test_rename_and_remove_invalidate_resolve_path(sandbox):
    fs, ip, tracer = sandbox
    fs.create_file("/sb/d1/f", contents=b"1")
    fs.create_file("/sb/d2/f", contents=b"2")
    with ip:
        # symlink-free: resolution is the normalised path, before and after a dir rename
        assert fs.resolve_path("/sb/d1/f") == "/sb/d1/f"
        os.rename("/sb/d1", "/sb/d0")
        assert fs.resolve_path("/sb/d0/f") == "/sb/d0/f"
        assert fs.resolve_path("/sb/d1/f") == "/sb/d1/f"
        assert not os.path.exists("/sb/d1/f")
        # with links, the answer depends on the tree: a rename must invalidate the memo
        os.symlink("/sb/d0", "/sb/link")
        os.symlink("/sb/d2", "/sb/link2")
        assert fs.resolve_path("/sb/link/f") == "/sb/d0/f"
        os.replace("/sb/link2", "/sb/link")
        assert fs.resolve_path("/sb/link/f") == "/sb/d2/f"
        assert open("/sb/link/f", "rb").read() == b"2"
        os.remove("/sb/link")
        assert fs.resolve_path("/sb/link/f") == "/sb/link/f"
        os.symlink("/sb/d0", "/sb/link")
        assert fs.resolve_path("/sb/link/f") == "/sb/d0/f"
        # a relative link inside a directory that is renamed away
        os.mkdir("/sb/dir")
        os.symlink("../d0", "/sb/dir/l")
        assert fs.resolve_path("/sb/dir/l/f") == "/sb/d0/f"
        os.rename("/sb/dir", "/sb/dirx")
        assert fs.resolve_path("/sb/dir/l/f") == "/sb/dir/l/f"
        assert fs.resolve_path("/sb/dirx/l/f") == "/sb/d0/f"


def test_a_path_object_is_looked_up_as_its_string(sandbox):
    """`open(path)` with a `Path` (how agents name files) resolved it the long way on every
    call: the lookups were memoised for strings only. A path object now finds what its
    string cached, with the long way's answers, links and their changes included; what
    gives no string (bytes, None, a descriptor) is answered by pyfakefs as before."""
    fs, ip, tracer = sandbox
    long_resolve = fake_filesystem.FakeFilesystem.resolve_path.__wrapped__
    fs.create_file("/sb/d0/f", contents=b"0")
    fs.create_file("/sb/d2/f", contents=b"2")
    with ip:
        P = type(Path("/sb"))  # pyfakefs's own Path class while it is active
        resolved = fs.__dict__["_faultsim_tree"]["resolve"]
        assert fs.resolve_path(P("/sb/d0/f")) == "/sb/d0/f" == long_resolve(fs, "/sb/d0/f")
        assert "/sb/d0/f" in resolved  # cached under its string: the next lookup is one
        assert fs.exists(P("/sb/d0/f")) and not fs.exists(P("/sb/d1/f"))
        assert ("/sb/d0/f", False) in fs.__dict__["_faultsim_tree"]["exists"]
        os.symlink("/sb/d0", "/sb/link")
        os.symlink("/sb/nowhere", "/sb/dangling")
        long_exists = fake_filesystem.FakeFilesystem.exists.__wrapped__
        for name in ("/sb/link/f", "/sb/dangling", "/sb/link", "/sb/d1/f", "/sb/d0/f/x"):
            for check_link in (False, True):
                expected = long_exists(fs, name, check_link)
                assert fs.exists(P(name), check_link) == expected, (name, check_link)
                assert fs.exists(name, check_link) == expected, (name, check_link)
        assert [fs.exists(P(n)) for n in ("/sb/link/f", "/sb/dangling")] == [True, False]
        assert fs.resolve_path(P("/sb/link/f")) == "/sb/d0/f" == long_resolve(fs, "/sb/link/f")
        os.remove("/sb/link")
        os.symlink("/sb/d2", "/sb/link")  # a changed link: the cache follows it
        assert fs.resolve_path(P("/sb/link/f")) == "/sb/d2/f"
        assert open(P("/sb/link/f"), "rb").read() == b"2"
        assert fs.resolve_path(b"/sb/d0/f") == long_resolve(fs, b"/sb/d0/f")
        with pytest.raises(TypeError) as long_way:
            long_resolve(fs, None)
        with pytest.raises(TypeError, match=str(long_way.value)):
            fs.resolve_path(None)
        with open("/sb/d0/f", "rb") as f:
            assert fs.resolve_path(f.fileno(), allow_fd=True) == "/sb/d0/f"


def test_only_one_interposer_at_a_time(sandbox):
    fs, ip, tracer = sandbox
    other = FsInterposer(fs, SB, Tracer())
    with ip:
        with pytest.raises(RuntimeError, match="already active"):
            other.__enter__()
        assert fsmod._active is ip
    assert fsmod._active is None
    with other:
        open("/sb/f", "wb").close()
    assert other.tracer.events and not tracer.events


def test_write_to_an_unlinked_open_file_is_not_a_write_to_its_old_name(sandbox):
    """A file unlinked while open is no longer in the tree: its writes reach no name, so
    they are no trace event (and never a write to whatever file later takes the name).
    `_content` means to skip such objects (`_rel_of`: "an object not (or no longer) in the
    tree"; `obj.parent_dir is not None`), but pyfakefs 6.3 keeps `parent_dir` (a weakref)
    and `path` on a removed entry, so the write is attributed to the old name."""
    fs, ip, tracer = sandbox
    with ip:
        f = open("/sb/f", "wb")
        os.remove("/sb/f")
        f.write(b"orphan")
        f.close()
        with open("/sb/f", "wb") as g:
            g.write(b"the new f")
    assert kinds(tracer) == [("fs.create", "f"), ("fs.unlink", "f"),
                             ("fs.create", "f"), ("fs.write", "f")]
    assert ip.snapshot() == {"f": b"the new f"}


def test_a_symlink_loop_does_not_exist_as_on_a_disk(sandbox):
    """A path through a symlink loop does not exist (`os.path.exists` is False on a disk and
    in pyfakefs); faultsim's cached lookup raised ELOOP for it instead, so an agent that
    looked before it wrote died of a loop a real run never sees."""
    fs, ip, tracer = sandbox
    with ip:
        os.symlink("/sb/loop", "/sb/loop")
        for _ in range(2):  # the second time from the cache, if it kept one
            assert os.path.exists("/sb/loop") is False
            assert os.path.lexists("/sb/loop") is True
            assert os.path.exists("/sb/loop/x") is False
    long_exists = fake_filesystem.FakeFilesystem.exists.__wrapped__
    assert long_exists(fs, "/sb/loop") is False
