"""faultsim.host.hugepages: the forking processes' heap in huge pages, where the kernel allows it
(cheaper forks; `python bench/fork_cost.py` measures by how much)."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from faultsim.host import hugepages
from faultsim.core.realfile import read_bytes

THP = Path("/sys/kernel/mm/transparent_hugepage/enabled")


def _anon_huge_kb() -> int:
    text = read_bytes(f"/proc/{os.getpid()}/smaps_rollup").decode()
    return int(text.split("AnonHugePages:")[1].split()[0])


def test_the_real_maps_are_read_under_the_fake_filesystem():
    # the driver forks inside pyfakefs: an `open` there would see the fake /proc, or none
    from pyfakefs.fake_filesystem_unittest import Patcher

    with Patcher():
        assert not os.path.exists("/proc/self/maps")
        assert b"[stack]" in read_bytes("/proc/self/maps")


@pytest.mark.skipif(not sys.platform.startswith("linux") or not THP.exists()
                    or "[never]" in THP.read_text(), reason="no transparent huge pages here")
def test_a_heap_is_collapsed_into_huge_pages(monkeypatch):
    monkeypatch.setattr(hugepages, "_advised", [])
    ballast = [bytearray(4096) for _ in range(20_000)]  # some 80 MB of heap to collapse
    before = _anon_huge_kb()
    assert hugepages.collapse_heap() > 0
    assert _anon_huge_kb() > before
    assert hugepages.collapse_heap() == 0  # nothing new: the ranges done are skipped
    del ballast


def test_collapses_once_forks_add_up_then_at_each_doubling(monkeypatch):
    calls = []
    monkeypatch.setattr(hugepages, "_forks", [0, hugepages.FIRST])
    monkeypatch.setattr(hugepages, "collapse_heap", lambda: calls.append(
        hugepages._forks[0]) or 0)
    for _ in range(hugepages.FIRST * 4):
        hugepages.before_fork()
    assert calls == [hugepages.FIRST, 2 * hugepages.FIRST, 4 * hugepages.FIRST]
