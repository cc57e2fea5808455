"""The fork server: a process that pays the imports once (anthropic alone costs over a
second) and then forks one child per incarnation.

    python -m faultsim.real.server OUT_FD RUN_DIR    (started by faultsim.real.pool only)

It reads frames on stdin: first its set-up (agent, scenario, sandbox directory, store),
then jobs. Its children see its sandbox directory at the run's one path
(faultsim.real.samepath): the server makes that so before anything else. For each job
it puts the starting state in place (files, and the Redis database with the downtime's
expiries applied), forks, waits for the child, then reads what the child left behind
(the directory, the Redis data) and sends it on OUT_FD, after the child's own report. One child at a time, so the two never interleave on the pipe.

It stops when faultsim sends None. It never outlives faultsim: when faultsim dies
(PR_SET_PDEATHSIG delivers PARENT_DIED), or its ends of the pipes close without that stop,
the server kills its child, removes the run folder RUN_DIR (faultsim's own clean-up never
ran) and exits; its children die with it by SIGKILL.
"""
from __future__ import annotations

import os
import select
import shutil
import signal
import sys
import traceback
from dataclasses import dataclass
from typing import Any, NoReturn

import freezegun.api as _real_time  # perf_counter is frozen in the server; this is not

from ..host.hugepages import before_fork
from ..host import jail as _jail
from . import wire
from ..host.lifetime import PARENT_DIED, die_with_parent
from .samepath import SamePath, establish


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
    same: SamePath | None = None  # how `root` is this server's own directory
    jail: Any = None  # the namespaces its children enter (faultsim.host.jail)
    # the TTLs its commands set (redis_state.TtlWatch: this process's own MONITOR), and
    # those the job's starting state put in place (a driving child's watch starts there)
    ttl: Any = None
    restored: dict | None = None

    @staticmethod
    def left_behind(ctx: "Context") -> dict:
        return _left_behind(ctx)


REDIS_PREFIX = "@"  # crash-state entries that are Redis keys, not files ("@redis/KEY")


def _setup(init: dict, same: SamePath) -> Context:
    import gc

    from ..model import sdk

    # the collector off through the imports and the warm-up: their some 160,000 objects
    # nearly all live on, and the collections their allocations set off (full ones among
    # them, each over the growing heap) are CPU every server pays for nothing; what they
    # leave is collected once, below, and frozen
    gc.disable()
    sdk.load()  # the expensive import of anthropic, paid once here (an unserved one refused)
    from ..agent import Store
    from ..world.clock import freeze
    from ..settings.loading import factory_for
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
        store = Store("sqlite", path=__import__("pathlib").Path(same.root) / "store.db")
    elif scenario.store.kind == "redis":
        import redis

        from ..interpose import redis as redis_trace
        redis_trace.install(fstrace.emit)
        store = Store("redis", url=init["redis_url"])
        redis_client = redis.Redis.from_url(init["redis_url"])
    make_agent = factory_for(init["agent"], scenario)
    _warm_up(scenario)
    freezer = freeze(scenario.start_time.replace("+00:00", ""))
    factory = freezer.start()  # once: each start rescans every loaded module
    gc.collect()
    gc.freeze()  # children share these pages copy-on-write; keep the collector off them
    gc.enable()
    ctx = Context(scenario, make_agent, same.root, init["seed"], init["timeout"],
                  factory, store, redis_client, same)
    if redis_client is not None:
        from ..world.redis_state import TtlWatch
        ctx.ttl = TtlWatch.open(init["redis_url"])
    return ctx


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
        if ctx.ttl is not None:
            ctx.ttl.update()  # the last job's commands: the restore starts afresh (FLUSHDB)
        redis_state.restore(ctx.redis, entries)
        ctx.restored = {redis_state._bytes(k[len(redis_state.TTL):]): int(v)
                        for k, v in entries.items() if k.startswith(redis_state.TTL)}


def _left_behind(ctx: Context) -> dict:
    from . import fstrace

    files = fstrace.snapshot(ctx.root)
    if ctx.redis is not None:
        from ..world import redis_state

        # the server's TTLs tick in real time while the world's clock stands still: each
        # TTL as its command set it (redis_state.TtlWatch), so that equal states are equal
        # however busy the machine was
        as_set = ctx.ttl.update() if ctx.ttl is not None else None
        for key, value in redis_state.ttl_entries(redis_state.snapshot(ctx.redis),
                                                  as_set).items():
            files[REDIS_PREFIX + key] = value
    return files


_child: int | None = None  # the incarnation running now: killed first if faultsim dies
_same: SamePath | None = None  # its mount is undone before the run folder is removed
_others: set[int] = set()  # a pause schedule's two incarnations (faultsim.real.pause_server)


def _faultsim_died(run_dir: str) -> NoReturn:
    """faultsim is gone without stopping us (a SIGKILL runs none of its clean-up): kill
    the child, so that nothing writes into the run folder any more, remove the folder
    (every server of the run may try; the others find it gone) and exit."""
    if _child is not None:
        try:
            os.killpg(_child, signal.SIGKILL)  # the incarnation and its process group
        except (ProcessLookupError, PermissionError):
            pass
        try:
            os.kill(_child, signal.SIGKILL)  # in case it had no group of its own yet
            os.waitpid(_child, 0)
        except (ProcessLookupError, ChildProcessError, PermissionError):
            pass
    for pid in list(_others):  # continued first: a stopped process is killed once it runs
        for sig in (signal.SIGCONT, signal.SIGKILL):
            try:
                os.killpg(pid, sig)
            except (ProcessLookupError, PermissionError):
                pass
    if _same is not None:
        _same.release_mount()
    shutil.rmtree(run_dir, ignore_errors=True)
    os._exit(1)


def _fork() -> int:
    """os.fork, with the child on record before a PARENT_DIED can be handled."""
    global _child
    before_fork()  # fewer page-table entries to copy once forks add up (faultsim.host.hugepages)
    signal.pthread_sigmask(signal.SIG_BLOCK, {PARENT_DIED})
    try:
        pid = os.fork()
        if pid:
            _child = pid
        else:
            signal.signal(PARENT_DIED, signal.SIG_DFL)  # the handler is the server's
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {PARENT_DIED})
    return pid


def _wait(pid: int, deadline: float | None) -> tuple[int | None, bool]:
    """The child's wait status, or (None, True) when it outlived the deadline (killed)."""
    global _child
    fd = os.pidfd_open(pid)
    try:
        timeout = None if deadline is None else deadline
        ready, _, _ = select.select([fd], [], [], timeout)
        if not ready:
            os.kill(pid, signal.SIGKILL)
        _child = None  # it has exited or is dying; once reaped, its pid may be reused
        status = os.waitpid(pid, 0)[1]
        return (status, False) if ready else (None, True)
    finally:
        os.close(fd)


def _describe(status: int | None, overdue: bool) -> tuple[str, int | None]:
    if overdue:
        return "overdue", signal.SIGKILL
    if os.WIFSIGNALED(status):
        return "signal", os.WTERMSIG(status)
    return "exit", os.WEXITSTATUS(status)


def main() -> None:
    out_fd, run_dir = int(sys.argv[1]), sys.argv[2]
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # faultsim decides when we stop
    # PR_SET_PDEATHSIG was set before exec, with PARENT_DIED blocked until its handler is in
    # place: a faultsim that died meanwhile is handled here, at the unblock
    signal.signal(PARENT_DIED, lambda signum, frame: _faultsim_died(run_dir))
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {PARENT_DIED})
    try:
        _serve(out_fd, run_dir)
    except (EOFError, BrokenPipeError):
        # faultsim's ends of the pipes closed without a stop: it died (the kernel closes a
        # dead process's files before it sends the death signal)
        _faultsim_died(run_dir)


def _serve(out_fd: int, run_dir: str) -> None:
    global _same
    init = wire.receive(0)
    try:
        # first: unshare(CLONE_NEWUSER) refuses a process with threads (imports may start one)
        _same = same = establish(run_dir, init["own"])
        ctx = _setup(init, same)
        _jail.subreaper()
        ctx.jail = _jail.establish(same.root, _relayed(ctx.scenario, init.get("redis_url")))
    except BaseException:
        wire.send(out_fd, {"kind": "setup-failed", "error": traceback.format_exc()})
        return
    wire.send(out_fd, {"kind": "ready", "pid": os.getpid(),
                       "same_path": same.how + (f" ({same.why})" if same.why else ""),
                       "jail": ctx.jail.why or "contained"})
    me = os.getpid()
    deadline = None if not ctx.timeout else 3 * ctx.timeout + 5
    while True:
        job = wire.receive(0)
        if job is None:  # faultsim stops us
            return
        with ctx.same:  # in the fallback, one server at a time on the one path
            if job.get("pause"):
                from .pause_server import Ops, run_pause
                run_pause(Ops(_spawn, _prepare, _left_behind, _others), ctx, job, out_fd, me,
                          deadline)
                _forget_child()  # both reaped: their pids may be reused
            else:
                _run_one(ctx, job, out_fd, me, deadline)


def _forget_child() -> None:
    global _child
    _child = None


def _relayed(scenario: Any, redis_url: str | None) -> list[tuple[str, int]]:
    """The addresses an incarnation may reach from inside the jail: the scenario's
    `[sandbox] allow` and the Redis database faultsim started."""
    from ..interpose.netguard import parse_allowed

    out = list(getattr(scenario, "allow", ()))
    if redis_url:
        out.append(parse_allowed(redis_url.split("//", 1)[-1].split("/", 1)[0]))
    return sorted(set(out))


def _run_one(ctx: Context, job: dict, out_fd: int, me: int, deadline: float | None) -> None:
    """Put the job's state in place, fork its child, wait, send what it left."""
    started = _real_time.real_perf_counter()
    _prepare(ctx, job)
    pid = _spawn(ctx, job, out_fd, me)
    status, overdue = _wait(pid, job.get("deadline", deadline))
    how, code = _describe(status, overdue)
    if how != "exit":  # killed: its group with it (an overdue one was killed alone)
        try:
            os.killpg(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    # before the files are read: nothing of its tree may write any more
    left = _jail.left_behind(me, ctx.jail.helpers if ctx.jail else set(), pid, how == "exit")
    wire.send(out_fd, {"job": job["id"], "kind": "exit", "how": how, "code": code,
                       "files": _left_behind(ctx), "left_behind": left,
                       "refused": _jail.refused(ctx.jail),
                       "seconds": _real_time.real_perf_counter() - started})


def _spawn(ctx: Context, job: dict, out_fd: int, me: int, close: tuple = ()) -> int:
    """Fork the child of `job`, leader of its own process group, reporting on `out_fd`
    (`close`: the server's ends of its pipes, closed in the child)."""
    pid = _fork()
    if pid == 0:
        try:
            die_with_parent()
            if os.getppid() != me:  # the server died between fork and prctl
                os._exit(1)
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            if ctx.ttl is not None:  # the server's watch is the server's to read
                from ..world.redis_state import TtlWatch
                ctx.ttl = TtlWatch.open(ctx.store.url, ctx.restored) if job.get("drive") \
                    else None
            for fd in close:
                os.close(fd)
            _jail.enter(ctx.jail)
            from .child import run_job
            run_job(job, ctx, out_fd)
        except BaseException:
            try:
                wire.send(out_fd, {"job": job["id"], "kind": "crashed",
                                   "error": traceback.format_exc()})
            finally:
                os._exit(70)
        os._exit(0)
    try:  # its group, from this side too: a kill may come before the child's own call
        os.setpgid(pid, pid)
    except OSError:
        pass  # it has exec'd or died already
    return pid


if __name__ == "__main__":
    main()
