"""Agents written as users write them, for the handlers a kill unwinds through
(faultsim/inprocess/unwind.py): typed `except` clauses, `with open(...)`, a `finally` that
closes a descriptor (all let a kill through, and are read from the code), and three that
do not: an `except Exception` around a whole save (does the file's close under the seal
raise something it would catch?), a context manager that suppresses what it sees, and an
`except (ValueError, BaseException)` that retries. And one that scopes a context
variable to its run (`finally: VAR.set(previous)`), as request-scoped code does."""
from __future__ import annotations

import contextvars
import json
import os

from tests.state_agent import StateAgent


class TypedHandlers(StateAgent):
    """Wraps its steps in the narrow `except`s users write: a bad document, a bad key."""

    def save(self, state):
        try:
            super().save(state)
        except (TypeError, ValueError) as exc:  # "not JSON-serialisable": say which
            raise RuntimeError(f"cannot save {self.path}") from exc
        except json.JSONDecodeError:
            raise

    def charge(self, customer, cents, key):
        try:
            return super().charge(customer, cents, key)
        except KeyError:
            return {"error": "unknown customer"}


class SavesUnderExceptException(StateAgent):
    """Treats any failure of a save as 'try again next turn'."""

    def save(self, state):
        try:
            with open(self.path + ".tmp", "w") as f:
                f.write(json.dumps(state))
                f.flush()
                os.fsync(f.fileno())
            os.replace(self.path + ".tmp", self.path)
        except Exception:
            pass


class Suppress:
    """A guard that logs and swallows whatever happens in its block."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return True


class SuppressingGuard(StateAgent):
    def charge(self, customer, cents, key):
        with Suppress():
            return super().charge(customer, cents, key)
        return {"error": "the tool failed"}


class RetriesOnAnything(StateAgent):
    def charge(self, customer, cents, key):
        for _ in range(2):
            try:
                return super().charge(customer, cents, key)
            except (ValueError, BaseException):
                continue
        return {"error": "the tool failed"}


# the run a log line or a nested call belongs to, as request-scoped frameworks keep it
CURRENT_RUN: contextvars.ContextVar = contextvars.ContextVar("current_run", default=None)


class ContextScoped(StateAgent):
    """Sets the run it is in for its duration, and puts back the enclosing one."""

    def run(self):
        previous = CURRENT_RUN.get()
        CURRENT_RUN.set(self.env.task)
        try:
            return super().run()
        finally:
            CURRENT_RUN.set(previous)


def typed_handlers(env):
    return TypedHandlers(env)


def saves_under_except_exception(env):
    return SavesUnderExceptException(env)


def suppressing_guard(env):
    return SuppressingGuard(env)


def retries_on_anything(env):
    return RetriesOnAnything(env)


def context_scoped(env):
    return ContextScoped(env)
