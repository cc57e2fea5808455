"""What an SQLite database in a crash state holds, in lines a person reads: for a LangGraph
checkpointer's schema (SqliteSaver's `checkpoints` and `writes` tables) the checkpoint it
last saved and the pending writes recorded against it, for any other schema each table's
row count and its last row. A counterexample shows this instead of the file's bytes.

The database is read as a resumed run would open it: the file with its `-wal` or
`-journal` beside it (SQLite applies a committed WAL, rolls a hot journal back), on a
private copy in a temporary folder that is removed at once; the crash state is not
touched. Standard library only.
"""
from __future__ import annotations

import json
import os
import sqlite3
import tempfile
from typing import Any, Mapping

HEADER = b"SQLite format 3\x00"
SIDE_FILES = ("-wal", "-journal")
ROWS_SHOWN = 8  # pending writes (or tables) listed
CELL = 40  # characters of a cell shown


def databases(files: Mapping[str, bytes | None]) -> list[str]:
    """The paths of a crash state's files that are SQLite databases (by their header)."""
    return sorted(p for p, d in files.items() if isinstance(d, bytes)
                  and d.startswith(HEADER) and not p.startswith("@"))


def describe(files: Mapping[str, bytes | None], path: str) -> list[str]:
    """What the database at `path` holds (with its side files from `files`); a line saying
    why it cannot be read, rather than an exception, for a damaged one."""
    data = files.get(path)
    if not isinstance(data, bytes) or not data.startswith(HEADER):
        return ["not an SQLite database"]
    try:
        return _read(files, path, _lines)
    except sqlite3.Error as exc:
        return [f"unreadable as a database: {exc}"]


def tables(files: Mapping[str, bytes | None]) -> frozenset[str]:
    """The names of the tables in every readable SQLite database of a crash state (what
    faultsim.judge.why knows a framework's store by)."""
    names: set[str] = set()
    for path in databases(files):
        try:
            names |= _read(files, path, _table_names)
        except sqlite3.Error:
            continue
    return frozenset(names)


def _read(files: Mapping[str, bytes | None], path: str, read: Any) -> Any:
    """`read(conn)` on a private copy of the database at `path` with its side files."""
    with tempfile.TemporaryDirectory(prefix="faultsim-dbview-") as tmp:
        copy = os.path.join(tmp, "db")
        for suffix in ("", *SIDE_FILES):
            side = files.get(path + suffix)
            if isinstance(side, bytes):
                with open(copy + suffix, "wb") as f:
                    f.write(side)
        conn = sqlite3.connect(copy, isolation_level=None)
        try:
            return read(conn)
        finally:
            conn.close()


def _table_names(conn: sqlite3.Connection) -> set[str]:
    return {r[0] for r in conn.execute(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'")}


def _lines(conn: sqlite3.Connection) -> list[str]:
    tables = sorted(_table_names(conn))
    if not tables:
        return ["no tables (nothing committed yet)"]
    if {"checkpoints", "writes"} <= set(tables):
        return _langgraph(conn)
    out = []
    for table in tables[:ROWS_SHOWN]:
        quoted = '"' + table.replace('"', '""') + '"'
        count = conn.execute(f"SELECT count(*) FROM {quoted}").fetchone()[0]
        last = conn.execute(f"SELECT * FROM {quoted} ORDER BY rowid DESC LIMIT 1").fetchone() \
            if count else None
        out.append(f"table {table}: {count} row{'s' if count != 1 else ''}" +
                   (f", the last ({', '.join(_cell(c) for c in last)})" if last else ""))
    if len(tables) > ROWS_SHOWN:
        out.append(f"... {len(tables) - ROWS_SHOWN} more tables")
    return out


def _langgraph(conn: sqlite3.Connection) -> list[str]:
    """SqliteSaver's schema: checkpoints(thread_id, checkpoint_ns, checkpoint_id,
    parent_checkpoint_id, type, checkpoint, metadata) and writes(thread_id, checkpoint_ns,
    checkpoint_id, task_id, idx, channel, type, value)."""
    count = conn.execute("SELECT count(*) FROM checkpoints").fetchone()[0]
    if not count:
        pending = conn.execute("SELECT count(*) FROM writes").fetchone()[0]
        return [f"LangGraph checkpoints: none saved; {pending} pending write(s)"]
    thread, ns, cid, parent, meta = conn.execute(
        "SELECT thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id, metadata "
        "FROM checkpoints ORDER BY checkpoint_id DESC LIMIT 1").fetchone()
    info = _metadata(meta)
    step = f"step {info['step']}" if "step" in info else "step ?"
    source = f", {info['source']}" if "source" in info else ""
    out = [f"LangGraph checkpoints: {count} saved; the latest {cid} ({step}{source}; thread "
           f"{thread}{'/' + ns if ns else ''}; parent {parent or 'none'})"]
    writes = conn.execute("SELECT task_id, idx, channel FROM writes WHERE thread_id = ? AND "
                          "checkpoint_ns = ? AND checkpoint_id = ? ORDER BY task_id, idx",
                          (thread, ns, cid)).fetchall()
    if not writes:
        out.append("pending writes against it: none (no task of the next step has finished)")
        return out
    tasks = len({t for t, _, _ in writes})
    out.append(f"pending writes against it: {len(writes)} from {tasks} task"
               f"{'s' if tasks != 1 else ''} (their results are kept; a resume re-runs only "
               "the step's other tasks)")
    out += [f"    task {task[:8]} #{idx}: {channel}" for task, idx, channel in
            writes[:ROWS_SHOWN]]
    if len(writes) > ROWS_SHOWN:
        out.append(f"    ... {len(writes) - ROWS_SHOWN} more")
    return out


def _metadata(meta: Any) -> dict:
    try:
        value = json.loads(meta.decode() if isinstance(meta, bytes) else meta)
    except (ValueError, TypeError, UnicodeDecodeError):
        return {}
    return value if isinstance(value, dict) else {}


def _cell(value: Any) -> str:
    if isinstance(value, bytes):
        try:
            value = value.decode()
        except UnicodeDecodeError:
            return f"<{len(value)} bytes>"
    text = repr(value)
    return text if len(text) <= CELL else text[:CELL - 4] + "...'"
