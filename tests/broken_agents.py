"""Small deliberately-broken agents for the engine's bad-input tests."""
from __future__ import annotations

import datetime as _dt
import os
import random

from reference_agent.agent import Agent
from reference_agent.checkpoint import CheckpointStore


def raises_on_start(env):
    raise RuntimeError("cannot read my configuration")


class _HangsOnResume(Agent):
    def _resume(self, checkpoint):
        while True:  # an agent stuck in its recovery
            pass


def hangs_on_resume(env):
    return _HangsOnResume(env)


class _SwallowsTheLimit(Agent):
    def _resume(self, checkpoint):
        while True:  # stuck, and a bare `except` swallows whatever would stop it
            try:
                while True:
                    pass
            except BaseException:
                continue


def swallows_the_limit(env):
    return _SwallowsTheLimit(env)


class _Escapes(Agent):
    def run(self):
        with open("/tmp/faultsim-escape-test.log", "a") as f:  # outside env.workdir
            f.write(f"incarnation {self.env.incarnation}\n")
        return super().run()


def escapes_sandbox(env):
    return _Escapes(env)


class _Flaky(Agent):
    def _start(self):
        name = f"scratch-{random.SystemRandom().randrange(10**9)}.txt"  # not seeded
        with open(self.dir / name, "w") as f:
            f.write("x")
        return super()._start()


def flaky(env):
    return _Flaky(env)


class _WritesInFinally(Agent):
    def _save_point_a(self, checkpoint, calls):
        try:
            super()._save_point_a(checkpoint, calls)
        finally:  # cleanup that a real SIGKILL would never run
            with open(self.dir / "last-save.txt", "w") as f:
                f.write(str(os.getpid()))


def writes_in_finally(env):
    return _WritesInFinally(env)


class _TrustsKeysForever(Agent):
    key_window = _dt.timedelta.max  # never asks whether a key outlived the downtime


def trusts_keys_forever(env):
    return _TrustsKeysForever(env)


class _DiesOnResume(Agent):
    def run(self):
        if self.env.incarnation > 1:
            os.kill(os.getpid(), 9)  # the worker process judging this crash dies
        return super().run()


def dies_on_resume(env):
    return _DiesOnResume(env)


class _StartsOver(Agent):
    def run(self):
        if self.env.incarnation > 1:  # ignores what is on disk and starts the task again
            import shutil

            shutil.rmtree(self.env.workdir / "runs", ignore_errors=True)
        return super().run()


def starts_over(env):
    return _StartsOver(env)


class _NoV1Store(CheckpointStore):
    """A release that dropped the version-1 migration: it refuses what v1 wrote."""

    def load(self):
        import json

        from reference_agent.checkpoint import UnknownVersionError

        if self.path.exists():
            data = json.loads(self.path.read_bytes())
            if isinstance(data, dict) and data.get("version") == 1:
                raise UnknownVersionError(self.path, 1)
        return super().load()


class _NoV1(Agent):
    checkpoint_store = _NoV1Store


def no_v1_migration(env):
    return _NoV1(env)


class _LeakyStore(CheckpointStore):
    """Refuses a broken file, but quotes it in the error (a secret with it)."""

    def load(self):
        try:
            return super().load()
        except Exception as exc:
            head = self.path.read_bytes()[:4000].decode("utf-8", "replace")
            raise RuntimeError(f"cannot load {self.path} ({exc}): {head!r}") from None


class _Leaky(Agent):
    checkpoint_store = _LeakyStore


def leaks_checkpoint_in_errors(env):
    return _Leaky(env)


class _StartsOverStore(CheckpointStore):
    """Treats a file it cannot read as no checkpoint at all: starts the task again."""

    def load(self):
        try:
            return super().load()
        except Exception:
            return None


class _StartsOverOnDamage(Agent):
    checkpoint_store = _StartsOverStore


def starts_over_on_damage(env):
    return _StartsOverOnDamage(env)


# -- for subprocess mode --------------------------------------------------------------
class _TwoTransactionStore:
    """A SQLite save as two transactions (autocommit): DELETE the row, then INSERT it."""

    def __init__(self, db_path, namespace):
        from reference_agent.stores import SqliteCheckpointStore
        self._inner = SqliteCheckpointStore(db_path, namespace)

    def load(self):
        return self._inner.load()

    def save(self, checkpoint):
        from reference_agent.checkpoint import dumps
        db = self._inner._db()
        db.execute("DELETE FROM checkpoints WHERE namespace = ?", (self._inner.namespace,))
        db.execute("INSERT INTO checkpoints (namespace, data) VALUES (?, ?)",
                   (self._inner.namespace, dumps(checkpoint)))

    def retire(self):
        pass


class _SqliteTwoTransactions(Agent):
    sqlite_store = _TwoTransactionStore


def sqlite_two_transactions(env):
    return _SqliteTwoTransactions(env)


class _HopefulSqliteStore:
    """P4 broken in SQLite: the row's version is never checked (parsed on hope), as
    reference_agent.mutants.unknown_version_parsed does for checkpoint.json."""

    def __init__(self, db_path, namespace):
        from reference_agent.stores import SqliteCheckpointStore
        self._inner = SqliteCheckpointStore(db_path, namespace)

    def load(self):
        import json

        from reference_agent.checkpoint import from_json
        raw = self._inner.load_raw()
        if raw is None:
            return None
        data = json.loads(raw)
        return from_json(self._inner.label, {**data, "version": 2})

    def save(self, checkpoint):
        self._inner.save(checkpoint)

    def retire(self):
        pass


class _SqliteVersionParsed(Agent):
    sqlite_store = _HopefulSqliteStore


def sqlite_version_parsed(env):
    return _SqliteVersionParsed(env)
