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

from ..core.trace import digest

Emit = Callable[..., None]  # (kind, subject, detail="", text=""): fstrace.emit
_emit: Emit | None = None
_original_connect = sqlite3.connect
_READS = {"SELECT", "PRAGMA", "EXPLAIN", "WITH"}
_DML = {"INSERT", "UPDATE", "DELETE", "REPLACE"}  # total_changes counts these (not DDL)


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


def _statement(sql: str, params: Any = (), conn: Any = None, changed: bool = True) -> None:
    if _emit is None:
        return
    verb, target = _verb(sql)
    if verb in _READS:
        return
    if verb in _DML and not changed:
        # Changed no row: the database file is byte for byte what the previous kill point
        # left (SQLite writes no page, no journal, no change counter for it), so a kill here
        # is a state already explored. Not an event: a framework's background thread
        # polling with such writes (DBOS's delayed-workflow sweep) would otherwise make two
        # clean runs differ by where its no-op landed. tests/test_subprocess_mode.py checks
        # the file is unchanged.
        return
    if conn is not None:
        conn._faultsim_wrote = True  # its commit is a kill point: something may change
    if verb in ("COMMIT", "END"):
        _emit("sqlite.commit", "")
    elif verb == "ROLLBACK":
        _emit("sqlite.rollback", "")
    elif verb == "BEGIN":
        _emit("sqlite.begin", "")
    else:
        _emit("sqlite.exec", f"{verb} {target}".strip(),
              digest(repr((sql, params)).encode()), shown(sql, params))


SHOWN = 240  # characters of a statement kept to show (the digest tells the rest apart)


def shown(sql: str, params: Any) -> str:
    """A statement as a message shows it: its whitespace collapsed, its parameters after
    it, cut at SHOWN characters with the cut said (`...`)."""
    text = " ".join(sql.split()) + (f" {params!r}" if params not in ((), None) else "")
    return text if len(text) <= SHOWN else text[:SHOWN - 3] + "..."


class TracedCursor(sqlite3.Cursor):
    def execute(self, sql, parameters=(), /):
        before = self.connection.total_changes
        result = super().execute(sql, parameters)
        _statement(sql, parameters, self.connection, self.connection.total_changes != before)
        return result

    def executemany(self, sql, seq_of_parameters, /):
        before = self.connection.total_changes
        result = super().executemany(sql, seq_of_parameters)
        _statement(sql, "many", self.connection, self.connection.total_changes != before)
        return result

    def executescript(self, sql_script, /):
        result = super().executescript(sql_script)
        _statement(sql_script, "script", self.connection)
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

    _faultsim_wrote = False  # a statement was an event since the last commit or rollback

    def commit(self):
        # a transaction whose every statement changed nothing commits nothing: no event
        pending, self._faultsim_wrote = self.in_transaction and self._faultsim_wrote, False
        result = super().commit()
        if pending and _emit is not None:
            _emit("sqlite.commit", "")
        return result

    def __exit__(self, exc_type, exc, tb):
        # `with connection:` commits from C without calling commit(): trace it here.
        if exc_type is None:
            self.commit()
            return False
        self._faultsim_wrote = False
        return super().__exit__(exc_type, exc, tb)

    def rollback(self):
        self._faultsim_wrote = False
        return super().rollback()


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
