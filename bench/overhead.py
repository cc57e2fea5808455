"""Benchmark: what faultsim adds to an agent's step, from the bare step to the sweep, in
one run (issue 53, item 1).

The same agent steps (N lookups, then the final answer: bench/scaling.py's scenario for
the reference agent; N charges on a keyed payment service, then the final answer, for
examples/jsonl_transcript, an append-only fsynced transcript) run six ways, each tier in
this order in one fresh interpreter per agent:
  bare      the agent's own `run()` on a real directory on tmpfs (/dev/shm when it is
            tmpfs, else the system's temp folder, its file system named in `bare_dir`),
            the real anthropic SDK, the fake Claude's answers through its in-process
            transport (a `World` nothing subscribes to: no tracing, no guards, no
            frozen clock, no pyfakefs)
  guarded   the same through `faultsim.run_once`'s runner (runner.ScenarioRun): the
            frozen world clock and the network and process guards added, on tmpfs
  pyfakefs  the same as bare, inside plain pyfakefs (its Patcher as it ships; before faultsim
            installs its speed-ups, which are then installed for the rest)
  tuned     the same, inside pyfakefs as faultsim sets it up (its lookup caches and
            memoised path functions on, pyfakefs's stack check off), no tracing: what
            faultsim's in-process design cannot go below
  traced    a clean incarnation in faultsim's sandbox (`Explorer.incarnation`: tracing,
            frozen clock, seeded draws, guards), killed nowhere
  sweep     `faultsim.explore` (single crashes, process model, in-process mode): CPU of
            this interpreter and every process it forked, user and system apart, per
            resumed model request (requests the fake logged in an incarnation after the
            first, counted in shared memory across the forks) and per kill point
The first four give CPU per step: CPU / model requests served (each of N + 1 requests
is one step: the agent's work up to it and the answer). Prints one line per agent, then
one JSON line; its top-level ratios are the reference agent's, `by_agent` has each:
  sweep_to_bare_ratio     CPU per resumed model request in the sweep / CPU per bare step
  pyfakefs_to_bare_ratio  CPU per step under plain pyfakefs / bare
  guarded_to_bare_ratio   CPU per step of run_once's way (frozen clock, guards) / bare
  tuned_to_bare_ratio     under faultsim's pyfakefs, untraced / bare: the floor
  traced_to_bare_ratio    a traced clean incarnation / bare
  system_share            system CPU / all CPU of the sweep
  floor_share             tuned step / resumed request in the sweep: what of a resumed
                          request's CPU the agent's own work under faultsim's pyfakefs
                          is (the rest is faultsim's tracing, sandbox and sweep work)
CPU seconds are printed beside wall seconds. Ratios within one run are the figures to
read: the machine may be shared; nothing here asserts a time.

Run: python bench/overhead.py [--steps 25] [--repeat 10] [--workers 2]
     [--agents reference,jsonl_transcript]
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path

import freezegun.api as _real_time  # a sandbox freezes time.perf_counter, even a
# module's own name for it: read through the module at each call

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(1, str(ROOT / "bench"))

AGENTS = ("reference", "jsonl_transcript")


def jsonl_scenario_text(n: int) -> str:
    """N charges (keyed: a repeat is deduplicated), then the final answer: the transcript
    grows by two whole lines a step, appended and fsynced."""
    answer = f"Charged {n} orders."
    lines = [f'id = "charges_{n}_steps"',
             f'task = "Charge the orders ORD-1 to ORD-{n}, one at a time, and say how many."',
             f'expected_final_answer = "{answer}"', "", "[checkpoint]",
             'files = ["transcript.jsonl"]', "", "[fault_profile]",
             'crash_models = ["process"]', "crashes = 1", "",
             "[services.payments]", 'kind = "keyed"']
    for i in range(1, n + 1):
        lines += ["", "[[turns]]", f'tool_calls = [{{ name = "charge_card", input = '
                  f'{{ order_id = "ORD-{i}", amount_cents = {100 * i} }} }}]']
    lines += ["", "[[turns]]", f'final = "{answer}"', ""]
    return "\n".join(lines)


def agent_and_scenario(name: str, n: int, tmp: str):
    """(make_agent, scenario) of one agent at N steps."""
    import faultsim

    if name == "reference":
        import reference_agent
        from scaling import scenario_text

        text, factory = scenario_text(n), reference_agent.make_agent
    elif name == "jsonl_transcript":
        text = jsonl_scenario_text(n)
        factory = faultsim.load_factory(
            f"{ROOT / 'examples' / 'jsonl_transcript' / 'agent.py'}:make_agent")
    else:
        raise SystemExit(f"bench/overhead.py: --agents: unknown agent {name!r} "
                         f"(known: {', '.join(AGENTS)})")
    path = Path(tmp) / f"{name}_{n}.toml"
    path.write_text(text)
    return factory, faultsim.load_scenario(path)


def usage() -> tuple[float, float]:
    """(user, system) CPU seconds of this interpreter and its ended children (the forks)."""
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(
        resource.RUSAGE_CHILDREN)
    return me.ru_utime + kids.ru_utime, me.ru_stime + kids.ru_stime


def tmpfs_dir() -> tuple[str, str]:
    """A folder for the bare runs: on /dev/shm when it is tmpfs; and its file system."""
    mounts = {}
    for line in Path("/proc/mounts").read_text().splitlines():
        parts = line.split()
        mounts[parts[1]] = parts[2]
    base = "/dev/shm" if mounts.get("/dev/shm") == "tmpfs" and os.access(
        "/dev/shm", os.W_OK) else tempfile.gettempdir()
    fs = mounts.get(base) or mounts.get("/tmp" if base.startswith("/tmp") else "/", "?")
    return tempfile.mkdtemp(prefix="faultsim-overhead-", dir=base), fs


class Timed:
    """CPU (user, system) and wall seconds of a block, and the steps it served."""

    def __enter__(self) -> "Timed":
        self.steps = 0
        self.cpu0, self.wall0 = usage(), _real_time.real_perf_counter()
        return self

    def __exit__(self, *exc) -> None:
        (u, s), (u0, s0) = usage(), self.cpu0
        self.user, self.sys = u - u0, s - s0
        self.wall = _real_time.real_perf_counter() - self.wall0

    def per_step(self) -> dict:
        n = max(self.steps, 1)
        return {"steps": self.steps, "cpu_ms": round(1000 * (self.user + self.sys) / n, 3),
                "user_ms": round(1000 * self.user / n, 3),
                "sys_ms": round(1000 * self.sys / n, 3),
                "wall_ms": round(1000 * self.wall / n, 3)}


def untraced_run(make_agent, scenario, workdir: str) -> int:
    """One clean run of the agent's own `run()`, served by the fake through the real SDK's
    in-process transport, nothing subscribed to the world: the model requests it made."""
    from faultsim.agent import outcome_of
    from faultsim.pipeline.runner import make_env

    world = scenario.build_world()
    world.begin_incarnation()
    os.makedirs(workdir)
    with world.model.serving_new_clients():
        outcome = outcome_of(make_agent(make_env(scenario, world, Path(workdir))).run())
    if outcome.final_answer != scenario.expected_final_answer:
        raise SystemExit(f"bench/overhead.py: {scenario.id}: the untraced run ended with "
                         f"{outcome!r}, not the expected final answer")
    return len(world.model.requests)


def tier_untraced(make_agent, scenario, base: str, repeat: int) -> dict:
    with Timed() as t:
        for i in range(repeat):
            t.steps += untraced_run(make_agent, scenario, f"{base}/run{i}")
    return t.per_step()


def tier_guarded(make_agent, scenario, base: str, repeat: int) -> dict:
    """`faultsim.run_once`'s way (runner.ScenarioRun) on the same tmpfs: the bare run plus
    the frozen clock and the network and process guards, still untraced, no pyfakefs."""
    from faultsim.pipeline.runner import ScenarioRun

    with Timed() as t:
        for i in range(repeat):
            os.makedirs(f"{base}/guarded{i}")
            with ScenarioRun(scenario, make_agent, workdir=Path(f"{base}/guarded{i}")) as run:
                outcome = run.incarnation()
                if outcome.final_answer != scenario.expected_final_answer:
                    raise SystemExit(f"bench/overhead.py: {scenario.id}: the guarded run "
                                     f"ended with {outcome!r}")
                t.steps += len(run.world.model.requests)
    return t.per_step()


def tier_plain_pyfakefs(make_agent, scenario, repeat: int) -> dict:
    from pyfakefs.fake_filesystem_unittest import Patcher

    from faultsim.inprocess.sandbox import readable_real_dirs

    readable = readable_real_dirs()
    with Patcher() as patcher:
        for path in readable:  # the agent's own modules, read as faultsim's sandbox does
            patcher.fs.add_real_directory(path, read_only=True, lazy_read=True)
        patcher.fs.create_dir("/overhead-bench")
        return tier_untraced(make_agent, scenario, "/overhead-bench", repeat)


@contextmanager
def tuned_pyfakefs():
    """pyfakefs as Explorer.__enter__ sets it up, with an interposer active but quiet
    (faultsim's lookup caches on, nothing traced): yields the sandbox's folder."""
    from pyfakefs.fake_filesystem_unittest import Patcher

    from faultsim.inprocess.fs import FsInterposer, install
    from faultsim.inprocess.sandbox import SANDBOX, readable_real_dirs
    from faultsim.core.trace import Tracer

    install()
    readable = readable_real_dirs()
    with Patcher() as patcher:
        for module in patcher.fake_modules.values():
            if isinstance(getattr(module, "skip_names", None), set):
                module.skip_names = set()
        for path in readable:
            patcher.fs.add_real_directory(path, read_only=True, lazy_read=True)
        patcher.fs.create_dir(SANDBOX)
        ip = FsInterposer(patcher.fs, SANDBOX, Tracer())
        ip.quiet = 1
        with ip:
            yield SANDBOX


def tier_tuned_pyfakefs(make_agent, scenario, repeat: int) -> dict:
    with tuned_pyfakefs() as sandbox:
        return tier_untraced(make_agent, scenario, sandbox, repeat)


def tier_traced(make_agent, scenario, repeat: int) -> dict:
    from faultsim.inprocess.sandbox import Explorer

    with Explorer(make_agent, scenario, agent_name="bench") as ex, Timed() as t:
        for _ in range(repeat):
            ex.reset_sandbox()
            world = ex.new_world()
            inc = ex.incarnation(world, timed=False)
            if inc.outcome is None or inc.outcome.final_answer != scenario.expected_final_answer:
                raise SystemExit(f"bench/overhead.py: {scenario.id}: the traced run ended "
                                 f"with {inc.error or inc.outcome!r}")
            t.steps += len(world.model.requests)
    return t.per_step()


def count_resumed_requests():
    """A counter in shared memory (forks inherit it) of the model requests the fake logs
    in an incarnation after the first. Counted where the fake logs an answered request
    (World.emit of "model.response"), below the transport: no frame comes between the
    agent and the fake, so convergence's checks see the stack they always see."""
    import multiprocessing

    from faultsim.world.world import World

    counter = multiprocessing.Value("q", 0)
    emit = World.emit

    def counting_emit(self, kind, **info):
        if kind == "model.response" and info["record"].incarnation > 1:
            with counter.get_lock():
                counter.value += 1
        emit(self, kind, **info)

    World.emit = counting_emit  # before any world is built: each binds it as on_event
    return counter


def tier_sweep(make_agent, scenario, workers: int, counter) -> dict:
    import faultsim

    with Timed() as t:
        report = faultsim.explore(make_agent, scenario, crash_model="process", crashes=1,
                                  workers=workers)
    (run,) = report.runs
    if not report.ok:
        raise SystemExit(f"bench/overhead.py: {scenario.id}: the sweep found violations; "
                         "the agents measured here must pass")
    requests, points, cpu = counter.value, len(run.kill_points), t.user + t.sys
    return {"kill_points": points, "resumed_runs": run.judged,
            "converged": getattr(run, "converged", 0), "met": getattr(run, "met", 0),
            "resumed_requests": requests,
            "cpu_s": round(cpu, 3), "user_s": round(t.user, 3), "sys_s": round(t.sys, 3),
            "wall_s": round(t.wall, 3),
            "cpu_ms_per_resumed_request": round(1000 * cpu / max(requests, 1), 3),
            "user_ms_per_resumed_request": round(1000 * t.user / max(requests, 1), 3),
            "sys_ms_per_resumed_request": round(1000 * t.sys / max(requests, 1), 3),
            "cpu_ms_per_kill_point": round(1000 * cpu / max(points, 1), 3),
            "user_ms_per_kill_point": round(1000 * t.user / max(points, 1), 3),
            "sys_ms_per_kill_point": round(1000 * t.sys / max(points, 1), 3)}


def one(name: str, n: int, repeat: int, workers: int) -> dict:
    """Every tier for one agent, in this interpreter, in the order the module says."""
    import anthropic  # noqa: F401  (imported once, outside every measured block)

    from faultsim.model import sdk

    sdk.load()
    counter = count_resumed_requests()
    with tempfile.TemporaryDirectory(prefix="faultsim-overhead-") as tmp:
        make_agent, scenario = agent_and_scenario(name, n, tmp)
    bare_dir, fs = tmpfs_dir()
    try:
        untraced_run(make_agent, scenario, f"{bare_dir}/warm-up")  # first-call caches
        out = {"agent": name, "steps": n, "repeat": repeat, "bare_dir": f"{bare_dir} ({fs})",
               "bare": tier_untraced(make_agent, scenario, bare_dir, repeat),
               "guarded": tier_guarded(make_agent, scenario, bare_dir, repeat)}
    finally:
        import shutil

        shutil.rmtree(bare_dir, ignore_errors=True)
    out["pyfakefs"] = tier_plain_pyfakefs(make_agent, scenario, repeat)
    out["tuned"] = tier_tuned_pyfakefs(make_agent, scenario, repeat)
    out["traced"] = tier_traced(make_agent, scenario, repeat)
    out["sweep"] = tier_sweep(make_agent, scenario, workers, counter)
    bare, sweep = out["bare"]["cpu_ms"], out["sweep"]
    out["ratios"] = {
        "sweep_to_bare_ratio": round(sweep["cpu_ms_per_resumed_request"] / bare, 3),
        "pyfakefs_to_bare_ratio": round(out["pyfakefs"]["cpu_ms"] / bare, 3),
        "guarded_to_bare_ratio": round(out["guarded"]["cpu_ms"] / bare, 3),
        "tuned_to_bare_ratio": round(out["tuned"]["cpu_ms"] / bare, 3),
        "traced_to_bare_ratio": round(out["traced"]["cpu_ms"] / bare, 3),
        "system_share": round(sweep["sys_s"] / max(sweep["cpu_s"], 1e-9), 3),
        "floor_share": round(out["tuned"]["cpu_ms"]
                             / max(sweep["cpu_ms_per_resumed_request"], 1e-9), 3),
    }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=25, help="the scenarios' N (default 25)")
    parser.add_argument("--repeat", type=int, default=10,
                        help="clean runs per untraced and traced tier (default 10)")
    parser.add_argument("--workers", type=int, default=2, help="the sweep's workers")
    parser.add_argument("--agents", default=",".join(AGENTS),
                        help=f"comma-separated, of: {', '.join(AGENTS)}")
    parser.add_argument("--one", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one is not None:  # the child: one agent, one JSON line
        print(json.dumps(one(args.one, args.steps, args.repeat, args.workers)))
        return
    rows = {}
    for name in args.agents.split(","):
        if name not in AGENTS:
            sys.exit(f"bench/overhead.py: --agents: unknown agent {name!r} "
                     f"(known: {', '.join(AGENTS)})")
        done = subprocess.run([sys.executable, __file__, "--one", name, "--steps",
                               str(args.steps), "--repeat", str(args.repeat), "--workers",
                               str(args.workers)], capture_output=True, text=True, cwd=ROOT)
        if done.returncode != 0:
            sys.exit(f"bench/overhead.py: {name} failed:\n{done.stderr[-2000:]}")
        row = rows[name] = json.loads(done.stdout.strip().splitlines()[-1])
        s, r = row["sweep"], row["ratios"]
        print(f"{name}, {args.steps} steps: CPU per step (ms; wall beside) bare "
              f"{row['bare']['cpu_ms']:.2f} ({row['bare']['wall_ms']:.2f}) on "
              f"{row['bare_dir']}, guarded {row['guarded']['cpu_ms']:.2f} "
              f"({row['guarded']['wall_ms']:.2f}), pyfakefs {row['pyfakefs']['cpu_ms']:.2f} "
              f"({row['pyfakefs']['wall_ms']:.2f}), tuned {row['tuned']['cpu_ms']:.2f} "
              f"({row['tuned']['wall_ms']:.2f}), traced {row['traced']['cpu_ms']:.2f} "
              f"({row['traced']['wall_ms']:.2f}); sweep {s['cpu_s']:.1f} s CPU "
              f"({s['user_s']:.1f} user + {s['sys_s']:.1f} sys; wall {s['wall_s']:.1f} s), "
              f"{s['kill_points']} kill points, {s['resumed_requests']} resumed requests: "
              f"{s['cpu_ms_per_resumed_request']:.2f} ms per resumed request, "
              f"{s['cpu_ms_per_kill_point']:.2f} ms per kill point; sweep/bare "
              f"{r['sweep_to_bare_ratio']:.2f}x, system share "
              f"{100 * r['system_share']:.0f} %", flush=True)
    first = rows[next(iter(rows))]
    print(json.dumps({"agent": first["agent"], "steps": args.steps,
                      **first["ratios"], "by_agent": rows}))


if __name__ == "__main__":
    main()
