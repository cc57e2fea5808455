"""Agents written as users write them, for what runs after an in-process kill
(faultsim/interpose/finality.py): cleanup that a real SIGKILL never runs (a framework's
`except BaseException: unlink; raise`, a `finally:` saving a session, an atexit handler),
an agent that swallows the kill and goes on asking the model, and one whose background
thread keeps appending after run() returns.

Each counts in `RAN` what its cleanup did in this process (the tests run them with
`workers=0`, in this process, to read it)."""
from __future__ import annotations

import asyncio
import atexit
import json
import os
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from tests.state_agent import TOOLS, StateAgent, charge_card

RAN: dict[str, int] = {}


def _ran(what: str) -> None:
    RAN[what] = RAN.get(what, 0) + 1


class FrameworkCleanup(StateAgent):
    """Removes its temp file when anything goes wrong, then lets the error go on."""

    def save(self, state):
        tmp = self.path + ".tmp"
        try:
            with open(tmp, "w") as f:
                f.write(json.dumps(state))
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            _ran("unlink")
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise


class SessionInFinally(StateAgent):
    """Saves a session file however run() ends, with how it ended."""

    def run(self):
        try:
            return super().run()
        finally:
            how = sys.exc_info()[0]
            _ran("finally" if how is None else f"finally:{how.__name__}")
            with open(os.path.join(str(self.env.workdir), "session.json"), "w") as f:
                json.dump({"ended_by": None if how is None else how.__name__}, f)


def _exit_save(path):
    _ran("atexit")
    with open(path, "w") as f:
        f.write("saved at exit")


class SavesAtExit(StateAgent):
    def run(self):
        atexit.register(_exit_save, os.path.join(str(self.env.workdir), "exit.txt"))
        return super().run()


class SwallowsTheKill(StateAgent):
    """Retries the model on anything at all: the kill included."""

    def run(self):
        client, create = self.env.client, self.env.client.messages.create

        class Retrying:
            def create(self_, **kwargs):
                for attempt in range(3):
                    try:
                        return create(**kwargs)
                    except BaseException:  # "never let one bad request end the agent"
                        _ran("swallowed")
                        time.sleep(0)
                raise RuntimeError("the model is unavailable")

        class Client:
            messages = Retrying()

        self.env.client = Client()
        try:
            return super().run()
        finally:
            self.env.client = client


def _keep_appending(path):
    while True:
        time.sleep(0.05)
        with open(path, "a") as f:
            f.write("tick\n")


class StrayThread(StateAgent):
    """Leaves a journal thread behind when it returns."""

    def run(self):
        answer = super().run()
        journal = os.path.join(str(self.env.workdir), "journal.log")
        threading.Thread(target=_keep_appending, args=(journal,), daemon=True).start()
        return answer


class JoinedThread(StateAgent):
    """Writes its journal from a thread, and waits for it before returning: correct."""

    def run(self):
        answer = super().run()
        journal = os.path.join(str(self.env.workdir), "journal.log")
        worker = threading.Thread(target=self._journal, args=(journal,))
        worker.start()
        worker.join()
        return answer

    def _journal(self, path):
        with open(path, "a") as f:
            f.write("done\n")


POOL = ThreadPoolExecutor(max_workers=1)  # made once, at import: kept between incarnations


class PooledTools(StateAgent):
    """Runs its tools on a module-level thread pool: correct, if the pool outlives it."""

    def charge(self, *args):
        return POOL.submit(charge_card, *args).result()


class AsyncAgent:
    """An async agent: its tool runs in a worker thread (`asyncio.to_thread`), a `finally:`
    saves its session; `retries` > 1 retries the model on anything, the kill included."""

    retries = 1
    tool = staticmethod(charge_card)

    def __init__(self, env):
        self.env, self.path = env, os.path.join(str(env.workdir), "state.json")

    def save(self, state):
        with open(self.path + ".tmp", "w") as f:
            f.write(json.dumps(state))
        os.replace(self.path + ".tmp", self.path)

    async def ask(self, messages):
        for attempt in range(self.retries):
            try:
                return await self.env.async_client.messages.create(
                    model=self.env.model, max_tokens=256, tools=TOOLS, messages=messages)
            except BaseException:
                if attempt + 1 == self.retries:
                    raise
                _ran("swallowed")
        raise AssertionError("unreachable")

    async def run(self):
        os.makedirs(str(self.env.workdir), exist_ok=True)
        try:
            return await self._run()
        finally:
            with open(os.path.join(str(self.env.workdir), "session.json"), "w") as f:
                f.write(repr(sys.exc_info()[0]))

    async def _run(self):
        if os.path.exists(self.path):
            with open(self.path) as f:
                state = json.load(f)
        else:
            state = {"messages": [{"role": "user", "content": self.env.task}], "pending": []}
            self.save(state)
        while True:
            last = state["messages"][-1]
            if last["role"] == "assistant" and not state["pending"]:
                return "".join(b.get("text", "") for b in last["content"]
                               if b["type"] == "text")
            if not state["pending"]:
                r = await self.ask(state["messages"])
                state["messages"].append({"role": "assistant", "content": [
                    b.model_dump(exclude_none=True) for b in r.content]})
                state["pending"] = [{"id": b.id, "input": b.input} for b in r.content
                                    if b.type == "tool_use"]
                self.save(state)
                continue
            results = []
            for call in state["pending"]:
                out = await asyncio.to_thread(self.tool, call["input"]["customer"],
                                              call["input"]["cents"],
                                              f"{self.env.task_id}:{call['id']}")
                results.append({"type": "tool_result", "tool_use_id": call["id"],
                                "content": json.dumps(out)})
            state["messages"].append({"role": "user", "content": results})
            state["pending"] = []
            self.save(state)


class AsyncSwallower(AsyncAgent):
    retries = 3


def _slow_charge(customer, cents, key):
    time.sleep(0.3)  # the loop is waiting in select when the result comes: it must wake
    return charge_card(customer, cents, key)


class SlowToolAsync(AsyncAgent):
    """Its tool takes a moment in its worker thread (a real API call does)."""

    tool = staticmethod(_slow_charge)


def slow_tool_async(env):
    return SlowToolAsync(env)


def framework_cleanup(env):
    return FrameworkCleanup(env)


def session_in_finally(env):
    return SessionInFinally(env)


def saves_at_exit(env):
    return SavesAtExit(env)


def swallows_the_kill(env):
    return SwallowsTheKill(env)


def stray_thread(env):
    return StrayThread(env)


def joined_thread(env):
    return JoinedThread(env)


def pooled_tools(env):
    return PooledTools(env)


def async_agent(env):
    return AsyncAgent(env)


def async_swallower(env):
    return AsyncSwallower(env)


__all__ = ["TOOLS", "charge_card"]
