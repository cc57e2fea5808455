"""Benchmark: what a sweep spends writing file contents through the fake file system, apart
from what the trace's policy does at the same moment (issue 53, item 1).

A deterministic profile (cProfile) of a sweep charges pyfakefs's `set_contents` with
everything below it, and below it sits the tracer: `FsInterposer._content` announces the
write (`Tracer.before_write`) and records it (`Tracer.emit`), and there the sweep's policy
forks a child per kill point and collects finished ones (inprocess/forking.py). Those forks
and that waiting are the kill points' cost, not the write's. This script measures the
write's own CPU inside a real sweep, in the parent and in every fork:

  content   the outermost call of faultsim's content hooks (`FakeFile.set_initial_contents`
            as fs.py hooks it, and a file handle's flush as appends.py hooks it): encoding,
            comparing, hashing, pyfakefs's own flush and size, times, the byte copy; minus
            the time spent inside `Tracer.before_write` and `Tracer.emit` (the policy's
            forks, collections and kills). A call in which the process forked is not
            counted in the child (its clock starts again at the fork): a slight undercount.
  bytes     what reached `set_initial_contents` (whole files; an append's tail is not
            counted): the bytes copied, compared and hashed whole.
  sweep     CPU of the whole sweep (this interpreter and every fork it reaped), user and
            system together; its share in the content path is `content_share`.

Each process adds its figures to counters in shared memory. The counting itself costs
CPU that lands in `sweep` (a few microseconds a call), not in `content`.

Run: python bench/content_cost.py [--steps 25] [--crashes 1] [--workers 2]
     [--agents reference,jsonl_transcript]
Prints one line per agent, then one JSON line.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(1, str(ROOT / "bench"))

_cpu_ns = time.thread_time_ns  # neither freezegun nor the sandbox fakes it


def instrument():
    """Counters in shared memory (forks inherit them) and the timing wrappers: returns
    the counters {name: multiprocessing.Value}."""
    import multiprocessing

    from pyfakefs import fake_file

    from faultsim.core.trace import Tracer
    from faultsim.inprocess import fs

    fs.install()
    counters = {name: multiprocessing.Value("q", 0)
                for name in ("content_ns", "calls", "bytes", "policy_ns")}
    state = {"depth": 0, "policy_ns": 0}

    def add(name, value):
        c = counters[name]
        with c.get_lock():
            c.value += value

    def outermost(func, size_of):
        def timed(self, *args):
            size = size_of(self, args)  # every landing of bytes, nested ones too
            if size:
                add("bytes", size)
            if state["depth"]:
                return func(self, *args)
            state["depth"], state["policy_ns"] = 1, 0
            pid, start = os.getpid(), _cpu_ns()
            try:
                return func(self, *args)
            finally:
                spent = _cpu_ns() - start - state["policy_ns"]
                state["depth"] = 0
                if os.getpid() == pid:  # a fork inside: the child's clock started anew
                    add("content_ns", spent)
                    add("calls", 1)
        return timed

    def policy(func):
        def timed(self, *args, **kwargs):
            if not state["depth"]:
                return func(self, *args, **kwargs)
            pid, start = os.getpid(), _cpu_ns()
            try:
                return func(self, *args, **kwargs)
            finally:
                if os.getpid() == pid:
                    spent = _cpu_ns() - start
                    state["policy_ns"] += spent
                    add("policy_ns", spent)
        return timed

    def contents_size(obj, args):
        return len(args[0]) if args and args[0] is not None else 0

    def flushed_size(wrapper, args):
        return 0  # its bytes are counted where they land (set_initial_contents), if whole

    fake_file.FakeFile.set_initial_contents = outermost(
        fake_file.FakeFile.set_initial_contents, contents_size)
    fake_file.FakeFileWrapper.flush = outermost(fake_file.FakeFileWrapper.flush, flushed_size)
    Tracer.before_write = policy(Tracer.before_write)
    Tracer.emit = policy(Tracer.emit)
    return counters


def one(name: str, n: int, crashes: int, workers: int) -> dict:
    import anthropic  # noqa: F401  (imported once, outside the measured block)

    from faultsim.model import sdk
    from overhead import Timed, agent_and_scenario, count_resumed_requests

    import faultsim

    sdk.load()
    requests = count_resumed_requests()
    counters = instrument()
    with tempfile.TemporaryDirectory(prefix="faultsim-content-") as tmp:
        make_agent, scenario = agent_and_scenario(name, n, tmp)
    extra = {"coverage": "representative", "horizon": 1} if crashes == 2 else {}
    with Timed() as t:
        report = faultsim.explore(make_agent, scenario, crash_model="process",
                                  crashes=crashes, workers=workers, **extra)
    if not report.ok:
        raise SystemExit(f"bench/content_cost.py: {scenario.id}: the sweep found violations; "
                         "the agents measured here must pass")
    cpu = t.user + t.sys
    content = counters["content_ns"].value / 1e9
    calls = counters["calls"].value
    return {"agent": name, "steps": n, "crashes": crashes,
            "kill_points": len(report.runs[0].kill_points),
            "resumed_requests": requests.value,
            "sweep_cpu_s": round(cpu, 3), "sweep_sys_s": round(t.sys, 3),
            "wall_s": round(t.wall, 3),
            "content_cpu_s": round(content, 3), "content_calls": calls,
            "content_bytes": counters["bytes"].value,
            "content_us_per_call": round(1e6 * content / max(calls, 1), 1),
            "content_ms_per_resumed_request": round(
                1000 * content / max(requests.value, 1), 3),
            "policy_inside_content_cpu_s": round(counters["policy_ns"].value / 1e9, 3),
            "content_share": round(content / max(cpu, 1e-9), 4)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=25, help="the scenarios' N (default 25)")
    parser.add_argument("--crashes", type=int, default=1, choices=(1, 2),
                        help="2: pairs too (representative coverage, horizon 1)")
    parser.add_argument("--workers", type=int, default=2, help="the sweep's workers")
    parser.add_argument("--agents", default="reference,jsonl_transcript",
                        help="comma-separated: reference, jsonl_transcript")
    parser.add_argument("--one", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:  # one agent in this fresh interpreter: its result as JSON on stdout
        print(json.dumps(one(args.one, args.steps, args.crashes, args.workers)))
        return
    import subprocess

    results = []
    for name in args.agents.split(","):
        proc = subprocess.run([sys.executable, __file__, "--one", name, "--steps",
                               str(args.steps), "--crashes", str(args.crashes),
                               "--workers", str(args.workers)],
                              capture_output=True, text=True)
        if proc.returncode:
            sys.stderr.write(proc.stderr)
            raise SystemExit(proc.returncode)
        out = json.loads(proc.stdout.strip().splitlines()[-1])
        results.append(out)
        print(f"{name} N={args.steps} crashes={args.crashes}: content path "
              f"{out['content_cpu_s']} s CPU of the sweep's {out['sweep_cpu_s']} s "
              f"({100 * out['content_share']:.1f} %), {out['content_calls']} calls, "
              f"{out['content_us_per_call']} us a call, "
              f"{out['content_ms_per_resumed_request']} ms per resumed request; "
              f"the policy inside those calls (forks, collection): "
              f"{out['policy_inside_content_cpu_s']} s in this interpreter and the forks")
    print(json.dumps({"by_agent": {r["agent"]: r for r in results},
                      "content_share": results[0]["content_share"]}))


if __name__ == "__main__":
    main()
