"""Cheaper forks: the heap of a process that forks a child per kill point, backed by
transparent huge pages.

A fork copies the parent's page tables and an exit tears the child's down: both cost in
proportion to the 4 KiB pages mapped, some 40,000 for an interpreter that has imported the
Anthropic SDK (160 MB), about 12 ms of CPU for a fork and exit on a virtual machine here,
more than faultsim's own bookkeeping at a kill point. With the heap in 2 MiB pages there
are 512 times fewer entries to copy and tear down. `python bench/fork_cost.py` measures
both ways in one run.

What it changes is where memory sits, never what runs: a child still shares every page
copy-on-write, and since Linux 5.8 a write to a shared huge page splits its mapping and
copies the one 4 KiB page written, as before (so children that touch memory cost what
they did). Best effort: Linux only; MADV_COLLAPSE (Linux 6.1) turns what is resident now
into huge pages at once, MADV_HUGEPAGE lets what the region grows into come in huge. Where
either is refused (another kernel, THP set to `never`, another OS) nothing changes.
"""
from __future__ import annotations

import sys

from ..core.realfile import read_bytes

# A collapse copies what is resident into fresh huge pages (about 1 s for 100 MB on a busy
# 2-core machine): it pays once a process has forked some hundreds of children (about 6 ms
# of CPU saved on each), so it is done after FIRST forks and again at each doubling, which
# takes in what the heap grew since at a cost that stays a small share of the forks'.
FIRST = 400
_forks = [0, FIRST]  # forks made in this process, the count at which to collapse next

_MADV_HUGEPAGE = 14
_MADV_COLLAPSE = 25
_HUGE = 1 << 21
# the ranges advised already in this process: a madvise splits and merges the kernel's
# regions, so the next look at /proc/self/maps shows other bounds around the same memory
_advised: list[tuple[int, int]] = []


def before_fork() -> None:
    """Called before each fork of a process that forks a child per kill point (the in-process
    driver, a subprocess mode fork server): collapses the heap when that has begun to pay."""
    _forks[0] += 1
    if _forks[0] >= _forks[1]:
        _forks[1] *= 2
        collapse_heap()


def collapse_heap() -> int:
    """Back the process's private writable anonymous memory by huge pages, where the kernel
    lets it; returns the bytes newly collapsed (0 where nothing could be). Cheap to call
    again: ranges done before are skipped."""
    if not sys.platform.startswith("linux"):
        return 0
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        madvise = libc.madvise
        madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        lines = read_bytes("/proc/self/maps").decode().splitlines()
    except (OSError, AttributeError, UnicodeDecodeError):
        return 0
    done = 0
    for line in lines:
        fields = line.split()
        if len(fields) < 5 or not fields[1].startswith("rw") or fields[1][3] != "p":
            continue
        if len(fields) > 5 and fields[5] != "[heap]":
            continue  # file mappings, the stack, vdso: not the heap
        start, end = (int(x, 16) for x in fields[0].split("-"))
        for lo, hi in _uncovered((start + _HUGE - 1) & ~(_HUGE - 1), end & ~(_HUGE - 1)):
            _advised.append((lo, hi))
            if madvise(lo, hi - lo, _MADV_HUGEPAGE) != 0:
                continue
            if madvise(lo, hi - lo, _MADV_COLLAPSE) == 0:
                done += hi - lo
    return done


def _uncovered(start: int, end: int) -> list[tuple[int, int]]:
    """The parts of [start, end) no range advised before covers, at least a huge page each."""
    parts, at = [], start
    for lo, hi in sorted(_advised):
        if hi <= at or lo >= end:
            continue
        if lo > at:
            parts.append((at, lo))
        at = max(at, hi)
    if at < end:
        parts.append((at, end))
    return [(lo, hi) for lo, hi in parts if hi - lo >= _HUGE]
