"""File operations on a real directory, traced: the subprocess mode's interposer.

It runs in a child process that exists for one incarnation, so `open` and the `os`
functions are replaced for good (the process dies at its kill point or right after the
run). Every operation under the sandbox root becomes the trace event the in-process
interposer emits for it (fs.create, fs.write, fs.truncate, fs.rename, fs.unlink, fs.mkdir,
fs.rmdir, fs.fsync, fs.fdatasync), so both modes find the same kill points; a write
outside the sandbox is refused and reported.

Writes are traced where bytes reach the kernel, under Python's buffers: a kill inside a
write leaves exactly the bytes that landed, and SIGKILL loses whatever was still buffered.
"""
from __future__ import annotations

import builtins
import fcntl
import io
import os
import stat as _statmod
from typing import Any

from ..interpose import finality
from ..interpose.netguard import call_site
from ..core.trace import PendingWrite, Tracer, digest

_orig: dict[str, Any] = {}
_state: "_Sandbox | None" = None
ALLOWED_OUTSIDE = ("/dev/null",)
_PROC_FD = os.path.isdir("/proc/self/fd")  # reopens a descriptor's file, even renamed
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND


class _Sandbox:
    def __init__(self, root: str, tracer: Tracer) -> None:
        self.root = os.path.realpath(root)
        self.tracer = tracer
        self.fds: dict[int, str] = {}  # fd -> absolute path, for fsync and os.write
        self.escapes: list[str] = []
        # One watched path: did the run first observe its content (read, stat, open for
        # update, rename it elsewhere) or destroy it unread (truncate, replace, unlink)?
        # A run that destroyed it first would have done the same whatever it held.
        self.watch: str | None = None
        self.first_touch: str | None = None

    def touch(self, rel: str | None, how: str) -> None:
        if rel is not None and rel == self.watch and self.first_touch is None:
            self.first_touch = how

    def rel(self, path: Any, dir_fd: int | None = None) -> tuple[str, str | None]:
        path = os.fsdecode(path)
        if dir_fd is not None and not os.path.isabs(path):
            path = os.path.join(self.fds.get(dir_fd, "?"), path)
        path = os.path.abspath(path)
        if path == self.root:
            return path, "."
        if path.startswith(self.root + "/"):
            return path, path[len(self.root) + 1:]
        return path, None

    def refuse(self, what: str, path: str) -> None:
        if "__pycache__" in path.split("/"):  # byte-code caches: refused, not reported,
            # as in-process (inprocess/fs.py `_outside` says why)
            raise PermissionError(13, f"faultsim: {what} outside the sandbox refused", path)
        self.escapes.append(f"{what} {path} (at {call_site()})")  # as in-process
        self.tracer.emit("sandbox.escape", path, what)
        raise PermissionError(13, f"faultsim: {what} outside the sandbox refused", path)

    def emit(self, kind: str, rel: str, detail: str = "", size: int = 0) -> None:
        self.tracer.emit(kind, rel, detail, size=size)


def _read(path: str) -> bytes:
    try:
        with _orig["open"](path, "rb") as f:
            return f.read()
    except OSError:
        return b""


def _put(fd: int, content: bytes, pos: int, n: int) -> None:
    """Make the file behind `fd` hold `content` (a torn write's result, or the content
    before the write) where a write of `n` bytes at `pos` touches it: bytes and length.
    Untraced. On Linux, pwrite on an O_APPEND descriptor appends wherever `pos` says, so
    the flag is lifted for the call (the descriptor is shared with the agent's handle)."""
    flags = fcntl.fcntl(fd, fcntl.F_GETFL)
    if flags & os.O_APPEND:
        fcntl.fcntl(fd, fcntl.F_SETFL, flags & ~os.O_APPEND)
    try:
        os.pwrite(fd, content[pos:pos + n], pos)
        if os.fstat(fd).st_size > len(content):
            _orig["truncate"](fd, len(content))
    finally:
        if flags & os.O_APPEND:
            fcntl.fcntl(fd, fcntl.F_SETFL, flags)


def _appends(fd: int) -> bool:
    return bool(fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_APPEND)


def _traced_write(sb: _Sandbox, rel: str, fd: int, old: bytes, data: bytes, pos: int,
                  write_all) -> bytes:
    """Trace one write of `data` at `pos` into a file whose content was `old`; return the
    new content. `write_all(data)` does the real write."""
    if pos > len(old):
        old = old + b"\0" * (pos - len(old))
    new = old[:pos] + data + old[pos + len(data):]
    if new == old:
        write_all(data)
        return new

    def apply(content: bytes) -> None:  # the file as `content`: the torn part, or `old`
        _put(fd, content, pos, len(data))

    pending = PendingWrite(rel, old, new, apply)
    sb.tracer.before_write(pending)  # a kill inside this write never returns
    write_all(data)
    sb.emit("fs.truncate" if not new and old else "fs.write", rel,
            f"{len(old)}->{len(new)} {digest(new)}", size=len(new) - pending.start)
    return new


class TracedRaw(io.RawIOBase):
    """A real file under Python's buffers whose writes are traced."""

    def __init__(self, fio: io.FileIO, rel: str, content: bytes, append: bool) -> None:
        self._fio, self._rel, self._content, self._append = fio, rel, content, append
        self.name = fio.name
        self.mode = fio.mode

    def readable(self) -> bool:
        return self._fio.readable()

    def writable(self) -> bool:
        return self._fio.writable()

    def seekable(self) -> bool:
        return self._fio.seekable()

    def fileno(self) -> int:
        return self._fio.fileno()

    def readinto(self, b) -> int:
        return self._fio.readinto(b)

    def seek(self, pos: int, whence: int = 0) -> int:
        return self._fio.seek(pos, whence)

    def tell(self) -> int:
        return self._fio.tell()

    def write(self, b) -> int:
        finality.refuse_stray("write")  # a thread whose incarnation is over
        data = bytes(b)
        sb = _state
        if sb is None:
            return self._fio.write(data)
        fd = self._fio.fileno()
        size = os.fstat(fd).st_size
        if size != len(self._content):
            # another handle wrote the file since this one last did (a second open of the
            # log, a logger): trace against what is on disk, not a stale copy
            self._content = _read(f"/proc/self/fd/{fd}" if _PROC_FD else sb.fds.get(fd, ""))
        # an append lands at the end of the file as the kernel has it (O_APPEND)
        pos = size if self._append else self._fio.tell()
        self._content = _traced_write(sb, self._rel, self._fio.fileno(), self._content, data,
                                      pos, self._write_all)
        return len(data)

    def _write_all(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            n = self._fio.write(view)
            view = view[n:]

    def truncate(self, size: int | None = None) -> int:
        size = self._fio.tell() if size is None else size
        old = self._content
        result = self._fio.truncate(size)
        self._content = old[:size] + b"\0" * max(0, size - len(old))
        if _state is not None and len(old) != size:
            _state.emit("fs.truncate", self._rel, f"{len(old)}->{size}")
        return result

    def close(self) -> None:
        if not self.closed:
            fd = self._fio.fileno() if not self._fio.closed else None
            self._fio.close()
            if _state is not None and fd is not None:
                _state.fds.pop(fd, None)
        super().close()


def _open(file, mode="r", buffering=-1, encoding=None, errors=None, newline=None,
          closefd=True, opener=None):
    finality.refuse_stray("open", file)  # a thread whose incarnation is over
    sb = _state
    writing = any(c in mode for c in "wax+")
    if sb is not None and sb.watch is not None and not isinstance(file, int):
        sb.touch(sb.rel(file)[1], "destroyed" if "w" in mode else "observed")
    if sb is None or not writing or opener is not None:
        return _orig["open"](file, mode, buffering, encoding, errors, newline, closefd, opener)
    if isinstance(file, int):
        path, rel = sb.rel(sb.fds.get(file, f"/proc/self/fd/{file}"))
    else:
        path, rel = sb.rel(file)
    if rel is None:
        if path in ALLOWED_OUTSIDE:
            return _orig["open"](file, mode, buffering, encoding, errors, newline, closefd)
        sb.refuse("open for writing", path)
    existed = _exists(path)
    if "w" in mode and not isinstance(file, int):
        old = _read(path) if existed else b""
        content = b""
    else:
        old = content = _read(path) if existed else b""
    raw_mode = mode.replace("b", "").replace("t", "")
    fio = io.FileIO(file, raw_mode, closefd=closefd)
    if not isinstance(file, int):
        if not existed:
            sb.emit("fs.create", rel)
        elif "w" in mode and old:
            sb.emit("fs.truncate", rel, f"{len(old)}->0")
    sb.fds[fio.fileno()] = path
    raw = TracedRaw(fio, rel, content, "a" in mode or _appends(fio.fileno()))
    binary = "b" in mode
    if buffering == 0 and binary:
        return raw
    size = io.DEFAULT_BUFFER_SIZE if buffering in (-1, 0, 1) else buffering
    buffer = (io.BufferedRandom(raw, size) if "+" in mode else io.BufferedWriter(raw, size))
    if binary:
        return buffer
    text = io.TextIOWrapper(buffer, encoding, errors, newline, line_buffering=buffering == 1)
    text.mode = mode
    return text


def _os_open(path, flags, mode=0o777, *, dir_fd=None):
    finality.refuse_stray("open", path)  # a thread whose incarnation is over
    sb = _state
    if sb is None:
        return _orig["os_open"](path, flags, mode, dir_fd=dir_fd)
    full, rel = sb.rel(path, dir_fd)
    sb.touch(rel, "destroyed" if flags & os.O_TRUNC else "observed")
    writing = bool(flags & _WRITE_FLAGS)
    if writing and rel is None and full not in ALLOWED_OUTSIDE:
        sb.refuse("open for writing", full)
    existed = _exists(full)
    old = _read(full) if writing and rel is not None and existed and flags & os.O_TRUNC \
        else b""
    fd = _orig["os_open"](path, flags, mode, dir_fd=dir_fd)
    sb.fds[fd] = full
    if rel is not None and writing:
        if flags & os.O_CREAT and not existed:
            sb.emit("fs.create", rel)
        elif flags & os.O_TRUNC and old:
            sb.emit("fs.truncate", rel, f"{len(old)}->0")
    return fd


def _os_write(fd, data):
    finality.refuse_stray("write")  # a thread whose incarnation is over
    sb = _state
    path = sb.fds.get(fd) if sb is not None else None
    rel = sb.rel(path)[1] if path is not None else None
    if rel is None:
        return _orig["write"](fd, data)
    data = bytes(data)
    # with O_APPEND the kernel writes at the end, whatever the offset says
    pos = os.fstat(fd).st_size if _appends(fd) else os.lseek(fd, 0, os.SEEK_CUR)
    _traced_write(sb, rel, fd, _read(path), data, pos, lambda d: _orig["write"](fd, d))
    return len(data)


def _os_close(fd):
    if _state is not None:
        _state.fds.pop(fd, None)
    return _orig["close"](fd)


def _sync(kind: str):
    def sync(fd):
        result = _orig[kind](fd)
        sb = _state
        path = sb.fds.get(fd) if sb is not None else None
        if path is not None:
            rel = sb.rel(path)[1]
            if rel is not None:
                sb.emit("fs." + kind, rel)
        return result
    return sync


def _rename(name: str):
    def rename(src, dst, *, src_dir_fd=None, dst_dir_fd=None):
        finality.refuse_stray("rename", src)  # a thread whose incarnation is over
        sb = _state
        if sb is None:
            return _orig[name](src, dst, src_dir_fd=src_dir_fd, dst_dir_fd=dst_dir_fd)
        sfull, srel = sb.rel(src, src_dir_fd)
        dfull, drel = sb.rel(dst, dst_dir_fd)
        if srel is None or drel is None:
            sb.refuse("rename", f"{sfull} -> {dfull}")
        sb.touch(srel, "observed")  # its content lives on under the new name
        sb.touch(drel, "destroyed")
        result = _orig[name](src, dst, src_dir_fd=src_dir_fd, dst_dir_fd=dst_dir_fd)
        sb.emit("fs.rename", drel, f"from {srel}")
        return result
    return rename


def _remove(name: str, kind: str):
    def remove(path, *, dir_fd=None):
        finality.refuse_stray("remove", path)  # a thread whose incarnation is over
        sb = _state
        if sb is None:
            return _orig[name](path, dir_fd=dir_fd)
        full, rel = sb.rel(path, dir_fd)
        if rel is None:
            sb.refuse(kind, full)
        sb.touch(rel, "destroyed")
        result = _orig[name](path, dir_fd=dir_fd)
        sb.emit("fs." + kind, rel)
        return result
    return remove


def _mkdir(path, mode=0o777, *, dir_fd=None):
    finality.refuse_stray("create", path)  # a thread whose incarnation is over
    sb = _state
    if sb is None:
        return _orig["mkdir"](path, mode, dir_fd=dir_fd)
    full, rel = sb.rel(path, dir_fd)
    if rel is None:
        sb.refuse("mkdir", full)
    result = _orig["mkdir"](path, mode, dir_fd=dir_fd)
    sb.emit("fs.mkdir", rel)
    return result


def _truncate(path, length):
    finality.refuse_stray("truncate", path)  # a thread whose incarnation is over
    sb = _state
    if sb is None:
        return _orig["truncate"](path, length)
    if isinstance(path, int):
        full = sb.fds.get(path, "?")
    else:
        full = sb.rel(path)[0]
    rel = sb.rel(full)[1]
    if rel is None:
        sb.refuse("truncate", full)
    sb.touch(rel, "destroyed" if length == 0 else "observed")
    old = len(_read(full))
    result = _orig["truncate"](path, length)
    if old != length:
        sb.emit("fs.truncate", rel, f"{old}->{length}")
    return result


def _stat(path, *, dir_fd=None, follow_symlinks=True):
    sb = _state
    if sb is not None and sb.watch is not None and not isinstance(path, int):
        sb.touch(sb.rel(path, dir_fd)[1], "observed")  # its size tells of its content
    return _orig["stat"](path, dir_fd=dir_fd, follow_symlinks=follow_symlinks)


def _lstat(path, *, dir_fd=None):
    sb = _state
    if sb is not None and sb.watch is not None and not isinstance(path, int):
        sb.touch(sb.rel(path, dir_fd)[1], "observed")
    return _orig["lstat"](path, dir_fd=dir_fd)


def _scandir(path="."):
    # A DirEntry's stat() is C-level: listing the watched file's folder with scandir
    # counts as observing it (conservative: fewer shared verdicts, never a wrong one).
    sb = _state
    if sb is not None and sb.watch is not None and not isinstance(path, int):
        folder = sb.rel(path)[1]
        parent = os.path.dirname(sb.watch) or "."
        if folder == parent:
            sb.touch(sb.watch, "observed")
    return _orig["scandir"](path)


def _exists(path: str) -> bool:
    """Untraced: faultsim's own look, not the agent's."""
    try:
        _orig["lstat"](path)
        return True
    except OSError:
        return False


def install() -> None:
    """Replace `open` and the `os` functions (once per process, before the agent is
    imported, so that `from os import replace` gets the traced one)."""
    if _orig:
        return
    _orig.update(open=builtins.open, os_open=os.open, write=os.write, close=os.close,
                 fsync=os.fsync, fdatasync=os.fdatasync, replace=os.replace,
                 rename=os.rename, unlink=os.unlink, remove=os.remove, rmdir=os.rmdir,
                 mkdir=os.mkdir, truncate=os.truncate, stat=os.stat, lstat=os.lstat,
                 scandir=os.scandir)
    builtins.open = io.open = _open
    os.open, os.write, os.close = _os_open, _os_write, _os_close
    os.fsync, os.fdatasync = _sync("fsync"), _sync("fdatasync")
    os.replace, os.rename = _rename("replace"), _rename("rename")
    os.unlink, os.remove = _remove("unlink", "unlink"), _remove("remove", "unlink")
    os.rmdir = _remove("rmdir", "rmdir")
    os.mkdir = _mkdir
    os.truncate = os.ftruncate = _truncate
    os.stat, os.lstat, os.scandir = _stat, _lstat, _scandir


def activate(root: str, tracer: Tracer) -> _Sandbox:
    global _state
    _state = _Sandbox(root, tracer)
    return _state


def deactivate() -> "_Sandbox | None":
    global _state
    saved, _state = _state, None
    return saved


def reactivate(saved: "_Sandbox | None") -> None:
    global _state
    _state = saved


def snapshot(root: str) -> dict[str, bytes | None]:
    """The directory as {relative path: bytes, or None for a directory}, read from disk
    (after a SIGKILL: what survived the process, the page cache included)."""
    out: dict[str, bytes | None] = {}
    root = os.path.realpath(root)

    def walk(directory: str, prefix: str) -> None:
        for name in sorted(os.listdir(directory)):
            full = os.path.join(directory, name)
            st = os.lstat(full)
            if _statmod.S_ISDIR(st.st_mode):
                out[prefix + name] = None
                walk(full, prefix + name + "/")
            else:
                with _orig.get("open", builtins.open)(full, "rb") as f:
                    out[prefix + name] = f.read()

    walk(root, "")
    return out


def restore(root: str, files: dict[str, bytes | None]) -> None:
    """Make the directory hold exactly `files` (untraced: faultsim's own work)."""
    import shutil

    o = _orig or {"open": builtins.open, "mkdir": os.mkdir}
    root = os.path.realpath(root)
    for name in os.listdir(root):
        full = os.path.join(root, name)
        if os.path.isdir(full) and not os.path.islink(full):
            shutil.rmtree(full)
        else:
            os.unlink(full)
    for rel, data in sorted(files.items()):
        full = os.path.join(root, rel)
        if data is None:
            o["mkdir"](full)
        else:
            with o["open"](full, "wb") as f:
                f.write(data)


def emit(kind: str, subject: str, detail: str = "", text: str = "") -> None:
    """For the store interposers (SQLite, Redis): an event into the running trace (`text`:
    what its digest stands for, shown where two runs part on it)."""
    if _state is not None:
        _state.tracer.emit(kind, subject, detail, text=text)
