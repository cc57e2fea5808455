"""SQLite statements and commits as trace events (subprocess mode).

SQLite writes from C, below anything pyfakefs or Python's `open` can see, so its kill
points are taken where the agent talks to it: after each statement that can change the
database has run, and after each commit. A kill between an INSERT and its COMMIT leaves a
real open transaction (and its journal) on a real file, for the next incarnation's
SQLite to roll back.
"""
from __future__ import annotations

import re
import sqlite3
import sqlite3.dbapi2
from typing import Any, Callable

from ..trace import digest

Emit = Callable[..., None]
_emit: Emit | None = None
_original_connect = sqlite3.connect
_READS = {"SELECT", "PRAGMA", "EXPLAIN", "WITH"}


def _verb(sql: str) -> tuple[str, str]:
    """('INSERT', 'checkpoints') from the statement's first words."""
    words = re.findall(r"[A-Za-z_][A-Za-z_0-9]*", sql)[:6]
    verb = words[0].upper() if words else "?"
    target = ""
    upper = [w.upper() for w in words]
    for marker in ("INTO", "UPDATE", "FROM", "TABLE", "EXISTS"):
        if marker in upper[1:] or (marker == "UPDATE" and verb == "UPDATE"):
            i = upper.index(marker) if marker in upper else 0
            if i + 1 < len(words):
                target = words[i + 1]
    return verb, target


def _statement(sql: str, params: Any = ()) -> None:
    if _emit is None:
        return
    verb, target = _verb(sql)
    if verb in _READS:
        return
    if verb in ("COMMIT", "END"):
        _emit("sqlite.commit", "")
    elif verb == "ROLLBACK":
        _emit("sqlite.rollback", "")
    elif verb == "BEGIN":
        _emit("sqlite.begin", "")
    else:
        _emit("sqlite.exec", f"{verb} {target}".strip(),
              digest(repr((sql, params)).encode()))


class TracedCursor(sqlite3.Cursor):
    def execute(self, sql, parameters=(), /):
        result = super().execute(sql, parameters)
        _statement(sql, parameters)
        return result

    def executemany(self, sql, seq_of_parameters, /):
        result = super().executemany(sql, seq_of_parameters)
        _statement(sql, "many")
        return result

    def executescript(self, sql_script, /):
        result = super().executescript(sql_script)
        _statement(sql_script, "script")
        return result


class TracedConnection(sqlite3.Connection):
    def cursor(self, factory=TracedCursor):
        return super().cursor(factory)

    def execute(self, sql, parameters=(), /):
        return self.cursor().execute(sql, parameters)

    def executemany(self, sql, parameters, /):
        return self.cursor().executemany(sql, parameters)

    def executescript(self, sql_script, /):
        return self.cursor().executescript(sql_script)

    def commit(self):
        pending = self.in_transaction
        result = super().commit()
        if pending and _emit is not None:
            _emit("sqlite.commit", "")
        return result

    def __exit__(self, exc_type, exc, tb):
        # `with connection:` commits from C without calling commit(): trace it here.
        if exc_type is None:
            self.commit()
            return False
        return super().__exit__(exc_type, exc, tb)


def connect(database, *args: Any, **kwargs: Any) -> sqlite3.Connection:
    factory = kwargs.pop("factory", None)
    if factory is None or factory is sqlite3.Connection:
        factory = TracedConnection
    elif not issubclass(factory, TracedConnection):
        factory = type(f"Traced{factory.__name__}", (TracedConnection, factory), {})
    return _original_connect(database, *args, factory=factory, **kwargs)


def install(emit: Emit) -> None:
    """Trace every connection opened from now on. `sqlite3.connect` and
    `sqlite3.dbapi2.connect` are two names for one function, and both are replaced:
    SQLAlchemy's SQLite dialect (DBOS, ADK's DatabaseSessionService on plain `sqlite://`)
    connects through the second, and its statements and commits were not kill points."""
    global _emit
    _emit = emit
    sqlite3.connect = sqlite3.dbapi2.connect = connect


def uninstall() -> None:
    global _emit
    _emit = None
    sqlite3.connect = sqlite3.dbapi2.connect = _original_connect
