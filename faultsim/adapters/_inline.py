"""An event loop's default executor that runs each job at once, on the loop's thread.

Frameworks hand sync work (a sync tool, a database call) to `loop.run_in_executor(None,
f)` / `asyncio.to_thread`, which runs it on a worker thread: kill points would then land
on a thread faultsim does not fork from, in an order the thread scheduler picks. With
`loop.set_default_executor(Inline())` they land in one order, on the loop's thread (the
way pydantic-ai's Temporal integration runs its tools)."""
from __future__ import annotations

import concurrent.futures
from typing import Any, Callable


class Inline(concurrent.futures.ThreadPoolExecutor):
    """`submit(f)` runs `f` now. (A ThreadPoolExecutor only because asyncio accepts no
    other as the default; it never starts a thread.)"""

    def submit(self, fn: Callable, /, *args: Any, **kwargs: Any) -> concurrent.futures.Future:
        future: concurrent.futures.Future = concurrent.futures.Future()
        try:
            future.set_result(fn(*args, **kwargs))
        except BaseException as exc:  # a simulated kill too: it must reach the agent's caller
            if not isinstance(exc, Exception):
                raise
            future.set_exception(exc)
        return future

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        pass
