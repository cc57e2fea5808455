"""The agent's disk as its traced system calls changed it: the events each call is (the
in-process interposer's kinds: fs.create, fs.write, fs.truncate, fs.rename, fs.unlink,
fs.mkdir, fs.rmdir, fs.fsync, fs.fdatasync) and what an fsync made durable, for the power
model of `faultsim.core.crashmodel` (the same model, the same states, as in-process).

The model starts from the workdir as restored (all of it durable: it is what was on disk)
and replays each call that touched the workdir, in strace's order: inodes, names, bytes
(a write's buffer is in the log), descriptors' offsets. At a kill its tree must equal the
real disk read after the kill (`mismatch`): a file changed by what strace does not see (a
memory map, a process outside the trace) makes the power states unknown, and the run says
so rather than judging states the model got wrong.

Limits, said here: descriptors are tracked by number across the agent's processes (two
processes writing the workdir through the same descriptor number at once would be
confused); a relative path of a non-`*at` call is taken from the last `chdir` of any
thread.
"""
from __future__ import annotations

import os
import posixpath
from dataclasses import dataclass, field

from ..core.crashmodel import DIR, CrashState, Durability, power_states
from ..core.trace import digest
from .syscalls import Call

O_ACCMODE, O_CREAT, O_TRUNC, O_APPEND = 3, os.O_CREAT, os.O_TRUNC, os.O_APPEND
_FLAGS = {"O_CREAT": O_CREAT, "O_TRUNC": O_TRUNC, "O_APPEND": O_APPEND, "O_WRONLY": 1,
          "O_RDWR": 2}


def _flags(words: list[str]) -> int:
    out = 0
    for word in words:
        for part in word.split("|"):
            out |= _FLAGS.get(part, 0)
    return out


@dataclass
class _Fd:
    ino: int
    pos: int
    append: bool


@dataclass
class DiskModel:
    """The workdir at `root` as the traced calls left it."""

    root: str
    data: dict[int, bytearray] = field(default_factory=dict)  # file inode -> bytes
    names: dict[int, dict[str, int]] = field(default_factory=dict)  # dir inode -> names
    durability: Durability = field(default_factory=Durability)
    cwd: str = ""
    _fds: dict[str, _Fd] = field(default_factory=dict)
    _next: int = 1

    @classmethod
    def of(cls, root: str, files: dict[str, bytes | None]) -> "DiskModel":
        model = cls(os.path.realpath(root))
        model.cwd = model.root
        top = model._new_dir()
        model.durability.root = top
        for rel in sorted(files):  # parents sort before their children
            parent, name = model._parent(rel)
            if files[rel] is DIR:
                ino = model._new_dir()
            else:
                ino = model._new_file(files[rel] or b"")
            model.names[parent][name] = ino
        model.mark_all_durable()
        return model

    # -- the tree -----------------------------------------------------------------------
    def _new_dir(self) -> int:
        ino, self._next = self._next, self._next + 1
        self.names[ino] = {}
        return ino

    def _new_file(self, content: bytes) -> int:
        ino, self._next = self._next, self._next + 1
        self.data[ino] = bytearray(content)
        return ino

    def _parent(self, rel: str) -> tuple[int, str]:
        ino = self.durability.root
        head, name = posixpath.split(rel)
        for part in head.split("/") if head else ():
            ino = self.names[ino][part]
        return ino, name

    def _lookup(self, rel: str) -> int | None:
        try:
            parent, name = self._parent(rel)
        except KeyError:
            return None
        return self.names.get(parent, {}).get(name) if rel != "." else self.durability.root

    def rel(self, path: str, base: str | None = None) -> str | None:
        """`path` relative to the workdir, or None outside it."""
        if path.endswith(" (deleted)"):
            path = path[:-len(" (deleted)")]
        full = os.path.normpath(os.path.join(base or self.cwd, path))
        if full == self.root:
            return "."
        if full.startswith(self.root + "/"):
            return full[len(self.root) + 1:]
        return None

    def mark_all_durable(self) -> None:
        d = Durability(root=self.durability.root)
        d.dirs = set(self.names)
        d.entries = {ino: dict(n) for ino, n in self.names.items()}
        d.data = {ino: bytes(b) for ino, b in self.data.items()}
        self.durability = d

    def snapshot(self) -> dict[str, bytes | None]:
        out: dict[str, bytes | None] = {}

        def walk(ino: int, prefix: str) -> None:
            for name, child in sorted(self.names[ino].items()):
                if child in self.names:
                    out[prefix + name] = DIR
                    walk(child, prefix + name + "/")
                else:
                    out[prefix + name] = bytes(self.data[child])
        walk(self.durability.root, "")
        return out

    def inodes(self) -> dict[str, int]:
        out: dict[str, int] = {}

        def walk(ino: int, prefix: str) -> None:
            for name, child in self.names[ino].items():
                out[prefix + name] = child
                if child in self.names:
                    walk(child, prefix + name + "/")
        walk(self.durability.root, "")
        return out

    def _path_of(self, ino: int) -> str | None:
        return next((p for p, i in self.inodes().items() if i == ino), None)

    def _dirty(self, rel: str) -> None:
        lw = self.durability.last_written
        if rel in lw:
            lw.remove(rel)
        lw.append(rel)

    def paths(self, call: Call) -> list[str]:
        """The workdir paths `call` names (its path arguments, or its descriptor's)."""
        found = [p for p in (self._at(call, 0), self._at(call, 1)) if p]
        return found or [p for p in (self._fd_rel(call)[0],) if p]

    # -- the calls ----------------------------------------------------------------------
    def _at(self, call: Call, k: int = 0) -> str | None:
        """The k-th path argument of `call`, relative to the workdir (None: outside)."""
        if k >= len(call.strings):
            return None
        path = call.strings[k].decode("utf-8", "surrogateescape")
        base = None
        if call.name.endswith("at") or call.name in ("renameat2",):
            # the dirfd printed before this path argument (AT_FDCWD<cwd> or N<dir>)
            dirs = call.fds
            if call.name in ("renameat", "renameat2"):
                base = dirs[k][1] if k < len(dirs) else None
            elif dirs:
                base = dirs[0][1]
        return self.rel(path, base)

    def _fd_rel(self, call: Call) -> tuple[str | None, str]:
        if not call.fds:
            return None, ""
        fd, path = call.fds[0]
        return self.rel(path) if path.startswith("/") else None, fd

    def apply(self, call: Call) -> list[tuple[str, str, str, int]]:
        """Apply one call that returned; the trace events it is: (kind, path, detail, size)."""
        name = call.name
        if name == "chdir" and call.ok and call.strings:
            self.cwd = os.path.normpath(os.path.join(
                self.cwd, call.strings[0].decode("utf-8", "surrogateescape")))
            return []
        if not call.ok:
            return []
        if name in ("open", "openat", "creat"):
            rel = self._at(call)
            flags = O_CREAT | O_TRUNC | 1 if name == "creat" else _flags(call.words)
            if rel is None or not flags & (O_ACCMODE | O_CREAT | O_TRUNC):
                return []
            events = []
            ino = self._lookup(rel)
            if ino is None:
                if not flags & O_CREAT:
                    return []
                parent, base = self._parent(rel)
                ino = self._new_file(b"")
                self.names[parent][base] = ino
                events.append(("fs.create", rel, "", 0))
            elif flags & O_TRUNC and ino in self.data and self.data[ino]:
                events.append(("fs.truncate", rel, f"{len(self.data[ino])}->0", 0))
                self.data[ino] = bytearray()
                self._dirty(rel)
            if ino in self.data and call.result is not None:
                self._fds[str(call.result)] = _Fd(ino, 0, bool(flags & O_APPEND))
            return events
        if name in ("write", "writev", "pwrite64", "pwritev", "pwritev2"):
            rel, fd = self._fd_rel(call)
            if rel is None:
                return []
            ino = self._lookup(rel)
            state = self._fds.get(fd)
            if ino is None or ino not in self.data:
                return []
            if state is None or state.ino != ino:
                state = self._fds[fd] = _Fd(ino, len(self.data[ino]), False)
            payload = b"".join(call.strings)[:call.result]
            old = bytes(self.data[ino])
            if name.startswith("pwrite"):
                offset = [int(w) for w in call.words if w.lstrip("-").isdigit()]
                pos = offset[1] if len(offset) > 1 else 0  # (count, offset)
            else:
                pos = len(old) if state.append else state.pos
            buf = self.data[ino]
            if pos > len(buf):
                buf.extend(b"\0" * (pos - len(buf)))
            buf[pos:pos + len(payload)] = payload
            if not name.startswith("pwrite"):
                state.pos = pos + len(payload)
            new = bytes(buf)
            if new == old:
                return []
            self._dirty(rel)
            start = next((i for i in range(min(len(old), len(new))) if old[i] != new[i]),
                         min(len(old), len(new)))
            return [("fs.write", rel, f"{len(old)}->{len(new)} {digest(new)}",
                     len(new) - start)]
        if name == "lseek":
            _rel, fd = self._fd_rel(call)
            if fd in self._fds:
                self._fds[fd].pos = call.result
            return []
        if name in ("truncate", "ftruncate"):
            rel = self._at(call) if name == "truncate" else self._fd_rel(call)[0]
            ino = self._lookup(rel) if rel is not None else None
            if ino is None or ino not in self.data:
                return []
            size = int(next(w for w in reversed(call.words) if w.isdigit()))
            old = len(self.data[ino])
            self.data[ino] = self.data[ino][:size] + bytearray(max(0, size - old))
            if old == size:
                return []
            self._dirty(rel)
            return [("fs.truncate", rel, f"{old}->{size}", 0)]
        if name in ("rename", "renameat", "renameat2"):
            src, dst = self._at(call, 0), self._at(call, 1)
            if src is None or dst is None:
                return []
            ino = self._lookup(src)
            if ino is None:
                return []
            sp, sn = self._parent(src)
            dp, dn = self._parent(dst)
            del self.names[sp][sn]
            self.names[dp][dn] = ino
            # unsynced files keep their data under their new name (as in-process)
            self.durability.last_written = [
                dst + p[len(src):] if p == src or p.startswith(src + "/") else p
                for p in self.durability.last_written if p != dst]
            return [("fs.rename", dst, f"from {src}", 0)]
        if name in ("unlink", "unlinkat", "rmdir"):
            rel = self._at(call)
            if rel is None or self._lookup(rel) is None:
                return []
            parent, base = self._parent(rel)
            ino = self.names[parent].pop(base)
            if rel in self.durability.last_written:
                self.durability.last_written.remove(rel)
            return [("fs.rmdir" if ino in self.names else "fs.unlink", rel, "", 0)]
        if name in ("mkdir", "mkdirat"):
            rel = self._at(call)
            if rel is None:
                return []
            parent, base = self._parent(rel)
            self.names[parent][base] = self._new_dir()
            return [("fs.mkdir", rel, "", 0)]
        if name in ("fsync", "fdatasync"):
            rel, _fd = self._fd_rel(call)
            ino = self._lookup(rel) if rel is not None else None
            if ino is None:
                return []
            if ino in self.names:
                d = self.durability
                d.entries[ino] = dict(self.names[ino])
                d.dirs.update(c for c in self.names[ino].values() if c in self.names)
            else:
                self.durability.data[ino] = bytes(self.data[ino])
                if rel in self.durability.last_written:
                    self.durability.last_written.remove(rel)
            return [("fs." + name, rel, "", 0)]
        return []

    def changes(self, call: Call) -> bool:
        """Whether `call`, seen at its entry, would change the workdir: an entry the kill
        may hold (a write, rename, unlink, truncate, fsync, mkdir, or an open that creates
        or truncates a file there)."""
        name = call.name
        if name in ("open", "openat", "creat"):
            rel = self._at(call)
            if rel is None:
                return False
            flags = O_CREAT | O_TRUNC if name == "creat" else _flags(call.words)
            ino = self._lookup(rel)
            return (ino is None and bool(flags & O_CREAT)) or (
                ino is not None and bool(flags & O_TRUNC) and bool(self.data.get(ino)))
        if name in ("write", "writev", "pwrite64", "pwritev", "pwritev2", "ftruncate",
                    "fsync", "fdatasync"):
            return self._fd_rel(call)[0] is not None
        if name in ("rename", "renameat", "renameat2"):
            return self._at(call, 0) is not None
        if name in ("unlink", "unlinkat", "rmdir", "mkdir", "mkdirat", "truncate"):
            return self._at(call) is not None
        return False

    # -- at the kill --------------------------------------------------------------------
    def mismatch(self, disk: dict[str, bytes | None]) -> str | None:
        """Why the model is not the disk read after the kill (one line), or None."""
        mine = self.snapshot()
        for path in sorted(set(mine) | set(disk)):
            if path not in disk:
                return f"{path}: the traced calls made it, it is not on disk"
            if path not in mine:
                return f"{path}: on disk, no traced call made it"
            if mine[path] != disk[path]:
                return (f"{path}: on disk {_size(disk[path])}, the traced calls wrote "
                        f"{_size(mine[path])}")
        return None

    def power_states(self, *, powersafe: bool = True) -> list[CrashState]:
        return power_states(self.snapshot(), self.inodes(), self.durability,
                            powersafe=powersafe)


def _size(data: bytes | None) -> str:
    return "a directory" if data is None else f"{len(data)} bytes"
