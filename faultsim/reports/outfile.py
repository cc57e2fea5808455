"""Every file faultsim itself leaves (reports, corpora, recordings, caches) is written the
way it asks agents to write theirs: a temporary file beside the target, written whole,
fsynced, renamed over the target, and the folder fsynced (P2). A reader, a second crash or
a full disk then sees the old file or the new one, never a torn one; a failed write removes
its temporary file and names the file it could not write.

Also: whether an output path can be written at all, asked before any crash run starts (a
typo in `--json` must not cost a whole sweep), and the one rule for replacing a folder:
only one faultsim made (it holds the marker file its maker names), or an empty one.

Standard library only (bottom layer)."""
from __future__ import annotations

import os
import shutil
import tempfile

from ..errors import UsageError

__all__ = ["OutputError", "write_atomic", "append_atomic", "check_writable",
           "check_replaceable", "replace_folder"]


class OutputError(UsageError):
    """An output file or folder faultsim cannot write, or must not replace."""


def _fsync_dir(folder: str) -> None:
    try:
        fd = os.open(folder or ".", os.O_RDONLY)
    except OSError:
        return  # a folder that cannot be opened for reading (some mounts): rename is all
    try:
        os.fsync(fd)
    except OSError:
        pass  # not every file system fsyncs a folder; the rename is still atomic
    finally:
        os.close(fd)


def write_atomic(path: str | os.PathLike, data: bytes | str, *, what: str = "") -> None:
    """Replace `path`'s content with `data` atomically (temp file, fsync, rename, folder
    fsync). On any OSError the temp file is removed, `path` keeps its old content, and an
    OutputError names `what` (an option such as --json) and the path. A symbolic link is
    followed: the file it names is replaced, the link kept (a renamed temp file would
    replace the link itself)."""
    path = os.fspath(path)
    said = path
    if os.path.islink(path):
        path = os.path.realpath(path)
    raw = data.encode("utf-8") if isinstance(data, str) else data
    folder = os.path.dirname(os.path.abspath(path))
    tmp = None
    try:
        if os.path.isdir(path):
            raise IsADirectoryError(21, "is a folder", path)
        fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".",
                                   suffix=".tmp", dir=folder)
        try:
            view = memoryview(raw)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
            # a report is read by people and CI services: the umask's usual mode, not 0600
            umask = os.umask(0)
            os.umask(umask)
            os.fchmod(fd, 0o666 & ~umask)
        finally:
            os.close(fd)
        os.replace(tmp, path)
        tmp = None
        _fsync_dir(folder)
    except OSError as exc:
        raise OutputError(_say(what, said, exc)) from exc
    finally:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass


def append_atomic(path: str | os.PathLike, text: str, *, what: str = "") -> None:
    """Append `text` to `path` (created if missing) atomically: the old content and the new
    tail are written to a temp file renamed over it, so a full disk leaves the old content
    whole (`$GITHUB_STEP_SUMMARY` collects a job's summaries by appending)."""
    path = os.fspath(path)
    try:
        with open(path, "rb") as f:
            old = f.read()
    except FileNotFoundError:
        old = b""
    except OSError as exc:
        raise OutputError(_say(what, path, exc)) from exc
    write_atomic(path, old + text.encode("utf-8"), what=what)


def check_writable(path: str | os.PathLike, what: str) -> None:
    """Refuse, before any work, an output path that cannot be written: its folder missing or
    not writable, or the path a folder. Creates nothing."""
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):
        raise OutputError(f"{what} {path}: is a folder, not a file")
    if not os.path.isdir(folder):
        raise OutputError(f"{what} {path}: the folder {folder} does not exist")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise OutputError(f"{what} {path}: the folder {folder} is not writable")
    if os.path.exists(path) and not os.access(path, os.W_OK):
        raise OutputError(f"{what} {path}: the file is not writable")


def check_replaceable(out: str | os.PathLike, marker: str, what: str = "") -> bool:
    """Refuse, before any work, an output folder `replace_folder` would refuse: a file, a
    link, a folder holding files without `marker`, or one in a missing or read-only
    folder. True: `out` exists (and may be replaced); False: it is new."""
    out = os.fspath(out)
    say = f"{what} {out}".lstrip()
    if os.path.lexists(out):
        if not os.path.isdir(out) or os.path.islink(out):
            raise OutputError(f"{say}: exists and is not a folder; not replaced")
        entries = os.listdir(out)
        if entries and marker not in entries:
            raise OutputError(f"{say}: the folder holds files faultsim did not make "
                              f"(no {marker}); not replaced: name a new or empty folder")
    parent = os.path.dirname(os.path.abspath(out))
    if not os.path.isdir(parent):
        raise OutputError(f"{say}: the folder {parent} does not exist")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise OutputError(f"{say}: the folder {parent} is not writable")
    return os.path.lexists(out)


def replace_folder(staging: str | os.PathLike, out: str | os.PathLike, marker: str, *,
                   what: str = "") -> None:
    """Put the finished folder `staging` at `out`. An existing `out` is replaced only if
    faultsim made it (it holds `marker`) or it is empty; any other folder, or a file, is
    refused and kept as it is: faultsim never deletes what it did not make. The old folder
    is moved aside before the new one is renamed in, so a crash between leaves one of them
    whole."""
    staging, out = os.fspath(staging), os.fspath(out)
    aside = None
    if check_replaceable(out, marker, what):
        aside = out.rstrip(os.sep) + ".old-" + str(os.getpid())
        os.rename(out, aside)
    try:
        os.rename(staging, out)
    except OSError:
        if aside is not None:
            os.rename(aside, out)  # put the old one back
        raise
    _fsync_dir(os.path.dirname(os.path.abspath(out)))
    if aside is not None:
        shutil.rmtree(aside, ignore_errors=True)


def _say(what: str, path: str, exc: OSError) -> str:
    reason = exc.strerror or type(exc).__name__
    return f"{what + ' ' if what else ''}{path}: cannot write ({reason})"
