"""One thread, one order: LangGraph's background executor made deterministic.

LangGraph runs a superstep's tasks and every checkpointer write on a thread pool. Threads
would make the order of events, and so the kill points, differ from run to run. Under
faultsim the pool is replaced by a serial executor:

- a node task runs at once, in the order LangGraph submits it (one legal schedule of the
  parallel tasks);
- a checkpointer write (`put`, `put_writes`) is *in flight*: it runs when something waits
  for it (LangGraph's "sync" mode waits for each checkpoint before the next step), and at
  the latest when the next call outside (a model request, a service call) has come back,
  or the run ends. A kill before then finds the write not done, as a SIGKILL would find a
  background write the pool had not finished while the call was out: that is the window
  the "async" mode opens.
"""
from __future__ import annotations

import concurrent.futures
import contextlib
from contextvars import Context
from typing import Any, Callable, Iterator

_WRITES = ("_checkpointer_put_after_previous", "put", "put_writes")


def _target(fn: Callable, args: tuple) -> Callable:
    """The function a submission will run, under LangGraph's wrappers (Context.run, next_tick)."""
    while args:
        if getattr(fn, "__name__", "") == "next_tick" or (
                getattr(fn, "__name__", "") == "run"
                and isinstance(getattr(fn, "__self__", None), Context)):
            fn, args = args[0], args[1:]
        else:
            break
    return fn


class InFlight(concurrent.futures.Future):
    """A background write not yet done. Asking about it (result, exception, done) makes it
    happen first, so nothing can block on it forever."""

    def __init__(self, run: Callable[[], Any], dead: Callable[[], bool]) -> None:
        super().__init__()
        self._run, self._dead = run, dead
        self._started = False

    def force(self) -> None:
        if self._started:
            return
        self._started = True
        if self._dead():  # the process was killed: the write never happens
            self.cancel()
            return
        self.set_running_or_notify_cancel()
        try:
            value = self._run()
        except Exception as exc:
            self.set_exception(exc)
        except BaseException as exc:  # killed inside the write: settle it, then die
            self.set_exception(exc)
            raise
        else:
            self.set_result(value)

    def result(self, timeout: float | None = None) -> Any:
        self.force()
        return super().result(timeout)

    def exception(self, timeout: float | None = None) -> BaseException | None:
        self.force()
        return super().exception(timeout)

    def done(self) -> bool:
        self.force()
        return super().done()


class SerialExecutor(concurrent.futures.Executor):
    def __init__(self, pending: list[InFlight], dead: Callable[[], bool]) -> None:
        self._pending, self._dead = pending, dead

    def submit(self, fn: Callable, /, *args: Any, **kwargs: Any) -> concurrent.futures.Future:
        run = lambda: fn(*args, **kwargs)  # noqa: E731
        if getattr(_target(fn, args), "__name__", "") in _WRITES:
            future = InFlight(run, self._dead)
            self._pending.append(future)
            return future
        future: concurrent.futures.Future = concurrent.futures.Future()
        future.set_running_or_notify_cancel()
        try:  # a kill (a BaseException) passes straight through: the process is gone
            future.set_result(run())
        except Exception as exc:
            future.set_exception(exc)
        return future

    def map(self, fn: Callable, *iterables: Any, timeout: float | None = None,
            chunksize: int = 1) -> Iterator[Any]:
        return iter([fn(*args) for args in zip(*iterables)])

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        pass


class Serializer:
    """Holds the in-flight writes of one incarnation."""

    def __init__(self, dead: Callable[[], bool]) -> None:
        self.pending: list[InFlight] = []
        self.dead = dead

    def flush(self) -> None:
        """Finish every write in flight, oldest first (they chain in that order anyway)."""
        while self.pending:
            self.pending.pop(0).force()

    @contextlib.contextmanager
    def installed(self) -> Iterator[None]:
        """Route LangGraph's (and its ToolNode's) executors to a serial one meanwhile."""
        import importlib

        @contextlib.contextmanager
        def executor_for_config(config: Any = None) -> Iterator[SerialExecutor]:
            yield SerialExecutor(self.pending, self.dead)

        patched = []
        for name in ("langgraph.pregel._executor", "langgraph.prebuilt.tool_node",
                     "langgraph.prebuilt.tool_validator"):
            try:
                module = importlib.import_module(name)
            except ImportError:
                continue
            if hasattr(module, "get_executor_for_config"):
                patched.append((module, module.get_executor_for_config))
                module.get_executor_for_config = executor_for_config
        try:
            yield
        finally:
            for module, original in patched:
                module.get_executor_for_config = original
            self.pending.clear()
