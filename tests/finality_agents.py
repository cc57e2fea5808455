"""Agents written as users write them, for what runs after an in-process kill
(faultsim/finality.py): cleanup that a real SIGKILL never runs (a framework's
`except BaseException: unlink; raise`, a `finally:` saving a session, an atexit handler),
an agent that swallows the kill and goes on asking the model, and one whose background
thread keeps appending after run() returns.

Each counts in `RAN` what its cleanup did in this process (the tests run them with
`workers=0`, in this process, to read it)."""
from __future__ import annotations

import atexit
import json
import os
import sys
import threading
import time

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


__all__ = ["TOOLS", "charge_card"]
