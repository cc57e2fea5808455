"""The fork server: a process that pays the imports once (anthropic alone costs over a
second) and then forks one child per incarnation.

    python -m faultsim.real.server OUT_FD      (started by faultsim.real.pool, never by hand)

It reads frames on stdin: first its set-up (agent, scenario, sandbox directory, store),
then jobs. For each job it puts the starting state in place (files, and the Redis
database with the downtime's expiries applied), forks, waits for the child, then reads
what the child left behind (the directory, the Redis data) and sends it on OUT_FD, after
the child's own report. One child at a time, so the two never interleave on the pipe.

It never outlives faultsim: it dies with its parent (PR_SET_PDEATHSIG) and stops at EOF
on stdin; its children die with it the same way.
"""
from __future__ import annotations

import os
import select
import signal
import sys
import traceback
from dataclasses import dataclass
from typing import Any

import freezegun.api as _real_time  # perf_counter is frozen in the server; this is not

from . import wire
from .lifetime import die_with_parent


@dataclass
class Context:
    scenario: Any
    make_agent: Any
    root: str
    seed: str
    timeout: float | None
    clock_factory: Any
    store: Any
    redis: Any = None  # a client on this server's Redis database, for snapshots

    @staticmethod
    def left_behind(ctx: "Context") -> dict:
        return _left_behind(ctx)


REDIS_PREFIX = "@"  # crash-state entries that are Redis keys, not files ("@redis/KEY")


def _setup(init: dict) -> Context:
    import gc
    import importlib

    importlib.import_module("anthropic")  # the expensive import, paid once here
    import freezegun

    from ..agent import Store, factory_for
    from ..interpose import sqlite as sqlite_trace
    from ..scenario import load_scenario
    from . import fstrace

    for entry in reversed(init.get("path", [])):  # import what faultsim could import
        if entry not in sys.path:
            sys.path.insert(0, entry)
    fstrace.install()  # before the agent is imported: `from os import replace` is traced
    sqlite_trace.install(fstrace.emit)
    scenario = load_scenario(init["scenario"])
    redis_client = None
    store = Store("file")
    if scenario.store.kind == "sqlite":
        store = Store("sqlite", path=__import__("pathlib").Path(init["root"]) / "store.db")
    elif scenario.store.kind == "redis":
        import redis

        from ..interpose import redis as redis_trace
        redis_trace.install(fstrace.emit)
        store = Store("redis", url=init["redis_url"])
        redis_client = redis.Redis.from_url(init["redis_url"])
    make_agent = factory_for(init["agent"], scenario)
    _warm_up(scenario)
    freezer = freezegun.freeze_time(scenario.start_time.replace("+00:00", ""))
    factory = freezer.start()  # once: each start rescans every loaded module
    gc.collect()
    gc.freeze()  # children share these pages copy-on-write; keep the collector off them
    return Context(scenario, make_agent, init["root"], init["seed"], init["timeout"],
                   factory, store, redis_client)


def _warm_up(scenario: Any) -> None:
    """One model call through the real SDK in the server itself, on a throwaway world:
    the SDK builds its clients and response models lazily, and every child would pay for
    that again (about 0.4 s). The agent itself is not run here: its module-level state
    must start fresh in each child, as in a new process."""
    world = scenario.build_world()
    with world.model.serving_new_clients():
        client = world.model.client(max_retries=0)
        try:
            response = client.messages.create(
                model=scenario.model, max_tokens=16,
                messages=[{"role": "user", "content": scenario.task}])
            for block in response.content:  # serializers are built lazily too
                block.model_dump(mode="json", exclude_none=True)
            response.model_dump(mode="json", exclude_none=True)
        except Exception:
            pass  # warming only: what the fake answered does not matter
    from anthropic.types import Message, TextBlock, ToolUseBlock
    for block in (TextBlock(type="text", text="."),
                  ToolUseBlock(type="tool_use", id="toolu_warm", name="warm", input={})):
        Message(id="msg_warm", type="message", role="assistant", model=scenario.model,
                content=[block], stop_reason="end_turn", stop_sequence=None,
                usage={"input_tokens": 1, "output_tokens": 1}
                ).model_dump(mode="json", exclude_none=True)
        block.model_dump(mode="json", exclude_none=True)


def _prepare(ctx: Context, job: dict) -> None:
    from . import fstrace

    files = job["files"] or {}
    fstrace.restore(ctx.root, {k: v for k, v in files.items()
                               if not k.startswith(REDIS_PREFIX)})
    if ctx.redis is not None:
        from ..world import redis_state

        entries = {k[len(REDIS_PREFIX):]: v for k, v in files.items()
                   if k.startswith(REDIS_PREFIX)}
        if job["downtime"]:
            entries = redis_state.apply_downtime(entries, job["downtime"])
        redis_state.restore(ctx.redis, entries)


def _left_behind(ctx: Context) -> dict:
    from . import fstrace

    files = fstrace.snapshot(ctx.root)
    if ctx.redis is not None:
        from ..world import redis_state

        for key, value in redis_state.snapshot(ctx.redis).items():
            if key.startswith(redis_state.TTL):
                # the server's TTLs tick in real time while the world's clock stands still:
                # whole seconds (rounded up) keep equal states equal
                value = str(-(-int(value) // 1000) * 1000).encode()
            files[REDIS_PREFIX + key] = value
    return files


def _wait(pid: int, deadline: float | None) -> tuple[int | None, bool]:
    """The child's wait status, or (None, True) when it outlived the deadline (killed)."""
    fd = os.pidfd_open(pid)
    try:
        timeout = None if deadline is None else deadline
        ready, _, _ = select.select([fd], [], [], timeout)
        if not ready:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return None, True
        return os.waitpid(pid, 0)[1], False
    finally:
        os.close(fd)


def _describe(status: int | None, overdue: bool) -> tuple[str, int | None]:
    if overdue:
        return "overdue", signal.SIGKILL
    if os.WIFSIGNALED(status):
        return "signal", os.WTERMSIG(status)
    return "exit", os.WEXITSTATUS(status)


def main() -> None:
    out_fd = int(sys.argv[1])
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # faultsim decides when we stop
    die_with_parent()
    try:
        init = wire.receive(0)
        ctx = _setup(init)
    except EOFError:
        return
    except BaseException:
        wire.send(out_fd, {"kind": "setup-failed", "error": traceback.format_exc()})
        return
    wire.send(out_fd, {"kind": "ready", "pid": os.getpid()})
    me = os.getpid()
    deadline = None if not ctx.timeout else 3 * ctx.timeout + 5
    while True:
        try:
            job = wire.receive(0)
        except EOFError:
            return
        started = _real_time.real_perf_counter()
        _prepare(ctx, job)
        pid = os.fork()
        if pid == 0:
            try:
                die_with_parent()
                if os.getppid() != me:  # the server died between fork and prctl
                    os._exit(1)
                signal.signal(signal.SIGINT, signal.SIG_DFL)
                from .child import run_job
                run_job(job, ctx, out_fd)
            except BaseException:
                try:
                    wire.send(out_fd, {"job": job["id"], "kind": "crashed",
                                       "error": traceback.format_exc()})
                finally:
                    os._exit(70)
            os._exit(0)
        status, overdue = _wait(pid, job.get("deadline", deadline))
        how, code = _describe(status, overdue)
        wire.send(out_fd, {"job": job["id"], "kind": "exit", "how": how, "code": code,
                           "files": _left_behind(ctx),
                           "seconds": _real_time.real_perf_counter() - started})


if __name__ == "__main__":
    main()
