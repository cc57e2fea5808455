"""File-system interposition over pyfakefs: every mutation under the sandbox becomes a
trace event, a kill can land before or inside it, and after a kill nothing more lands.

pyfakefs has no hook API; these hooks wrap a handful of its internals (pinned to 6.3.x,
guarded by tests/test_interpose.py::test_pyfakefs_internals_are_where_we_hook):

- `FakeFile.set_initial_contents`: every byte that reaches a fake file (flush, close,
  `os.write`, truncate-on-open, a buffered writer flushing a full buffer on its own);
- `FakeFile.size` (setter): `truncate()`;
- `FakeDirectory.add_entry` / `remove_entry`: create, mkdir, unlink, rmdir;
- `FakeFilesystem.rename`: `os.rename`, `os.replace`, `Path.replace`, `shutil.move`, as one
  event (its inner add/remove are folded into it);
- `FakeOsModule.fsync` / `fdatasync`: no-ops in pyfakefs, recorded here for the power model.
- `FakeFileWrapper.flush`, `FakeFile._byte_contents` (`appends.py`): a flush that only
  extends a file hands over its new bytes (`FsInterposer.appended`), kept apart until read.
- `FakeBinaryFileWrapper` / `FakeTextFileWrapper.__getattribute__` and `FakeFile.__getattr__`
  / `__setattr__`: removed for the generic lookup plus forwarding descriptors and properties,
  the same answers without a Python call per read or set.

The hooks are installed on the classes once, before any `Patcher` is built (so a module
that did `from os import fsync` still gets the hooked function), and do nothing unless an
`FsInterposer` is active.
"""
from __future__ import annotations

import posixpath
from os import PathLike  # the real class, whatever module pyfakefs patches
from stat import S_ISLNK, S_ISREG
from typing import Any

from pyfakefs import fake_file, fake_filesystem, fake_os, helpers as _helpers

from ..interpose import finality
from . import appends
from ..core.crashmodel import DIR, Durability  # what a snapshot and an fsync record
from ..interpose.netguard import call_site
from ..core.trace import Killed, PendingWrite, Tracer, digest

_active: "FsInterposer | None" = None
_UNSEEN = object()
_installed = False
ALLOWED_OUTSIDE = ("/dev/null",)  # as in subprocess mode
# pyfakefs's open-file classes whose lookup faultsim made generic (_direct_wrapper_lookup)
FORWARDING: set[type] = set()

def install() -> None:
    """Install the hooks on pyfakefs's classes, once. Each piece below is one concept and
    patches what it alone needs; none depends on another's order (each captures the
    originals it wraps as it runs, and no two wrap the same attribute)."""
    global _installed
    if _installed:
        return
    appends.install(lambda: _active)  # a flush that only extends a file: O(what it adds)
    _hook_file_contents()
    _hook_directory_entries()
    _hook_rename()
    _hook_fsync()
    _skip_string_conversion()
    _cache_lookups()
    _direct_wrapper_lookup()
    _direct_stat_attributes()
    _fast_skipped_module_check()
    _hook_observations()
    _quiet_real_directories()
    _refuse_outside_on_entry()
    _installed = True


def _replace_everywhere(name: str, theirs: Any, ours: Any) -> None:
    """`ours` for `theirs` in every pyfakefs module that imported it by name."""
    import sys

    for module in list(sys.modules.values()):  # every pyfakefs module that imported it
        if getattr(module, "__name__", "").startswith("pyfakefs") and \
                getattr(module, name, None) is theirs:
            setattr(module, name, ours)


# -- the mutations: each becomes a trace event (FsInterposer), and none lands after a kill --
def _hook_file_contents() -> None:
    """Every byte that reaches a fake file (`set_initial_contents`) and `truncate()` (the
    size setter)."""
    FakeFile = fake_file.FakeFile
    orig_set = FakeFile.set_initial_contents
    orig_size = FakeFile.size

    def set_initial_contents(self, contents):
        finality.refuse_stray("write", self.name)
        ip = _active
        if ip is None or ip.quiet:
            return orig_set(self, contents)
        return ip._content(self, contents, lambda c: orig_set(self, c))

    def resize(self, st_size):
        empty = not self._byte_contents
        orig_size.fset(self, st_size)
        if empty and st_size:  # pyfakefs leaves an empty file's bytes empty when it grows
            self._byte_contents = b"\0" * st_size  # the kernel reads zeros there

    def size_setter(self, st_size):
        finality.refuse_stray("truncate", self.name)
        ip = _active
        if ip is None or ip.quiet:
            return resize(self, st_size)
        return ip._truncate(self, st_size, lambda n: resize(self, n))

    FakeFile.set_initial_contents = set_initial_contents
    FakeFile.size = property(orig_size.fget, size_setter)


def _hook_directory_entries() -> None:
    """Create, mkdir, unlink, rmdir: a directory's entries added and removed."""
    FakeDirectory = fake_file.FakeDirectory
    orig_add, orig_remove = FakeDirectory.add_entry, FakeDirectory.remove_entry

    # The lookup caches learn what a change did once it is done (after a kill it is only
    # recorded, and a refused one changes nothing).
    def add_entry(self, path_object):
        finality.refuse_stray("create", path_object.name)
        try:
            ip = _active
            if ip is None or ip.quiet or ip.nested:
                return orig_add(self, path_object)
            return ip._add(self, path_object, lambda: orig_add(self, path_object))
        finally:
            _changed(self, path_object.name, path_object)

    def remove_entry(self, pathname_name, recursive=True):
        finality.refuse_stray("remove", pathname_name)
        before = self.entries.get(pathname_name)
        try:
            ip = _active
            if ip is None or ip.quiet or ip.nested:
                return orig_remove(self, pathname_name, recursive)
            return ip._remove(self, pathname_name,
                              lambda: orig_remove(self, pathname_name, recursive))
        finally:
            _changed(self, pathname_name, before)

    FakeDirectory.add_entry = add_entry
    FakeDirectory.remove_entry = remove_entry


def _hook_rename() -> None:
    """`os.rename`, `os.replace`, `Path.replace`, `shutil.move`: one event (the add and
    remove inside it are folded into it: `ip.nested`)."""
    FakeFilesystem = fake_filesystem.FakeFilesystem
    orig_rename = _short_rename(FakeFilesystem.rename)

    def rename(self, old_file_path, new_file_path, force_replace=False):
        finality.refuse_stray("rename", old_file_path)
        ip = _active
        if ip is None or ip.quiet or ip.nested:
            return orig_rename(self, old_file_path, new_file_path, force_replace)
        return ip._rename(self, old_file_path, new_file_path,
                          lambda: orig_rename(self, old_file_path, new_file_path, force_replace))

    rename.__wrapped__ = orig_rename
    FakeFilesystem.rename = rename


SHORT_RENAME = True  # off: every rename the long way (tests/test_rename_short_way.py compares)


def _short_rename(long_rename):
    """pyfakefs's rename with the agents' common case taken the short way: a regular file
    moved to a name that is free or holds another regular file (an atomic write's
    `os.replace`), both paths normalised, absolute and with no symlink above them. pyfakefs
    checks every case on every call (directories, links, trailing separators, hard links,
    the parent inside the child), resolving each path again: some 40 µs of an atomic
    write's 190 under faultsim. For this case every one of those checks passes, so the short
    way skips them and makes the same changes through the same calls (`remove_entry` of
    the file replaced, then `_do_rename`), and the same lookups that note what the run
    observed (`exists` of the old path, the new one and its folder, in the long way's
    order; its `isdir` calls touch the same two paths again, which changes no first touch).
    Anything else, or a lookup that fails, goes the long way before anything changed, so
    its answers and errors are pyfakefs's own."""

    def rename(self, old_file_path, new_file_path, force_replace=False):
        short = _rename_in_place(self, old_file_path, new_file_path) if SHORT_RENAME \
            and _active is not None else None
        if short is None:
            return long_rename(self, old_file_path, new_file_path, force_replace)
        old, new, old_dir, old_name, new_dir, new_name, new_folder, replaced = short
        if _active.tracking:  # the lookups of the long way's that note a first touch
            self.exists(old, check_link=True)
            self.exists(new, check_link=True)
            self.exists(new_folder)
        if replaced is not None:  # as `remove_object(new)` does, on the folder it resolves
            new_dir.remove_entry(new_name)
        self._do_rename(old_dir, old_name, new_dir, new_name)

    rename.__wrapped__ = long_rename
    return rename


def _rename_in_place(fs, old_file_path, new_file_path):
    """The short way's case (see `_short_rename`), found by lookups that note nothing and
    change nothing: (old, new, old folder, old name, new folder, new name, the new
    folder's path, the file replaced or None), else None."""
    old = old_file_path if type(old_file_path) is str else _path_string(old_file_path)
    new = new_file_path if type(new_file_path) is str else _path_string(new_file_path)
    if old is None or new is None or fs.is_windows_fs or fs.is_macos \
            or not fs.is_case_sensitive or not _helpers.is_root():
        return None
    # normalised and absolute: no trailing separator, no "." or "..", not the root
    if old == "/" or new == "/" or fs.absnormpath(old) != old or fs.absnormpath(new) != new:
        return None
    dirs = []
    for path in (old, new):
        folder, name = fs.splitpath(path)
        try:
            if not name or fs.resolve_path(folder) != folder:  # a symlink above it
                return None
            obj = fs.get_object_from_normpath(folder)
        except OSError:  # a loop, a missing folder: the long way's error
            return None
        if not isinstance(obj, fake_file.FakeDirectory):
            return None
        dirs.append((obj, name, folder))
    (old_dir, old_name, _), (new_dir, new_name, new_folder) = dirs
    moved = old_dir.entries.get(old_name)
    replaced = new_dir.entries.get(new_name)
    if moved is None or not S_ISREG(moved.st_mode) or old_dir.st_dev != new_dir.st_dev:
        return None
    if replaced is not None and (replaced is moved or not S_ISREG(replaced.st_mode)):
        return None  # a hard link to itself, a folder, a symlink: the long way's cases
    return old, new, old_dir, old_name, new_dir, new_name, new_folder, replaced


def _hook_fsync() -> None:
    """`fsync` and `fdatasync`: no-ops in pyfakefs, recorded for the power model."""
    FakeOsModule = fake_os.FakeOsModule
    orig_fsync, orig_fdatasync = FakeOsModule.fsync, FakeOsModule.fdatasync

    def fsync(self, fd):
        orig_fsync(self, fd)
        ip = _active
        if ip is not None and not ip.quiet:
            ip._fsync(self.filesystem.get_open_file(fd).get_object(), "fsync")

    def fdatasync(self, fd):
        orig_fdatasync(self, fd)
        ip = _active
        if ip is not None and not ip.quiet:
            ip._fsync(self.filesystem.get_open_file(fd).get_object(), "fdatasync")

    FakeOsModule.fsync = fsync
    FakeOsModule.fdatasync = fdatasync


# -- speed: pyfakefs's own work, made cheaper without changing an answer ------------------
def _skip_string_conversion() -> None:
    """pyfakefs converts every path argument with `make_string_path`, which re-runs an
    import statement on each call: a quarter of an agent's time under pyfakefs. Plain
    strings need no conversion."""
    from pyfakefs import fake_scandir, helpers  # noqa: F401  (fake_scandir: loaded to be patched)

    slow = helpers.make_string_path

    def make_string_path(dir_name):
        kind = type(dir_name)
        return dir_name if kind is str or kind is bytes else slow(dir_name)

    _replace_everywhere("make_string_path", slow, make_string_path)


def _cache_lookups() -> None:
    """Path normalising memoised, and the lookups that depend on the tree's names cached
    until a name at or above them changes (`_tree_cache`, `_changed`). `exists` also
    notes what the agent looked at (first touches, while tracking)."""
    from pyfakefs import helpers

    FakeFilesystem = fake_filesystem.FakeFilesystem
    # Why a pyfakefs `os.replace` costs ~1 ms where the disk takes 19 µs: it resolves each
    # path about ten times (exists, lresolve, parent dirs, islink, isdir), and every pass
    # re-normalises the string through ~300 pure-Python calls. These five functions are
    # pure in (path, cwd, OS flavour): memoised while faultsim is active, they halve the
    # cost of every file operation an agent makes.
    for name in ("absnormpath", "normpath", "_path_components", "splitpath", "splitdrive"):
        setattr(FakeFilesystem, name, _memoised(getattr(FakeFilesystem, name), name))
    # `resolve_path` (symlinks, existing components) is pure in the path and the tree's
    # names: memoised per version of the namespace, which every add/remove bumps.
    # Three lookups depend on the tree's names as well: resolving a path, finding the
    # object behind a normalised path (no permission can refuse root, which pyfakefs
    # emulates unless told otherwise) and `exists`. Cached per absolute path, and an entry
    # is dropped when a name at or above it is added or removed.
    orig_resolve_path = FakeFilesystem.resolve_path
    orig_get = FakeFilesystem.get_object_from_normpath
    orig_exists = FakeFilesystem.exists

    def resolve_path(self, file_path, allow_fd=False):
        path = file_path if type(file_path) is str else _path_string(file_path)
        if _active is None or path is None or not path.startswith("/") \
                or not self.is_case_sensitive:
            return orig_resolve_path(self, file_path, allow_fd)
        cache = _tree_cache(self)["resolve"]
        found = cache.get(path)
        if found is None:
            found = orig_resolve_path(self, path, allow_fd)
            if found == path:  # no symlink on the way: only its own prefixes matter
                cache[path] = found
        return found

    def get_object_from_normpath(self, file_path, check_read_perm=True, check_exe_perm=True,
                                 check_owner=False):
        if _active is None or type(file_path) is not str or not file_path.startswith("/") \
                or not helpers.is_root() or not self.is_case_sensitive:
            return orig_get(self, file_path, check_read_perm, check_exe_perm, check_owner)
        cache = _tree_cache(self)["object"]
        found = cache.get(file_path)
        if found is None:
            found = cache[file_path] = orig_get(self, file_path, check_read_perm,
                                                check_exe_perm, check_owner)
        return found

    def exists(self, file_path, check_link=False):
        ip = _active
        if ip is not None and ip.tracking and not isinstance(file_path, int):
            ip._touch(self, file_path, None, "observed")
        path = file_path if type(file_path) is str else _path_string(file_path)
        if ip is None or path is None or not path.startswith("/") \
                or not self.is_case_sensitive:
            return orig_exists(self, file_path, check_link)
        cache = _tree_cache(self)["exists"]
        key = (path, check_link)
        found = cache.get(key)
        if found is None:
            found = orig_exists(self, path, check_link)
            try:  # cached only with no symlink on the way; a loop there is pyfakefs's to answer
                plain = resolve_path(self, path) == path
            except OSError:
                plain = False
            if plain:
                cache[key] = found
        return found

    resolve_path.__wrapped__ = orig_resolve_path
    exists.__wrapped__ = orig_exists
    FakeFilesystem.resolve_path = resolve_path
    FakeFilesystem.get_object_from_normpath = get_object_from_normpath
    FakeFilesystem.exists = exists


def _direct_wrapper_lookup() -> None:
    """An open file's every attribute read, its own methods' `self._io` included, went
    through the wrappers' `__getattribute__` in Python (pyfakefs's, `hasattr(FakeFileWrapper,
    name) or name in self.__dict__`, else `__getattr__`): ~200 calls per atomic write, 9 %
    of a resumed run's profile. That override exists only so that a name io's base class
    has and FakeFileWrapper has not (`read`, `write`, ...) goes to `__getattr__`, which
    forwards it to the file's stream, instead of to io's method. The same answer without a
    Python call per read: the override removed, and each such name shadowed on the wrapper
    class by a `_Forward` descriptor that calls `__getattr__`.

    Why every read gives what theirs gives (tests/test_interpose.py reads every name both
    ways): the lookup is now the generic one, over the same classes plus the forwards.
    - A name FakeFileWrapper has: theirs did the generic lookup; no forward has its name.
    - A name of io's and not of FakeFileWrapper's: theirs gave an instance's own value
      through the generic lookup (where io's data descriptor of that name wins) and else
      `__getattr__`; the forward is a data descriptor that does exactly that, and sets and
      deletes what the generic way would (`_Forward`).
    - Any other name: theirs called `__getattr__`; the generic lookup fails and calls it.
    Left to io, as the type's slots always were: its dunders (`__del__`: a finaliser is
    looked up on the type, never through `__getattribute__`) and ABC's class data
    (`_abc_impl`). The names are read once, after the classes are complete: no hook of
    this module adds a name to FakeFileWrapper (they wrap names it has)."""
    wrapper_class = fake_file.FakeFileWrapper
    for cls in (fake_file.FakeBinaryFileWrapper, fake_file.FakeTextFileWrapper):
        if cls.__dict__.get("__getattribute__") is None:
            continue  # theirs changed shape: their lookup, untouched
        forwarded = [name for name in dir(cls) if not hasattr(wrapper_class, name)
                     and not (name.startswith("__") and name.endswith("__"))
                     and not name.startswith("_abc")]
        del cls.__getattribute__
        for name in forwarded:
            setattr(cls, name, _Forward(cls, name))
        FORWARDING.add(cls)  # unwind._attribute: its reads may run code, as theirs did


def _direct_stat_attributes() -> None:
    """A fake file's `st_mode`, `st_size`, ... were each read by a failed lookup (an
    AttributeError made and dropped) and then `FakeFile.__getattr__` in Python, and every
    attribute set on a fake file, `_byte_contents` and the rest, went through its Python
    `__setattr__`: about two million calls in a 50-step sweep. Both exist only to forward
    the stat names to the file's `stat_result`; a property per stat name does that, and
    every other name takes the generic lookup and set.

    Why every read and set gives what theirs gives: theirs set a stat name on
    `stat_result` always and any other name the generic way; a stat name is now a data
    descriptor of the class that sets it on `stat_result` (the three pyfakefs made
    properties already do, and are kept), and nothing else changed. A stat name was read
    from `stat_result` when the generic lookup failed: an instance never holds one (only
    `__setattr__` could have put it in `__dict__`, and it never did; pyfakefs writes its
    files' `__dict__` directly only for `_filesystem` and `parent_dir`), so it failed
    exactly when the class had no property of that name, which now reads `stat_result`.
    Any other failed read raised AttributeError in theirs, as without `__getattr__`. Done
    only where no subclass of FakeFile defines a stat name or either hook."""
    import operator

    base = fake_file.FakeFile
    names = getattr(base, "stat_types", None)
    if not names or "__getattr__" not in base.__dict__ or "__setattr__" not in base.__dict__:
        return  # theirs changed shape: their hooks, untouched
    stack, subclasses = list(base.__subclasses__()), []
    while stack:
        subclasses.append(stack.pop())
        stack += subclasses[-1].__subclasses__()
    if any(n in sub.__dict__ for sub in subclasses
           for n in (*names, "__getattr__", "__setattr__")):
        return

    def setter(name):
        def set_stat(self, value):
            setattr(self.stat_result, name, value)
        return set_stat

    for name in names:
        if name not in base.__dict__:  # a read in C (attrgetter): no Python frame
            setattr(base, name, property(operator.attrgetter(f"stat_result.{name}"),
                                         setter(name)))
    del base.__getattr__, base.__setattr__


class _Forward:
    """One name of io's on a file wrapper: the instance's own value (or io's data
    descriptor's, as the generic lookup gives it), else the wrapper's `__getattr__`."""

    __slots__ = ("name", "below", "getter", "data")

    def __init__(self, cls: type, name: str) -> None:
        self.name = name
        # what the generic lookup found under this name before the forward shadowed it,
        # its `__get__`, and whether it is a data descriptor (it wins over the instance's
        # own value): fixed, so read once here, not at each `f.write` that comes through
        self.below = next(k.__dict__[name] for k in cls.__mro__ if name in k.__dict__)
        kind = type(self.below)
        self.getter = getattr(kind, "__get__", None)
        self.data = hasattr(kind, "__set__") or hasattr(kind, "__delete__")

    def __get__(self, obj, owner=None):
        if obj is not None and self.name not in obj.__dict__:  # `write`, `read`: the stream's
            return type(obj).__getattr__(obj, self.name)
        if obj is None:  # read on the class: what io's class gives
            return self.below if self.getter is None else self.getter(self.below, None, owner)
        if self.getter is not None and self.data:
            return self.getter(self.below, obj, owner)
        return obj.__dict__[self.name]

    def __set__(self, obj, value) -> None:
        if self.data:
            type(self.below).__set__(self.below, obj, value)
        else:
            obj.__dict__[self.name] = value

    def __delete__(self, obj) -> None:
        if self.data:
            type(self.below).__delete__(self.below, obj)
        elif self.name in obj.__dict__:
            del obj.__dict__[self.name]
        else:
            raise AttributeError(self.name)


def _fast_skipped_module_check() -> None:
    """Each faked call asks whether its caller is a module pyfakefs skips, through
    `traceback.extract_stack(limit=6)`, which also reads each frame's source line from
    linecache: a million calls per pair sweep of a dozen turns. The same question, on the
    same frames, answered from the code objects (the source line is only wanted for the
    open_code case, left to theirs)."""
    import sys

    from pyfakefs import helpers

    slow_skipped = helpers.is_called_from_skipped_module
    stdlib, own, own_tests = helpers.STDLIB_PATH, helpers.PYFAKEFS_PATH, \
        tuple(helpers.PYFAKEFS_TEST_PATHS)

    def is_called_from_skipped_module(skip_names, case_sensitive, check_open_code=False):
        if not skip_names or check_open_code:
            return slow_skipped(skip_names, case_sensitive, check_open_code)

        def starts_with(path, string):
            return path.startswith(string) if case_sensitive else \
                path.lower().startswith(string.lower())

        # theirs looks at six frames: its own (pyfakefs's, never the caller) and five more
        frame, caller = sys._getframe(1), None
        for _ in range(5):
            if frame is None:
                break
            name = frame.f_code.co_filename
            if not name.startswith("<frozen ") and not starts_with(name, stdlib) and (
                    not starts_with(name, own)
                    or any(starts_with(name, path) for path in own_tests)):
                caller = name
                break
            frame = frame.f_back
        if caller:
            module = posixpath.splitext(caller)[0].replace("/", ".")  # os.sep: POSIX
            return any(module == sn or module.endswith("." + sn) for sn in skip_names)
        return False

    is_called_from_skipped_module.__wrapped__ = slow_skipped
    _replace_everywhere("is_called_from_skipped_module", slow_skipped,
                        is_called_from_skipped_module)


# -- what the agent looks at: first touches, for the sweep's memos (while tracking) ------
def _hook_observations() -> None:
    """Opening (and, for writing, refusing a path outside the sandbox before it is looked
    up), stat, getsize, listing a folder, and the other ways to look at a path."""
    from pyfakefs import fake_open, fake_path, fake_scandir

    FakeFilesystem, FakeOsModule = fake_filesystem.FakeFilesystem, fake_os.FakeOsModule
    orig_open_call = fake_open.FakeFileOpen.call
    orig_stat = FakeFilesystem.stat
    orig_getsize = fake_path.FakePathModule.getsize

    orig_listdir = FakeFilesystem.listdir

    def open_call(self, file_, mode="r", *args, **kwargs):
        finality.refuse_stray("open", file_)
        ip = _active
        if ip is not None and not ip.quiet and not ip.killed and not isinstance(file_, int):
            modes = kwargs.get("open_modes")
            if (modes.can_write if modes is not None else any(c in mode for c in "wax+")):
                ip._refuse_outside(self.filesystem, file_)  # before the path is looked up
        if ip is not None and ip.tracking and not isinstance(file_, int):
            modes = kwargs.get("open_modes")
            if modes is not None:
                truncates, creates = modes.truncate, not modes.must_exist
                exclusive = modes.must_not_exist
            else:
                truncates = creates = "w" in mode
                exclusive = "x" in mode
            # Truncating hides the old content; truncating *and* creating also hides
            # whether the file was there (an exclusive create fails if it was).
            content = "destroyed" if truncates and not exclusive else "observed"
            presence = "destroyed" if truncates and creates and not exclusive else "observed"
            ip._touch(self.filesystem, file_, content, presence)
        return orig_open_call(self, file_, mode, *args, **kwargs)

    def stat(self, entry_path, follow_symlinks=True):
        finality.refuse_stray("stat", entry_path)  # nor does it see a later run's files
        ip = _active
        if ip is not None and ip.tracking and not isinstance(entry_path, int):
            ip._touch(self, entry_path, "observed", "observed")
        return orig_stat(self, entry_path, follow_symlinks)

    def getsize(self, path):
        ip = _active
        if ip is not None and ip.tracking:
            ip._touch(self.filesystem, path, "observed", "observed")
        return orig_getsize(self, path)

    def listdir(self, target_directory):
        finality.refuse_stray("list", target_directory)
        ip = _active
        if ip is not None and ip.tracking:
            ip._listed(self, target_directory)
        return orig_listdir(self, target_directory)

    orig_scandir_init = fake_scandir.ScanDirIter.__init__

    def scandir_init(self, filesystem, path=""):  # os.scandir, os.walk, shutil.rmtree
        ip = _active
        if ip is not None and ip.tracking and not isinstance(path, int):
            ip._listed(filesystem, path or filesystem.cwd)
        return orig_scandir_init(self, filesystem, path)

    def observing(func, presence_only, fs_of):
        def wrapper(self, path, *args, **kwargs):
            ip = _active
            if ip is not None and ip.tracking and not isinstance(path, int):
                ip._touch(fs_of(self), path, None if presence_only else "observed",
                          "observed")
            return func(self, path, *args, **kwargs)
        wrapper.__wrapped__ = func
        return wrapper

    # Other ways to look at a path: existence checks, times, access.
    for name in ("isfile", "isdir", "islink", "lexists"):
        if hasattr(FakeFilesystem, name):
            setattr(FakeFilesystem, name,
                    observing(getattr(FakeFilesystem, name), True, lambda fs: fs))
    for name in ("getmtime", "getatime", "getctime"):
        setattr(fake_path.FakePathModule, name,
                observing(getattr(fake_path.FakePathModule, name), False,
                          lambda m: m.filesystem))
    FakeOsModule.access = observing(FakeOsModule.access, False, lambda m: m.filesystem)
    fake_open.FakeFileOpen.call = open_call
    FakeFilesystem.stat = stat
    FakeFilesystem.listdir = listdir
    fake_scandir.ScanDirIter.__init__ = scandir_init
    fake_path.FakePathModule.getsize = getsize


def _quiet_real_directories() -> None:
    """A real directory passed through read-only (sandbox.readable_real_dirs) lists its
    entries on first use: pyfakefs adds them then, which is faultsim's own work, not the
    agent creating files outside the sandbox."""
    orig_real_entries = fake_file.FakeDirectoryFromRealDirectory.entries

    def real_entries(self):
        ip = _active
        if ip is None or self.contents_read:
            return orig_real_entries.fget(self)
        ip.quiet += 1
        try:
            return orig_real_entries.fget(self)
        finally:
            ip.quiet -= 1

    fake_file.FakeDirectoryFromRealDirectory.entries = property(real_entries)


def _refuse_outside_on_entry() -> None:
    """mkdir, makedirs, remove, unlink and rmdir outside the sandbox are refused on entry,
    as subprocess mode refuses them, before pyfakefs's own checks could answer otherwise
    (a missing parent; `os.mkdir` re-raising our refusal as a bare EACCES): the same
    escape, the same words."""
    FakeOsModule = fake_os.FakeOsModule

    def refusing(func, what, only_missing=False):
        def wrapper(self, *args, **kwargs):
            ip = _active
            path = args[0] if args else next(iter(kwargs.values()), None)  # path, name...
            if ip is not None and not ip.quiet and not ip.killed and \
                    path is not None and not isinstance(path, int):
                fs = self.filesystem
                try:
                    full = fs.absnormpath(fs.make_string_path(path))
                except Exception:
                    full = None
                if full is not None and ip.rel(full) is None and not (
                        only_missing and fs.exists(full)):
                    ip._outside(what, full)
            return func(self, *args, **kwargs)
        wrapper.__wrapped__ = func
        return wrapper

    FakeOsModule.mkdir = refusing(FakeOsModule.mkdir, "mkdir")
    FakeOsModule.makedirs = refusing(FakeOsModule.makedirs, "mkdir", only_missing=True)
    FakeOsModule.remove = refusing(FakeOsModule.remove, "unlink")
    FakeOsModule.unlink = refusing(FakeOsModule.unlink, "unlink")
    FakeOsModule.rmdir = refusing(FakeOsModule.rmdir, "rmdir")


def _tree_cache(fs) -> dict:
    caches = fs.__dict__.get("_faultsim_tree")
    if caches is None:
        caches = fs.__dict__["_faultsim_tree"] = {"resolve": {}, "object": {}, "exists": {},
                                                  "folders": {}}
    return caches


def _changed(directory, name, obj) -> None:
    """A name was added to or removed from `directory` (`obj`: what was added, or what
    was there before the removal): keep every cached lookup true.

    Most changes are a file's name coming or going (an atomic write's temp file, its
    rename): then only that path's entries change, in O(1) (it exists now, or not). Paths
    below it matter only when the object has children (a directory moved or removed with
    its contents) and resolutions only when a symlink comes or goes (itself or inside a
    moved directory): only those scan the caches."""
    caches = directory.filesystem.__dict__.get("_faultsim_tree")
    if not caches:
        return
    now = directory.entries.get(name)
    Folder = fake_file.FakeDirectory
    if obj is None or isinstance(obj, Folder) or isinstance(now, Folder):
        caches["folders"].clear()  # a folder came or went: the paths below it moved
    base = "" if directory is directory.filesystem.root else _path_of(directory)
    if base is None:  # a directory no longer in the tree: forget everything
        for kind in ("resolve", "object", "exists", "folders"):
            caches[kind].clear()
        return
    changed = f"{base}/{name}"
    if _reaches_beyond(obj) or (now is not None and _reaches_beyond(now)):
        below = changed + "/"
        for kind in ("resolve", "object", "exists"):
            cache = caches[kind]
            if kind == "exists":
                stale = [k for k in cache if k[0] == changed or k[0].startswith(below)]
            else:
                stale = [k for k in cache if k == changed or k.startswith(below)]
            for key in stale:
                del cache[key]
        return
    # A file, or an empty directory, with no symlink on its way (`changed` is built from
    # the tree itself): nothing below it exists, before or after.
    caches["object"].pop(changed, None)
    exists = caches["exists"]
    exists[(changed, False)] = exists[(changed, True)] = now is not None


def _path_string(file_path) -> str | None:
    """A path object's string, as `resolve_path` and `exists` make it first thing (pyfakefs's
    `make_string_path`: its own paths by `str`, any other by `os.fspath`), so that a lookup
    by `Path` finds what one by its string cached; None for anything that does not give a
    str that way (bytes, a descriptor, None, a broken `__fspath__`), which pyfakefs is left
    to answer or refuse as it does. Agents pass `Path`s far more often than strings: an
    `open(path)` resolved it uncached, whole, every time."""
    if not isinstance(file_path, PathLike):
        return None
    try:  # read at the call: faultsim's own stands in for it (`_skip_string_conversion`)
        path = _helpers.make_string_path(file_path)
    except Exception:
        return None
    return path if type(path) is str else None


def _reaches_beyond(entry) -> bool:
    """Whether a change of this entry can change lookups of other paths than its own: an
    unknown entry, a symlink, or a directory with contents. A real directory passed
    through and not yet listed counts as one with contents (listing it here would load it
    in the middle of its own addition)."""
    if isinstance(entry, fake_file.FakeDirectoryFromRealDirectory) and not entry.contents_read:
        return True
    return entry is None or S_ISLNK(entry.st_mode) or (
        isinstance(entry, fake_file.FakeDirectory) and bool(entry.entries))


def _memoised(func, name):
    uses_cwd = name == "absnormpath"

    def memoised(self, path, *args, **kwargs):
        if _active is None or args or kwargs or type(path) is not str:
            return func(self, path, *args, **kwargs)
        cache = self.__dict__.get("_faultsim_paths")
        if cache is None or len(cache) > 100_000:
            cache = self.__dict__["_faultsim_paths"] = {}
        key = (name, path, self.cwd if uses_cwd else None, self._is_windows_fs,
               self._is_macos)
        found = cache.get(key)
        if found is None:
            found = cache[key] = func(self, path)
        return list(found) if type(found) is list else found

    memoised.__wrapped__ = func
    return memoised


class FsInterposer:
    """Watches the sandbox `root` inside pyfakefs `fs` and reports to `tracer`."""

    def __init__(self, fs: fake_filesystem.FakeFilesystem, root: str, tracer: Tracer) -> None:
        install()
        self.fs = fs
        self.root = posixpath.normpath(root)
        self.tracer = tracer
        self.quiet = 0  # our own snapshot/restore work: not traced
        self.nested = 0  # inside a rename: its add/remove are part of it
        self.killed = False
        self.escapes: list[str] = []  # mutations outside the sandbox
        self.durability = Durability()
        self.last_touched: str | None = None  # the file most recently created or written
        # Tracking what a run saw of the files it started from. For each path, the first
        # touch: did the run observe the old content (read, stat) or only destroy it
        # (truncate, replace, remove)? Did it observe whether the path existed (also
        # exists(), unlink, listing its directory)? A path the run destroyed before
        # observing it could have held anything, or nothing.
        self.tracking = False
        self.first_content: dict[str, str] = {}
        self.first_presence: dict[str, str] = {}
        self.listed: set[str] = set()
        self.watch: str | None = None  # one path of interest (the last file written)
        self._rels: dict[str, str | None] = {}  # path -> relative path (pure in the path)

    # -- activation -----------------------------------------------------------------------
    def __enter__(self) -> "FsInterposer":
        global _active
        if _active is not None and _active is not self:
            raise RuntimeError("another FsInterposer is already active")
        # Every add and remove keeps the lookup caches true, watched or not; only a new
        # tree (pyfakefs's reset) makes them stale.
        caches = _tree_cache(self.fs)
        if caches.get("root") is not self.fs.root:
            caches.clear()
            caches.update(resolve={}, object={}, exists={}, folders={}, root=self.fs.root)
        _active = self
        return self

    def __exit__(self, *exc: Any) -> None:
        global _active
        _active = None

    def kill(self) -> None:
        """Seal the sandbox: from now on no mutation lands, and none is an event.

        What runs as the kill unwinds (buffers flushed by `with` blocks, a temp file
        removed in an `except`, a session saved in a `finally`, a thread of the
        incarnation) never runs under a real SIGKILL: it is discarded, and is no finding
        (the swallowed kill is: faultsim/interpose/finality.py)."""
        self.killed = True

    # -- paths ----------------------------------------------------------------------------
    def rel(self, path: str) -> str | None:
        key = path if type(path) is str else str(path)
        found = self._rels.get(key, _UNSEEN)  # asked at every touch of every file
        if found is not _UNSEEN:
            return found
        path = posixpath.normpath(key)
        if path == self.root:
            found = "."
        elif path.startswith(self.root + "/"):
            found = path[len(self.root) + 1:]
        else:
            found = None
        if len(self._rels) < 100_000:
            self._rels[key] = found
        return found

    def _rel_of(self, obj: Any) -> str | None:
        path = _path_of(obj)  # None: unlinked but still open, its writes reach no name
        return None if path is None else self.rel(path)

    def start_tracking(self, watch: str | None = None) -> None:
        self.tracking, self.watch = True, watch
        self.first_content, self.first_presence, self.listed = {}, {}, set()

    def stop_tracking(self) -> None:
        self.tracking = False

    @property
    def watch_state(self) -> str | None:
        """How the run first touched the watched file's content, if it did."""
        return self.first_content.get(self.watch) if self.watch else None

    def _touch(self, fs, path, content: str | None, presence: str | None) -> None:
        try:
            rel = self.rel(fs.absnormpath(fs.make_string_path(path)))
        except Exception:
            return
        self._touch_rel(rel, content, presence)

    def _touch_rel(self, rel: str | None, content: str | None, presence: str | None) -> None:
        if rel is None:
            return
        if content is not None:
            self.first_content.setdefault(rel, content)
        if presence is not None:
            self.first_presence.setdefault(rel, presence)

    def _listed(self, fs, directory) -> None:
        try:
            rel = self.rel(fs.absnormpath(fs.make_string_path(directory)))
        except Exception:
            return
        if rel is not None:
            self.listed.add(rel)

    def _refuse_outside(self, fs, file_) -> None:
        try:
            path = fs.absnormpath(fs.make_string_path(file_))
        except Exception:
            return
        if self.rel(path) is None:
            self._outside("open for writing", path)

    def _outside(self, what: str, path: str) -> None:
        """Refuse a change outside the sandbox, as subprocess mode does on the real disk
        (`real/fstrace.py`): the same agent meets the same PermissionError in both modes,
        and both report the same `no_sandbox_escape` (on the clean run: `SandboxEscape`).
        Containing it in the fake file system instead would let an in-process run go on
        where a subprocess run stops, and the state it kept there is not crash state."""
        if path in ALLOWED_OUTSIDE:
            return
        if "__pycache__" in path.split("/"):
            # Python's byte-code cache, written best-effort by whatever imports a module
            # during the run (pytest's assertion rewriter writes its own through `os`, which
            # pyfakefs patches): refused, as on the real disk, but not the agent's write,
            # as subprocess mode says too (real/helpers.py). No event: a module is
            # imported once per process, so a trace with it would differ between runs.
            raise PermissionError(13, f"faultsim: {what} outside the sandbox refused", path)
        self.escapes.append(f"{what} {path} (at {call_site()})")
        self.tracer.emit("sandbox.escape", path, what)
        raise PermissionError(13, f"faultsim: {what} outside the sandbox refused", path)

    # -- hooks ----------------------------------------------------------------------------
    def _content(self, obj, contents, apply):
        new = obj._encode_contents(contents)
        new = b"" if new is None else bytes(new)
        old = obj._byte_contents or b""
        if new == old:
            return apply(contents)  # flushes that change nothing are not events
        path = _path_of(obj)  # None: unlinked but still open, its writes reach no name
        rel = None if path is None else self.rel(path)
        if self.killed:
            return False
        if rel is None:
            if path is not None:
                self._outside("write", path)
            return apply(contents)
        kind = "fs.truncate" if not new and old else "fs.write"
        write = PendingWrite(rel, old, new, apply)
        torn = self.tracer.before_write(write)
        if torn is not None:  # a kill inside this write: part of it landed, then death
            apply(torn)
            self.kill()
            raise finality.killed(Killed(f"killed inside the write to {rel}"))
        result = apply(contents)
        self._dirty(obj, rel)
        self.last_touched = rel
        self.tracer.emit(kind, rel, f"{len(old)}->{len(new)} {digest(new)}",
                         size=len(new) - write.start)
        return result

    def appended(self, obj, length: int, tail: bytes) -> bool:
        """A flush that only appends `tail` to the `length` bytes of `obj` (appends.py):
        the event, the torn points and the kill `_content` gives the same flush of the
        whole file, in O(len(tail)). False: not the sandbox's file (the caller flushes the
        whole file instead, and `_content` judges it)."""
        finality.refuse_stray("write", obj.name)
        path = _path_of(obj)
        rel = None if path is None else self.rel(path)
        if rel is None or self.killed:
            return False

        def apply(contents: bytes) -> None:  # a torn version, the whole file's bytes
            self.quiet += 1
            try:
                obj.set_initial_contents(contents)
            finally:
                self.quiet -= 1

        write = appends.AppendedWrite(rel, obj, length, tail, apply)
        torn = self.tracer.before_write(write)
        if torn is not None:  # a kill inside this write: part of it landed, then death
            apply(torn)
            self.kill()
            raise finality.killed(Killed(f"killed inside the write to {rel}"))
        new_digest = appends.extend(obj, tail)
        self._dirty(obj, rel)
        self.last_touched = rel
        self.tracer.emit("fs.write", rel, f"{length}->{length + len(tail)} {new_digest}",
                         size=len(tail))
        return True

    def _truncate(self, obj, st_size, apply):
        old = obj._byte_contents or b""
        if st_size == len(old):
            return apply(st_size)
        path = _path_of(obj)
        rel = None if path is None else self.rel(path)
        if self.killed:
            return None
        if rel is None:
            if path is not None:
                self._outside("truncate", path)
            return apply(st_size)
        result = apply(st_size)
        self._dirty(obj, rel)
        self.tracer.emit("fs.truncate", rel, f"{len(old)}->{st_size}")
        return result

    def _add(self, directory, obj, apply):
        parent = self._rel_of(directory)
        name = str(obj.name)
        kind = "fs.mkdir" if isinstance(obj, fake_file.FakeDirectory) else "fs.create"
        if self.killed:
            return None
        if parent is None:
            self._outside(kind[3:], posixpath.join(str(directory.path), name))
            return apply()
        if self.tracking and kind == "fs.mkdir":
            self._touch_rel(_join(parent, name), None, "observed")  # fails if it existed
        result = apply()
        if kind == "fs.create":
            # pyfakefs gives a new file its bytes only after adding it; a kill landing
            # between the two would leave a "fake large file" that cannot be read. A file a
            # real kernel has just created is empty, and readable as such.
            if type(obj) is fake_file.FakeFile and obj._byte_contents is None:
                obj._byte_contents = b""
            self.last_touched = _join(parent, name)
        self.tracer.emit(kind, _join(parent, name))
        return result

    def _remove(self, directory, name, apply):
        parent = self._rel_of(directory)
        if self.killed:
            return None
        if parent is None:
            self._outside("unlink", posixpath.join(str(directory.path), str(name)))
            return apply()
        entry = directory.entries.get(name)
        kind = "fs.rmdir" if isinstance(entry, fake_file.FakeDirectory) else "fs.unlink"
        if self.tracking:  # removal: the content is gone unread; its presence was seen
            self._touch_rel(_join(parent, str(name)), "destroyed", "observed")
        result = apply()
        self.tracer.emit(kind, _join(parent, str(name)))
        return result

    def _rename(self, fs, old_path, new_path, apply):
        src = self.rel(fs.absnormpath(fs.make_string_path(old_path)))
        dst = self.rel(fs.absnormpath(fs.make_string_path(new_path)))
        if self.killed:
            return None
        if src is None or dst is None:
            self._outside("rename", f"{old_path} -> {new_path}")
            return apply()
        if self.tracking:
            self._touch_rel(src, "observed", "observed")  # it lives on under another name
            self._touch_rel(dst, "destroyed", "destroyed")
        self.nested += 1
        try:
            result = apply()
        finally:
            self.nested -= 1
        # unsynced files keep their data under their new name
        self.durability.last_written = [
            dst + p[len(src):] if p == src or p.startswith(src + "/") else p
            for p in self.durability.last_written if p != dst]
        self.tracer.emit("fs.rename", dst, f"from {src}")
        return result

    def _fsync(self, obj, kind):
        rel = self._rel_of(obj)
        if self.killed or rel is None:
            return
        if isinstance(obj, fake_file.FakeDirectory):
            self.durability.entries[obj.st_ino] = {n: e.st_ino for n, e in obj.entries.items()}
            self.durability.dirs.update(e.st_ino for e in obj.entries.values()
                                        if isinstance(e, fake_file.FakeDirectory))
        else:
            self.durability.data[obj.st_ino] = bytes(obj._byte_contents or b"")
            if rel in self.durability.last_written:
                self.durability.last_written.remove(rel)
        self.tracer.emit("fs." + kind, rel)

    def _dirty(self, obj, rel):
        lw = self.durability.last_written
        if rel in lw:
            lw.remove(rel)
        lw.append(rel)

    # -- snapshots ------------------------------------------------------------------------
    def root_dir(self):
        return self.fs.resolve(self.root)

    def snapshot(self) -> dict[str, bytes | None]:
        """The sandbox as {relative path: bytes, or None for a directory}."""
        out: dict[str, bytes | None] = {}

        def walk(directory, prefix):
            for name in sorted(directory.entries):
                entry = directory.entries[name]
                rel = f"{prefix}{name}"
                if isinstance(entry, fake_file.FakeDirectory):
                    out[rel] = DIR
                    walk(entry, rel + "/")
                else:
                    out[rel] = bytes(entry._byte_contents or b"")

        walk(self.root_dir(), "")
        return out

    def inodes(self) -> dict[str, int]:
        """Relative path → identity of the file object behind it (renames keep it)."""
        out: dict[str, int] = {}

        def walk(directory, prefix):
            for name, entry in directory.entries.items():
                out[f"{prefix}{name}"] = entry.st_ino
                if isinstance(entry, fake_file.FakeDirectory):
                    walk(entry, f"{prefix}{name}/")

        walk(self.root_dir(), "")
        return out

    def restore(self, state: dict[str, bytes | None]) -> None:
        """Make the sandbox hold exactly `state` (untraced), and mark it all durable."""
        self.quiet += 1
        try:
            root = self.root_dir()
            for name in list(root.entries):
                self.fs.remove_object(posixpath.join(self.root, name))
            for rel in sorted(state):
                path = posixpath.join(self.root, rel)
                if state[rel] is DIR:
                    self.fs.create_dir(path)
                else:
                    self.fs.create_file(path, contents=state[rel])
        finally:
            self.quiet -= 1
        self.killed = False
        self.mark_all_durable()

    def mark_all_durable(self) -> None:
        root = self.root_dir()
        d = Durability(root=root.st_ino)

        def walk(directory):
            d.dirs.add(directory.st_ino)
            d.entries[directory.st_ino] = {n: e.st_ino for n, e in directory.entries.items()}
            for entry in directory.entries.values():
                if isinstance(entry, fake_file.FakeDirectory):
                    walk(entry)
                else:
                    d.data[entry.st_ino] = bytes(entry._byte_contents or b"")

        walk(root)
        self.durability = d


def _path_of(obj: Any) -> str | None:
    """The object's absolute path, or None when no name reaches it any more (pyfakefs
    keeps `parent_dir` and `path` on a removed file that is still open). Cheaper than
    pyfakefs's own `path`, which re-normalises the string it builds: its folder's path is
    remembered (`_folder_path`), so a file's costs one step up, not one per level."""
    ref = obj.parent_dir
    parent = ref() if callable(ref) else ref
    if parent is None:
        return None
    name = obj.name
    if parent.entries.get(name) is not obj:
        return None
    base = _folder_path(parent)
    return None if base is None else f"{base}/{name}"


def _folder_path(folder: Any) -> str | None:
    """A folder's absolute path ("" for the root), None when no name reaches it.

    Remembered while faultsim is active, per folder object, in the lookup caches
    (`_tree_cache`). Why sound: the path is read from the folders above it, their names
    and their parents' entries, and those change only when a folder is added to or removed
    from a folder (pyfakefs renames one by removing it and adding it back under its new
    name). Every add and remove passes `_changed`, which forgets every remembered path
    when the entry it adds or removes, or finds there, is a folder or unknown; a file's
    coming and going leaves them all as they were."""
    caches = folder.filesystem.__dict__.get("_faultsim_tree") if _active is not None \
        else None
    if caches is not None:
        known = caches["folders"].get(id(folder))
        if known is not None and known[0] is folder:  # kept alive: its id is its own
            return known[1]
    names = []
    node = folder
    while True:
        ref = node.parent_dir
        parent = ref() if callable(ref) else ref
        if parent is None:
            break
        name = node.name
        if parent.entries.get(name) is not node:
            return None
        names.append(name)
        node = parent
    path = "/" + "/".join(reversed(names)) if names else ""
    if caches is not None:
        caches["folders"][id(folder)] = (folder, path)
    return path


def _join(parent: str, name: str) -> str:
    return name if parent == "." else f"{parent}/{name}"
