"""An async agent written the way a LlamaIndex Workflows user writes one, with the
framework's shape reproduced in plain asyncio (llama-index is not a test dependency):
steps are coroutines run as tasks, they talk through events on a queue, and the agent
reads them with `async for ev in handler.stream_events()`. As in the framework, a step's
failure is caught with `except Exception` and ends the stream with it; an exception that
is not an `Exception` (faultsim's in-process kill is a BaseException) ends the step's task
and nothing else, so the stream waits forever and the step tasks are left pending.

On tests/data/one_charge.toml: the conversation is saved (atomically) in state.json after
each step; a resumed run picks up from it. Correct under a real kill (subprocess mode)."""
from __future__ import annotations

import asyncio
import json
import os

from user_agents import TOOLS, charge_card, save  # the same tool, the same atomic save


# -- the framework's shape --------------------------------------------------------------
class StopEvent:
    def __init__(self, result=None, error=None):
        self.result, self.error = result, error


class StepDone:
    def __init__(self, name):
        self.name = name


class Handler:
    def __init__(self, workflow):
        self.queue: asyncio.Queue = asyncio.Queue()
        self.result: asyncio.Future = asyncio.get_running_loop().create_future()
        self.workflow = workflow

    async def stream_events(self):
        while True:
            ev = await self.queue.get()  # a step that died of a BaseException: forever
            if isinstance(ev, StopEvent):
                if ev.error is not None:
                    raise ev.error
                self.result.set_result(ev.result)
                return
            yield ev

    def __await__(self):
        return self.result.__await__()


class Workflow:
    """Runs `step` over and over in its own task until it returns a final answer."""

    def __init__(self, step):
        self.step = step

    def run(self) -> Handler:
        handler = Handler(self)
        self._worker = asyncio.get_running_loop().create_task(self._steps(handler))
        return handler

    async def _steps(self, handler: Handler) -> None:
        # the worker, as the framework's: an `Exception` is the run's error; nothing else
        # is caught, so a BaseException ends this task and the stream never hears of it
        while True:
            try:
                done = await self.step()
            except Exception as exc:
                handler.queue.put_nowait(StopEvent(error=exc))
                return
            if done is not None:
                handler.queue.put_nowait(StopEvent(result=done))
                return
            handler.queue.put_nowait(StepDone("step"))


# -- the user's agent -------------------------------------------------------------------
class Agent:
    def __init__(self, env):
        self.env = env
        self.path = os.path.join(str(env.workdir), "state.json")
        self.state: dict = {}

    async def step(self):
        messages = self.state["messages"]
        last = messages[-1]
        if last["role"] == "assistant":
            calls = [b for b in last["content"] if b["type"] == "tool_use"]
            if not calls:
                return "".join(b["text"] for b in last["content"] if b["type"] == "text")
            messages.append({"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": b["id"],
                 "content": json.dumps(charge_card(**b["input"], idempotency_key=b["id"]))}
                for b in calls]})
        else:
            response = await self.env.async_client.messages.create(
                model=self.env.model, max_tokens=1024, tools=TOOLS, messages=messages)
            messages.append({"role": "assistant", "content": [
                b.model_dump(exclude_none=True) for b in response.content]})
        save(self.path, self.state)
        return None

    def load(self) -> None:
        """The conversation from state.json, or a new one saved there."""
        os.makedirs(str(self.env.workdir), exist_ok=True)
        if os.path.exists(self.path):
            with open(self.path) as f:
                self.state = json.load(f)
        else:
            self.state = {"messages": [{"role": "user", "content": self.env.task}]}
            save(self.path, self.state)

    async def run(self):
        self.load()
        handler = Workflow(self.step).run()
        async for ev in handler.stream_events():
            pass  # a user prints progress here
        return await handler


def make_agent(env):
    return Agent(env)


class _HangsOnResume(Agent):
    async def run(self):
        if os.path.exists(self.path):  # resumed: waits for a lock nobody releases
            await wait_for_peer()
        return await super().run()


async def wait_for_peer() -> None:
    while True:
        await asyncio.sleep(0.01)


def hangs_on_resume(env):
    """Probe: a resumed run that waits forever in a coroutine."""
    return _HangsOnResume(env)


# -- the same shape with a worker thread (a sync framework's executor) ------------------
class _ThreadedAgent(Agent):
    """The steps run on a worker thread that streams their events through a queue; the
    worker catches `Exception` only. A kill raised in the worker ends that thread, and
    run() waits on the queue forever: a kill that does not unwind."""

    def run(self):
        import queue
        import threading

        self.load()  # here, in run()'s own thread
        events: queue.Queue = queue.Queue()

        def worker():
            loop = asyncio.new_event_loop()
            try:
                while True:
                    done = loop.run_until_complete(self.step())
                    if done is not None:
                        events.put(StopEvent(result=done))
                        return
                    events.put(StepDone("step"))
            except Exception as exc:
                events.put(StopEvent(error=exc))
            finally:
                loop.close()

        threading.Thread(target=worker, daemon=True).start()
        while True:
            ev = events.get()
            if isinstance(ev, StopEvent):
                if ev.error is not None:
                    raise ev.error
                return ev.result


def threaded(env):
    """The workflow on a worker thread: correct under a real kill."""
    return _ThreadedAgent(env)


class _SwallowsEverything(_ThreadedAgent):
    def run(self):
        try:
            return super().run()
        except BaseException:  # "never crash": every exception, every time, forever
            while True:
                try:
                    threading_wait(0.05)
                except BaseException:
                    pass


def threading_wait(seconds: float) -> None:
    import time

    time.sleep(seconds)


def swallows_everything(env):
    """Probe: once its worker dies of the kill, run() swallows every exception raised in
    it, forever: no time limit can end it from inside the process."""
    return _SwallowsEverything(env)
