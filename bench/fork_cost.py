"""Benchmark: what a fork and exit costs the in-process executor, with the heap in 4 KiB
pages and in huge pages (faultsim.host.hugepages), in one run.

The forking executor forks a child at every kill point of a first-crash sweep; a child
whose states are all known only dies and reports. This script builds a process like the
driver (the Anthropic SDK, faultsim and the reference agent imported, a heap of a few tens
of MB, `gc.freeze()`d), then times N children that exit at once and N that read part of
the heap first (as a resumed run touches memory), before and after `collapse_heap()`.
Prints one line per case, then one JSON line:
  rss_mb                 the process's resident set before the children
  collapsed_mb           what collapse_heap() turned into huge pages
  fork_exit_cpu_ms       parent + child CPU per bare fork and exit: {"4k": .., "huge": ..}
  touch_cpu_ms           the same for children that read the heap before exiting
  ratio_fork_exit        4k / huge (above 1: huge pages are cheaper)
  ratio_touch            4k / huge for the touching children

Run: python bench/fork_cost.py [-n 200]
Ratios within one run are the figures to read: the machine may be shared.
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import resource
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def _cpu() -> float:
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(
        resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def _children(n: int, heap: list, touch: bool) -> float:
    before = _cpu()
    for _ in range(n):
        pid = os.fork()
        if pid == 0:
            if touch:
                total = 0
                for item in heap[::5]:
                    total += item["n"]
            os._exit(0)
        os.waitpid(pid, 0)
    return (_cpu() - before) / n * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=200, help="children per case")
    args = parser.parse_args()

    import anthropic  # noqa: F401  the driver has the SDK loaded

    import faultsim.inprocess.sandbox  # noqa: F401
    import reference_agent  # noqa: F401
    from faultsim.host.hugepages import collapse_heap

    heap = [{"n": i, "text": f"item {i}"} for i in range(200_000)]
    gc.freeze()
    rss = int(Path(f"/proc/{os.getpid()}/status").read_text().split("VmRSS:")[1].split()[0])
    small = {"4k": _children(args.n, heap, False)}
    touched = {"4k": _children(max(1, args.n // 4), heap, True)}
    started = time.perf_counter()
    collapsed = collapse_heap()
    took = time.perf_counter() - started
    small["huge"] = _children(args.n, heap, False)
    touched["huge"] = _children(max(1, args.n // 4), heap, True)
    for name, figures in (("fork+exit", small), ("fork+read+exit", touched)):
        print(f"{name:16} 4k {figures['4k']:6.2f} ms CPU   huge {figures['huge']:6.2f} ms CPU")
    print(f"collapse_heap: {collapsed >> 20} MB in {took * 1000:.0f} ms")
    print(json.dumps({"rss_mb": rss // 1024, "collapsed_mb": collapsed >> 20,
                      "fork_exit_cpu_ms": {k: round(v, 2) for k, v in small.items()},
                      "touch_cpu_ms": {k: round(v, 2) for k, v in touched.items()},
                      "ratio_fork_exit": round(small["4k"] / small["huge"], 2),
                      "ratio_touch": round(touched["4k"] / touched["huge"], 2)}))


if __name__ == "__main__":
    main()
