"""The agent-factory contract: what faultsim hands an agent, and what it reads back.

    def make_agent(env: AgentEnv) -> object with .run()

`make_agent` is called once per incarnation and must build everything afresh from `env`;
`.run()` (a plain method or a coroutine) starts the task, or resumes it from the files
under `env.workdir` if an earlier incarnation left any, and returns the outcome: a string
(the final answer) or an object with `final_answer` and, optionally, `status`, `turns`, `tokens_used`, `steps`, `escalation`.

A factory that cannot be called as `make_agent(env)` (its signature, read when a spec is
loaded), or whose call gives no object with a callable `.run` (checked before `.run()`),
is refused as a usage error naming it (`FactoryError`), never run as an agent that fails.
"""
from __future__ import annotations

import inspect
import os
import sys
import weakref
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping

from .errors import UsageError


if TYPE_CHECKING:
    import anthropic

    from .world import Receiver, World, WorldClock


class FactoryError(UsageError):
    """A factory that breaks the contract above: it cannot be called as `make_agent(env)`
    (read from its signature when it is loaded), or what it made has no callable `.run()`
    (checked right after the call, before `.run()`). The user's mistake, not a finding about
    crash safety: a usage error (exit 2), one line naming the factory."""


# the spec each factory was loaded by (`check_factory`), to name it as the user did; read
# while the agent runs, where the working directory may be a fake one (in-process mode)
_specs: "weakref.WeakKeyDictionary[Any, str]" = weakref.WeakKeyDictionary()
_START = os.getcwd()  # names a factory no spec loaded, relative to where faultsim started


def factory_name(factory: Any) -> str:
    """The spec a factory was loaded by, else `FILE:NAME` of its code (relative to the
    directory faultsim started in, when under it); its repr when it has no code."""
    try:
        return _specs[factory]
    except (KeyError, TypeError):  # not loaded by a spec, or not weakly referable
        pass
    target = getattr(factory, "func", factory)  # functools.partial
    target = getattr(target, "__init__", target) if isinstance(target, type) else target
    code = getattr(target, "__code__", None)
    if code is None:
        return repr(factory)
    path = os.path.relpath(code.co_filename, _START)
    name = getattr(getattr(factory, "func", factory), "__qualname__", code.co_name)
    return f"{code.co_filename if path.startswith('..') else path}:{name}"


def _short_name(factory: Any) -> str:
    target = getattr(factory, "func", factory)
    return getattr(target, "__name__", None) or "make_agent"


def check_factory(factory: Any, spec: str | None = None) -> None:
    """Refuse a factory whose signature cannot take one positional argument, the AgentEnv
    (`make_agent(env)`): extra parameters with defaults, `*args` and `**kwargs` are
    allowed. A callable whose signature Python cannot read (some builtins and C types)
    passes: its first call tells, and `check_made` checks what it makes."""
    if spec is not None:
        try:
            _specs[factory] = spec
        except TypeError:
            pass  # not weakly referable (a bound method): named by its code instead
    try:
        signature = inspect.signature(factory)
    except (TypeError, ValueError):
        return
    try:
        signature.bind(None)
    except TypeError as exc:
        name = _short_name(factory)
        raise FactoryError(f"agent {spec or factory_name(factory)}: {name}{signature} "
                           f"cannot be called as {name}(env) ({exc}); a factory takes one "
                           f"argument, the AgentEnv: def {name}(env)") from None


def check_made(agent: Any, factory: Any) -> None:
    """Refuse what a factory made when it is not an agent: None, no `.run`, or a `.run`
    that cannot be called."""
    call, kind = f"{_short_name(factory)}(env)", type(agent).__qualname__
    if agent is None:
        why = f"{call} returned None"
    elif getattr(agent, "run", None) is None:
        why = f"{call} returned an object of class {kind}, which has no .run()"
    elif not callable(agent.run):
        why = (f"{call} returned an object of class {kind} whose .run is a "
               f"{type(agent.run).__qualname__}, not a method")
    else:
        return
    raise FactoryError(f"agent {factory_name(factory)}: {why}; a factory returns an object "
                       "with .run()")


def contract_broken(exc: BaseException) -> str | None:
    """The line to tell when what an incarnation raised is its factory's breach of the
    contract (None: the agent's own error). Both backends send it to the clean run's
    check, which refuses the agent with it (`pipeline.golden`)."""
    return str(exc) if isinstance(exc, FactoryError) else None


@dataclass
class AgentEnv:
    workdir: Path  # the agent's durable store; everything it writes belongs under here
    client: "anthropic.Anthropic"  # a real SDK client served by the fake model
    services: Mapping[str, "Receiver"]  # the world's receivers, by name
    clock: "WorldClock"  # the world's clock (process time is frozen to it during a run)
    task: str  # the user's task, in words
    task_id: str  # stable id for the task (namespace, idempotency keys)
    model: str  # the model name the agent should ask for
    incarnation: int  # 1 for the first start, 2 for the first resume, …
    mark: Callable[..., None] | None = None  # optional: the agent may report protocol marks
    store: "Store | None" = None  # where the scenario says checkpoints live (None: files)
    world: "World | None" = None  # for faultsim's own adapters (faultsim.adapters.*) only
    max_turns: int = 10_000  # the scenario's turn limit (`max_turns`): stop a runaway loop
    # what the user says after each final answer but the last (the scenario's `follow_up`s,
    # in order): a conversation of several user turns sends each, and ends with the last
    # final answer
    follow_ups: tuple[str, ...] = ()
    # builds `async_client` on first use: most agents are sync, and a client costs ~0.6 ms
    async_factory: "Callable[[], anthropic.AsyncAnthropic] | None" = field(default=None,
                                                                           repr=False)

    @cached_property
    def async_client(self) -> "anthropic.AsyncAnthropic | None":
        """The same fake Claude as `client`, as an `anthropic.AsyncAnthropic`."""
        return self.async_factory() if self.async_factory is not None else None


@dataclass(frozen=True)
class Store:
    """The checkpoint store a scenario chose, as the agent reaches it."""

    kind: str = "file"  # file | sqlite | redis
    path: Path | None = None  # sqlite: the database file, under workdir
    url: str | None = None  # redis: the database to use (redis://127.0.0.1:PORT/DB)


@dataclass(frozen=True)
class Outcome:
    status: str  # completed | escalated
    final_answer: str | None
    turns: int | None = None
    tokens_used: int | None = None
    steps: int | None = None
    escalation: str | None = None


_current: list[AgentEnv] = []  # the incarnation running in this process: one at a time

# How many times code outside faultsim read `env.incarnation`: the one thing an agent can
# observe that differs between the clean run and a resumed run in the same state
# (faultsim.inprocess.convergence cuts only where the clean run never reads it again).
incarnation_reads = [0]
_FAULTSIM = os.path.dirname(os.path.abspath(__file__)) + os.sep


def _read_incarnation(env: AgentEnv) -> int:
    caller = sys._getframe(1).f_code.co_filename
    if not caller.startswith(_FAULTSIM):
        incarnation_reads[0] += 1
    return env.__dict__["incarnation"]


def _write_incarnation(env: AgentEnv, value: int) -> None:
    env.__dict__["incarnation"] = value


AgentEnv.incarnation = property(_read_incarnation, _write_incarnation)  # type: ignore


def current_env() -> AgentEnv | None:
    """The AgentEnv of the incarnation running now, or None outside faultsim. A process
    runs one incarnation at a time in both modes (forked children are their own
    processes), so a module-level record reaches every thread the agent starts."""
    return _current[-1] if _current else None


def run_incarnation(make_agent: Callable[[AgentEnv], Any], env: AgentEnv, *,
                    contained: bool = False) -> Any:
    """Build the agent for `env` and run it (`run_agent`), with `env` the current one
    while it does (`faultsim.effect` routes calls made under it to `env.services`) and
    the network guard on: an address faultsim does not serve is refused, and noted in
    the world (`faultsim.interpose.netguard`); and, unless the processes the agent starts are
    contained (subprocess mode's jail; `contained`: the caller's own, as the Claude Agent
    SDK adapter kills its CLI's process group), the process guard (`faultsim.interpose.procguard`)."""
    from contextlib import nullcontext

    from .interpose import procguard
    from .interpose.netguard import guarded, parse_allowed

    world = env.world
    allowed = list(getattr(world, "allow", ()))
    if env.store is not None and env.store.url:  # the Redis database faultsim started
        allowed.append(parse_allowed(env.store.url.split("//", 1)[-1].split("/", 1)[0]))

    def record(host: str, port: int, site: str) -> None:
        if world is not None:
            world.unrouted.append(f"{host}:{port} from {site} (incarnation "
                                  f"{env.incarnation})")

    def started(command: str, site: str) -> None:
        if world is not None:
            world.processes.append(f"{command} from {site} (incarnation "
                                   f"{env.incarnation})")
            world.processes_why = procguard.why_uncontained()

    processes = nullcontext() if contained or procguard.contained() else \
        procguard.refusing(started)
    _current.append(env)
    try:
        with guarded(allowed, record), processes:
            try:
                agent = make_agent(env)
            except TypeError:  # a factory no spec loaded (a test's): is its signature wrong?
                check_factory(make_agent)
                raise
            check_made(agent, make_agent)  # before run(): a bare AttributeError blames no one
            return run_agent(agent)
    finally:
        # by identity, not the last: under the pause model two incarnations interleave
        # (faultsim.inprocess.pause), and the first may end while the second runs
        for n in range(len(_current) - 1, -1, -1):
            if _current[n] is env:
                del _current[n]
                break


def run_agent(agent: Any) -> Any:
    """`agent.run()`, awaited when it is a coroutine (an async agent), on a fresh event
    loop. (Process time is frozen to the world clock during a run; faultsim's freezers
    keep event loops on real monotonic time, so `asyncio.sleep` still returns.)

    An async incarnation's loop ends with it, as a process's would: a kill that ended the
    task it was raised in, not run()'s, stops the loop at once (finality.killed: nothing
    after that can be a finding, and a framework waiting on that task's events would wait
    forever); the tasks left pending are closed and said nothing of (`close_leftovers`)."""
    result = agent.run()
    if not inspect.isawaitable(result):
        return result
    import asyncio

    from .interpose import finality

    loop = asyncio.new_event_loop()
    ended: list = []  # set when run() is over: what its leftovers say then is no one's
    loop.set_exception_handler(lambda lp, context: None if ended
                               or finality.handling_kill(context.get("exception"))
                               else lp.default_exception_handler(context))
    _loops.append(loop)
    interrupted = False
    try:
        task = asyncio.ensure_future(result, loop=loop)
        finality.runs_in(task)  # a kill raised in another of its tasks is not run()'s
        try:
            return loop.run_until_complete(task)
        except RuntimeError:
            kill = finality.stopped_by_kill()
            if kill is None or task.done():
                raise
            raise kill from None  # the loop stopped for the kill: run() ends with it
    except (KeyboardInterrupt, SystemExit):  # Ctrl-C, SIGTERM (cli.exits.Terminated)
        interrupted = True
        raise
    finally:
        _loops.pop()
        ended.append(True)
        try:
            close_leftovers(loop)
            if not interrupted:  # run again, the loop could hang where the agent hung
                loop.run_until_complete(loop.shutdown_asyncgens())
        finally:
            loop.close()


def close_leftovers(loop: Any) -> None:
    """Close the coroutines of the tasks still pending when run() ended (those a kill or a
    time limit left, a fire-and-forget task). A killed process runs none of them again;
    left to the garbage collector they would be closed at some later moment, in whatever
    incarnation runs then, and print "Task was destroyed but it is pending" and "Event
    loop is closed" after faultsim's report. Closing runs their `finally` blocks now,
    inside this incarnation (after a kill, sealed: nothing they write lands)."""
    import asyncio

    for task in asyncio.all_tasks(loop):
        task._log_destroy_pending = False
        coro = task.get_coro()
        try:
            if coro is not None:
                coro.close()
        except Exception:  # a coroutine that awaits in its `finally`: left as it is
            pass


_loops: list = []  # the event loop an async agent runs on now, in this process
_forking_task: list = [None]  # the task that called fork, noted just before it


def _before_fork() -> None:
    _forking_task[0] = None
    if _loops:
        import asyncio

        try:
            _forking_task[0] = asyncio.current_task(_loops[-1])
        except RuntimeError:
            pass


def _after_fork_in_child() -> None:
    """asyncio ties the running loop to the pid that started it. A child forked while an
    async agent runs (the forking executor forks at kill points) would find no running loop:
    `get_running_loop()` fails there, and futures made through `get_event_loop()` land on a
    fresh loop nobody runs, so the agent hangs. Tie the loop to the child.

    From 3.14 the current task lives in the thread's state, which a fork clears too:
    `asyncio.timeout` (and what is built on it) then fails with "Timeout should be used
    inside a task". Restore it where asyncio has the private `_swap_current_task` (3.12 and
    later); where it lacks it (3.11) the task survived the fork in a dict."""
    if _loops:
        import asyncio

        loop = _loops[-1]
        asyncio.events._set_running_loop(loop)
        _own_selector(loop)
        task, swap = _forking_task[0], getattr(asyncio.tasks, "_swap_current_task", None)
        if task is not None and swap is not None and asyncio.current_task(loop) is None:
            swap(loop, task)


def _own_selector(loop) -> None:
    """A forked child shares the parent's epoll instance (one open file description):
    the child's loop unregistering its self-pipe as it closes (`loop.close()` when its
    killed run unwinds) would remove the parent's registration too, and the parent's loop
    would sleep through every `call_soon_threadsafe` (a `to_thread` result arriving while
    it waits in select: a hang). Give the child a selector of its own, holding the same
    registrations."""
    old = getattr(loop, "_selector", None)
    if old is None or not hasattr(old, "get_map"):
        return
    new = type(old)()
    for key in list(old.get_map().values()):
        new.register(key.fileobj, key.events, key.data)
    loop._selector = new
    old.close()  # closes the child's descriptor of the shared instance: no epoll_ctl


if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=_before_fork, after_in_child=_after_fork_in_child)


def outcome_of(result: Any) -> Outcome:
    """Read what an agent's `.run()` returned, whatever its shape."""
    if isinstance(result, Outcome):
        return result
    if isinstance(result, str):
        return Outcome("completed", result)
    if result is None:
        raise TypeError("the agent's run() returned None; it must return the final answer "
                        "(a string) or an object with a final_answer attribute")
    status = getattr(result, "status", "completed")
    return Outcome(status=status, final_answer=getattr(result, "final_answer", None),
                   turns=getattr(result, "turns", None),
                   tokens_used=getattr(result, "tokens_used", None),
                   steps=getattr(result, "steps", None),
                   escalation=getattr(result, "escalation", None))
