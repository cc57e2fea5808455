"""The kill is final: what of an in-process incarnation may still run once it is killed
or over, what of that lands (nothing), and what of it is the agent's fault.

A real SIGKILL stops every thread of a process at once: no `except`, `finally`, `__exit__`,
atexit handler or weakref callback runs, no other thread takes another step. The
in-process kill is an exception (`trace.Killed`), so the stack unwinds and runs all of
that. Why no finding is made against it, and what is:

1. Nothing run after the kill lands. The sandbox is sealed (inprocess/fs.py discards every
   mutation, of any file, from any thread) and so is the world (the model and the services
   raise `WorldSealed`, marks are dropped). The crash state is the state at the kill point
   whatever runs afterwards, so cleanup cannot change a verdict and is no finding.
2. What a SIGKILLed process cannot do and this one can is *go on*: catch the kill and
   carry on with the task. It is reported, once (`Life.went_on`), where it shows:
   a. the thread and asyncio task the kill was raised in asks the model, applies an
      effect or reports a mark while no kill is being handled there (`handling_kill`:
      `sys.exc_info()` and its `__context__`/`__cause__` chain hold no `Killed` or
      `WorldSealed`); or
   b. the kill was raised in the thread that runs `run()` (for an async agent: in the
      asyncio task that runs it, or in none), and `run()` returns, or raises an exception
      that no kill is in the chain of. (A kill raised in another thread of the incarnation
      never reached `run()`: its returning then is no evidence. Nor is a kill raised in
      another asyncio task: `asyncio.gather(..., return_exceptions=True)` hands it to the
      code that awaits it as a value, not raised, as LangChain's `agenerate` does, which
      then fails on it with an unrelated error.)
   Sound for cleanup: code inside an `except`, `finally` or `__exit__` that the kill
   entered sees it in `sys.exc_info()` (or, inside a nested handler, in the chain), so (a)
   stays quiet; and such cleanup ends by re-raising it or an exception chained to it, so
   run() ends as (b) expects. Sound for swallowing: once a handler completes without
   re-raising, `sys.exc_info()` no longer holds the kill, so the next model request,
   effect or mark, or run()'s end, shows it. Other threads and tasks are no detection
   point (a SIGKILL stops them wherever they are; they get `WorldSealed` and land
   nothing), and neither are file operations: a tempfile's or a weakref's finaliser unlinks
   files outside any handler. Left out: a weakref callback or `__del__` in the killed thread
   that calls the model or a service (it would be reported).
3. Threads end with their incarnation. A thread started while an incarnation runs (by its
   code, directly or from a thread of its own) belongs to it, and a work item of a
   `concurrent.futures` thread pool to the incarnation that submitted it (a pool kept
   between incarnations serves each in turn). When the incarnation ends, killed or not,
   its threads are over: every file operation, model request, effect or mark they attempt
   raises `Killed` in them and lands nothing (`refuse_stray`), whichever incarnation runs
   by then; so none reaches another incarnation's files, the driver's, or a kill meant for
   another run. Those still running are stopped (an asynchronous `Killed`). Threads that
   faultsim's own code starts belong to no incarnation.
   After a clean end (run() returned), a thread still busy (its innermost frame outside
   the standard library: a thread parked in a queue, event or selector is idle) gets a
   grace of up to GRACE seconds; one that attempts anything in it, or is still busy after
   it, is reported (`Life.strays`) by the function it runs and the line that started it
   (not its name: Thread-N counts every thread the process ever started). Deterministic
   for the cases that matter: a thread working in a loop is busy throughout, one finishing
   its last step ends within the grace; only a thread ending just as the grace runs out
   could go either way, the agent's own race (a real process exiting cuts it anywhere).
4. atexit handlers registered by an incarnation's code are kept on it and never run: a
   killed process runs none, and subprocess mode ends every incarnation with `os._exit`.

Standard library only: the bottom layer.
"""
from __future__ import annotations

import atexit
import ctypes
import os
import sys
import sysconfig
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from ..core.trace import Killed, WorldSealed

GRACE = 0.25  # s, at most, for an incarnation's threads to finish after run() returned

_paths = sysconfig.get_paths()
_STDLIB = tuple({os.path.abspath(_paths[n]) + os.sep for n in ("stdlib", "platstdlib")
                 if _paths.get(n)})
_PACKAGES = tuple({os.path.abspath(_paths[n]) + os.sep for n in ("purelib", "platlib")
                   if _paths.get(n)})
_OURS = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep  # faultsim/
_CWD = os.getcwd()  # the real one: under pyfakefs `os.getcwd()` is the fake's


@dataclass(eq=False)
class Life:
    """One incarnation as it runs in this process."""

    over: bool = False
    kill: BaseException | None = None  # the kill raised in it
    killer: tuple = ()  # (thread ident, asyncio task) it was raised in
    runner: Any = None  # the asyncio task that runs an async agent's run() (agent.run_agent)
    went_on: str | None = None  # how it went on after the kill (rule 2)
    threads: dict = field(default_factory=dict)  # Thread -> (what it runs, start site)
    pooled: set = field(default_factory=set)  # those a thread pool started (its workers)
    strays: list[str] = field(default_factory=list)  # threads busy after run() (rule 3)
    grace: bool = False  # run() returned; its threads' last attempts are noted
    acted: list = field(default_factory=list)  # (Thread, what it tried) in the grace
    exits: list = field(default_factory=list)  # its atexit handlers: never run (rule 4)
    stopped: bool = False  # the kill ended its task and stopped the loop (`killed`)


_live: Life | None = None  # the incarnation running now
_running: dict[int, Life] = {}  # thread ident -> the life it works for (runner, work item)
_tagged = False  # some thread ever belonged to an incarnation: checks needed


def begin() -> Life:
    """An incarnation starts in the calling thread."""
    global _live
    _install()
    life = _live = Life()
    _running[threading.get_ident()] = life
    return life


def killed(exc: BaseException) -> BaseException:
    """Note the kill about to be raised in the calling thread; returns it."""
    life = _live
    if life is not None and life.kill is None:
        task = _task()
        life.kill, life.killer = exc, (threading.get_ident(), task)
        if task is not None and task is not life.runner:
            # Raised in an asyncio task that is not run()'s: once that task has ended,
            # nothing the incarnation does can be a finding (rule 2a watches only this
            # task, 2b only run()'s), and the kill may never reach run() (a task ended by
            # a BaseException says so to no one unless awaited: a framework streaming
            # its steps' events waits forever). A real kill stops the whole process:
            # stop the loop there (agent.run_agent ends run() with the kill).
            task.add_done_callback(lambda done: _stop_loop(life, done))
    return exc


def _stop_loop(life: Life, task: Any) -> None:
    life.stopped = True
    task.get_loop().stop()


def stopped_by_kill() -> BaseException | None:
    """The kill, when it stopped the event loop of the incarnation running now."""
    life = _live
    return life.kill if life is not None and life.stopped else None


def runs_in(task: Any) -> None:
    """An async agent's run() runs in asyncio task `task` (rule 2b)."""
    if _live is not None:
        _live.runner = task


def live_threads() -> list:
    """The threads of the incarnation running now that are still alive (besides the one
    that runs `run()`): state faultsim cannot see, which a convergence cut must not skip."""
    life = _live
    if life is None:
        return []
    return [t for t in life.threads if t.is_alive()]


def went_on(what: str) -> None:
    """The dead incarnation tries `what` (a model request, an effect, a mark): rule 2a."""
    life = _live
    if life is None or life.kill is None or life.went_on is not None or life.over:
        return
    if (threading.get_ident(), _task()) != life.killer or handling_kill():
        return
    life.went_on = f"{what} at {_site()}{_caught(life.kill)}"


def end(life: Life, killed: bool, raised: BaseException | None) -> None:
    """The incarnation's run() ended (`raised`: what it raised; None: it returned)."""
    global _live
    if killed and life.went_on is None and life.kill is not None and \
            life.killer[0] == threading.get_ident() and \
            life.killer[1] in (None, life.runner) and (
            raised is None or not handling_kill(raised)):  # rule 2b
        how = "run() returned" if raised is None else \
            f"run() raised {type(raised).__name__}: {raised}"
        life.went_on = f"{how}{_caught(life.kill)}"
    life.over = True  # from here on its threads land nothing (rule 3)
    _running.pop(threading.get_ident(), None)
    if _live is life:
        _live = None
    busy = [t for t in life.threads if t.is_alive() and _busy(t)]
    if busy and not killed:  # a moment for threads finishing their last step
        life.grace = True
        deadline = time.monotonic() + GRACE
        for thread in busy:
            thread.join(max(0.0, deadline - time.monotonic()))
        life.grace = False
        acted = {t for t, _ in life.acted}
        life.strays = [f"{name} started at {site} was still working after run() returned"
                       for t, (name, site) in life.threads.items()
                       if t in acted or (t.is_alive() and _busy(t))]
    for thread in busy:  # stopped: the exception lands at its next step
        # not a pool's worker: its work items are refused already, and an exception
        # landing between two of them would end the worker a later incarnation may use
        if thread.is_alive() and thread not in life.pooled:
            ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread.ident),
                                                       ctypes.py_object(Killed))


def _describe(thread: threading.Thread, pooled: bool) -> str:
    """The thread by what it runs: its number in a name (Thread-3) counts every thread the
    process ever started, which no two runs need agree on."""
    target = getattr(thread, "_target", None)
    if pooled:
        return "a thread pool's worker"
    if target is not None:
        return "thread " + getattr(target, "__qualname__", repr(target))
    return f"thread {type(thread).__qualname__}.run"


def refuse_stray(what: str, subject: Any = "") -> None:
    """Raise `Killed` in a thread whose incarnation is over (rule 3)."""
    if not _tagged:
        return
    life = _owner()
    if life is not None and life.over:
        what = f"{what} {subject}" if subject != "" else what
        thread = threading._active.get(threading.get_ident())
        if life.grace and thread is not None:
            life.acted.append((thread, what))
        raise Killed(f"a thread of an ended incarnation tried to {what}")


def handling_kill(exc: BaseException | None = None) -> bool:
    """Whether `exc` (default: the exception being handled here) is a kill, or was raised
    while handling one, or groups one."""
    todo, seen = [exc if exc is not None else sys.exc_info()[1]], set()
    while todo:
        e = todo.pop()
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        if isinstance(e, (Killed, WorldSealed)):
            return True
        todo += [e.__context__, e.__cause__, *getattr(e, "exceptions", ())]
    return False


# -- whose thread --------------------------------------------------------------------------
def _owner() -> Life | None:
    ident = threading.get_ident()
    life = _running.get(ident)
    if life is not None:
        return life
    thread = threading._active.get(ident)  # not current_thread(): it makes dummies
    return getattr(thread, "_faultsim_life", None)


def _task() -> Any:
    aio = sys.modules.get("asyncio")
    if aio is None:
        return None
    try:
        return aio.current_task()
    except RuntimeError:
        return None


def _started_by_faultsim() -> bool:
    """The innermost frame outside the standard library starting a thread is ours."""
    frame = sys._getframe(2)
    while frame is not None:
        path = os.path.abspath(frame.f_code.co_filename)
        if not path.startswith(_STDLIB):
            return path.startswith(_OURS)
        frame = frame.f_back
    return False


def _busy(thread: threading.Thread) -> bool:
    frame = sys._current_frames().get(thread.ident)
    return frame is not None and not os.path.abspath(frame.f_code.co_filename
                                                     ).startswith(_STDLIB)


def _caught(kill: BaseException) -> str:
    tb = kill.__traceback__  # its first entry: the outermost frame the kill reached
    if tb is None:
        return ""
    code = tb.tb_frame.f_code
    return (f" (the kill was caught in {_short(code.co_filename)}:{tb.tb_lineno}, in "
            f"{code.co_name})")


def _short(path: str) -> str:
    rel = os.path.relpath(path, _CWD) if os.path.isabs(path) else path
    return path if rel.startswith("..") else rel


def _site() -> str:
    """file:line of the innermost frame of the agent's own code (outside the standard
    library, site-packages and faultsim; failing that, outside the first and faultsim)."""
    frames, frame = [], sys._getframe(1)
    while frame is not None:
        frames.append((os.path.abspath(frame.f_code.co_filename), frame.f_lineno))
        frame = frame.f_back
    for skip in (_STDLIB + _PACKAGES + (_OURS,), _STDLIB + (_OURS,)):
        for path, line in frames:
            if not path.startswith("<") and not path.startswith(skip):
                return f"{_short(path)}:{line}"
    return "an unknown call site"


# -- the patches ---------------------------------------------------------------------------
_installed = False
_pool_worker: Any = None  # concurrent.futures.thread._worker, a pool thread's target


def _install() -> None:
    """Patch `Thread.start`, the thread pool's work items, `atexit.register` and the
    threading excepthook, once; each does nothing outside an incarnation."""
    global _installed
    if _installed:
        return
    _installed = True
    start, register, unregister = threading.Thread.start, atexit.register, atexit.unregister

    def thread_start(self, *args, **kwargs):
        global _tagged
        life = _owner()
        if life is not None and not life.over and not _started_by_faultsim():
            self._faultsim_life = life
            pooled = getattr(self, "_target", None) is _pool_worker
            if pooled:
                life.pooled.add(self)
            life.threads[self] = (_describe(self, pooled), _site())
            _tagged = True
        return start(self, *args, **kwargs)

    def atexit_register(func, *args, **kwargs):
        life = _owner()
        caller = os.path.abspath(sys._getframe(1).f_code.co_filename)
        if life is None or caller.startswith(_STDLIB + (_OURS,)):
            return register(func, *args, **kwargs)
        life.exits.append(func)  # never run
        return func

    def atexit_unregister(func):
        life = _owner()
        if life is not None:
            life.exits[:] = [f for f in life.exits if f != func]
        return unregister(func)

    threading.Thread.start = thread_start
    atexit.register, atexit.unregister = atexit_register, atexit_unregister

    from concurrent.futures import thread as pool

    global _pool_worker
    _pool_worker = pool._worker

    item_init, item_run = pool._WorkItem.__init__, pool._WorkItem.run

    def work_item_init(self, *args, **kwargs):
        item_init(self, *args, **kwargs)
        self._faultsim_life = _owner()

    # *args: a private method's signature moves between versions (3.14 passes the
    # worker's context: run(self, ctx)); whatever it takes is passed on untouched
    def work_item_run(self, *args, **kwargs):
        life = getattr(self, "_faultsim_life", None)
        if life is None:
            return item_run(self, *args, **kwargs)
        ident = threading.get_ident()
        before = _running.get(ident)
        _running[ident] = life
        try:
            return item_run(self, *args, **kwargs)
        finally:
            if before is None:
                _running.pop(ident, None)
            else:
                _running[ident] = before

    pool._WorkItem.__init__, pool._WorkItem.run = work_item_init, work_item_run

    hook = threading.excepthook

    def excepthook(args):
        # a thread stopped with its incarnation: no traceback on the terminal
        if getattr(args.thread, "_faultsim_life", None) is not None and \
                handling_kill(args.exc_value):
            return
        hook(args)

    threading.excepthook = excepthook
