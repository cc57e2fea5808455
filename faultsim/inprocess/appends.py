"""Appends without copying the file: a file written by many small writes, in linear time.

pyfakefs keeps a file's bytes as one `bytes` object, and a flush replaces it with the
whole stream (`getvalue()`): a file written by many small writes (`json.dump`, a loop of
`f.write`, each reaching the file as a flush of the writer's 8 KiB buffer) cost O(file)
per flush, O(n^2) in all, and faultsim's hook compared and hashed the whole file at each
flush too (a 50 MB `json.dump`: 6,400 flushes of up to 50 MB each). Here a flush that only
extends the file (its handle writes at the file's end, and nothing changed the file since
the handle's last flush) hands the interposer just the new bytes (`FsInterposer.appended`)
and the file keeps them apart, as a tail, until something reads its bytes (`Contents`):
each flush costs O(the bytes it adds). Nothing else changes: the flush is the same event
at the same moment (its digest carried on from the last one, `trace.hasher`), a kill can
tear it as before (`AppendedWrite` makes its old and new bytes when a policy asks), and a
reader, pyfakefs or faultsim, meets the same bytes.

A handle in append mode counts as at the file's end from the start (`first_end`): its first
flush, the only one of a handle opened to add one line and closed, is an append as well.
Anything else goes through pyfakefs's own flush and faultsim's whole-file hook, as before:
any other handle's first flush, a flush after a seek back or a truncate, after another handle
changed the file (in append mode too: there pyfakefs appends at the file's new end), a file
with a side effect, no interposer active, faultsim's own quiet work, and anything after a
kill.

Imports pyfakefs and the bottom layer (trace, finality) only."""
from __future__ import annotations

from functools import cached_property
from typing import Any, Callable

from pyfakefs import fake_file, helpers

from ..core.trace import PendingWrite, hasher

TAIL = "_faultsim_tail"  # a file's appended bytes not yet joined to its `_byte_contents`
HASH = "_faultsim_hash"  # (epoch, the running hash of the file's bytes at that epoch)
END = "_faultsim_end"  # a handle's: the file's length when its last flush left it at the
#                        end of a stream equal to the file (None: not known)


class Contents:
    """`FakeFile._byte_contents`, with appended tails kept apart until it is read: a read
    joins them (once), a write replaces them (`set_initial_contents`, a truncate)."""

    def __get__(self, obj: Any, cls: Any = None) -> Any:
        if obj is None:
            return self
        d = obj.__dict__
        tail = d.get(TAIL)
        if tail:
            d["_byte_contents"] = b"".join([d.get("_byte_contents") or b"", *tail])
            del d[TAIL]  # a list an `AppendedWrite` may hold: left as it is
        return d.get("_byte_contents")

    def __set__(self, obj: Any, value: Any) -> None:
        d = obj.__dict__
        d.pop(TAIL, None)
        d["_byte_contents"] = value


class AppendedWrite(PendingWrite):
    """A write that appends `tail` to a file of `length` bytes: `start` is `length`, and
    its `old` and `new` bytes are made only when a policy asks for them (a torn kill point
    here), from what the file held when the write was announced."""

    def __init__(self, path: str, obj: Any, length: int, tail: bytes,
                 apply: Callable[[bytes], Any]) -> None:
        d = obj.__dict__
        parts = d.get(TAIL) or []
        for name, value in (("path", path), ("apply", apply), ("start", length),
                            ("_obj", obj), ("_epoch", obj.epoch), ("_tail", tail),
                            ("_base", d.get("_byte_contents") or b""),
                            ("_parts", parts), ("_count", len(parts))):
            object.__setattr__(self, name, value)

    @cached_property
    def old(self) -> bytes:  # type: ignore[override]
        if self._obj.epoch == self._epoch:  # unchanged: the file's own bytes, joined once
            old = self._obj._byte_contents or b""
        else:
            old = b"".join([self._base, *self._parts[:self._count]])
        object.__setattr__(self, "_parts", None)  # made: the pieces need not stay alive
        object.__setattr__(self, "_base", None)
        return old

    @cached_property
    def new(self) -> bytes:  # type: ignore[override]
        return self.old + self._tail


def extend(obj: Any, tail: bytes) -> str:
    """Land `tail` at the end of `obj` (what pyfakefs's `set_initial_contents` does for a
    new content: disk usage, size, epoch), kept apart until read; the file's new digest
    (`trace.digest` of all its bytes), carried on from the last append's."""
    d = obj.__dict__
    found = d.get(HASH)
    h = found[1] if found is not None and found[0] == obj.epoch else \
        hasher(obj._byte_contents or b"")
    obj.filesystem.change_disk_usage(len(tail), obj.name, obj.st_dev)
    h.update(tail)
    parts = d.get(TAIL)
    if parts is None:
        parts = d[TAIL] = []
    parts.append(tail)
    obj.st_size = (obj.st_size or 0) + len(tail)
    obj.epoch += 1
    d[HASH] = (obj.epoch, h)
    return h.hexdigest()


def install(active: Callable[[], Any]) -> None:
    """Patch pyfakefs (once): `active()` is the active `FsInterposer`, or None."""
    FakeFile, Wrapper = fake_file.FakeFile, fake_file.FakeFileWrapper
    if isinstance(FakeFile.__dict__.get("_byte_contents"), Contents):
        return
    FakeFile._byte_contents = Contents()

    def is_large_file(self) -> bool:  # asked at every f.write: must not join the tail
        d = self.__dict__
        return d.get("_byte_contents") is None and not d.get(TAIL)

    FakeFile.is_large_file = is_large_file
    orig_flush = Wrapper.flush

    def stream(self):
        """The bytes below the handle's stream (a text stream's pending text pushed down)."""
        io = self._io
        io.flush()
        return io if self._binary else io._bytestream

    def note_end(self) -> None:
        """After a flush: is the stream the file's bytes, with its position at their end?"""
        d, obj = self.__dict__, self.file_object
        d[END] = None
        if self.is_stream or not self._is_open() or self._file_epoch != obj.epoch:
            return
        raw = stream(self)
        here = raw.tell()
        if raw.seek(0, 2) == here == obj.st_size:
            d[END] = here
        else:
            raw.seek(here)

    def first_end(self, obj) -> int | None:
        """Where a handle's first flush appends, if it only appends: the file's length, for
        a handle in append mode (open, write a line, close: a transcript, a log) while
        the file is as it was when the handle opened (`_file_epoch`: every change of its
        bytes, by any handle or faultsim, bumps the epoch). Then the stream's first bytes
        are the file's (pyfakefs fills the stream with them at open, `_flush_pos` their
        length), and in append mode the handle wrote only past them (pyfakefs keeps an
        append handle's stream at its end; a read puts it back there, a truncate flushes
        first and leaves the stream shorter: the whole flush). pyfakefs's own flush of an
        append handle lands the file's bytes plus the stream past `_flush_pos`: the same
        bytes as this append. Anything else: None (the whole flush, as before)."""
        if self.open_modes.append and self._file_epoch == obj.epoch \
                and self._flush_pos == obj.st_size:
            return obj.st_size
        return None

    def whole(self) -> None:
        self.__dict__[END] = None  # until this flush is done
        orig_flush(self)
        note_end(self)

    def flush(self) -> None:
        ip = active()
        if ip is None or ip.quiet or ip.killed or self.is_stream or not self.allow_update:
            return orig_flush(self)
        obj = self.file_object
        end = self.__dict__.get(END)
        if end is None and END not in self.__dict__:  # the handle's first flush
            end = first_end(self, obj)
        if end is None or end != obj.st_size or self._file_epoch != obj.epoch \
                or obj._side_effect is not None:
            return whole(self)
        self._check_open_file()
        raw = stream(self)
        here = raw.tell()
        size = raw.seek(0, 2)
        if size <= end:
            raw.seek(here)
            if size < end:  # truncated: not an append
                return whole(self)
            self.update_flush_pos()
            self.__dict__[END] = end if here == end else None
            return None
        # The stream's first `end` bytes are the file's: since the last flush the handle
        # only wrote, at or past them (a seek, a truncate and a read each flush first; in
        # append mode a read puts the stream back at its end).
        raw.seek(end)
        tail = raw.read()
        raw.seek(here)
        if not ip.appended(obj, end, tail):
            return whole(self)  # not the sandbox's file: the whole-file hook judges it
        obj.encoding = helpers.real_encoding(self._encoding)  # as set_contents does
        self.update_flush_pos()
        if self.filesystem.is_windows_fs:
            self._changed = True
        else:
            obj.st_ctime = obj.st_mtime = helpers.now()
        self._file_epoch = obj.epoch
        self._flush_related_files()
        self.__dict__[END] = obj.st_size if here == size else None
        return None

    flush.__wrapped__ = orig_flush  # type: ignore[attr-defined]
    Wrapper.flush = flush
