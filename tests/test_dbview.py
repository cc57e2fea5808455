"""What a counterexample shows of an SQLite store at the kill (faultsim.judge.dbview): LangGraph's
saved checkpoint and its pending writes, or any schema's tables, read with the WAL."""
from __future__ import annotations

import sqlite3

import pytest

from faultsim.judge import dbview


def _files(root, name="store.db"):
    return {p.name: p.read_bytes() for p in root.iterdir() if p.name.startswith(name)}


def test_a_langgraph_sqlite_saver_shows_its_latest_checkpoint_and_pending_writes(tmp_path):
    saver_mod = pytest.importorskip("langgraph.checkpoint.sqlite")
    from langgraph.checkpoint.base import empty_checkpoint

    conn = sqlite3.connect(tmp_path / "store.db", check_same_thread=False)
    saver = saver_mod.SqliteSaver(conn)
    config = {"configurable": {"thread_id": "t1", "checkpoint_ns": ""}}
    # fixed ids: one derived from a random first id collided with it when that ended in "f"
    first = {**empty_checkpoint(), "id": "1f1ef0fb-f5ab-6f14-bffe-41a03f7df810"}
    config = saver.put(config, first, {"source": "input", "step": -1}, {})
    second = {**empty_checkpoint(), "id": first["id"][:-1] + "f"}
    config = saver.put(config, second, {"source": "loop", "step": 4}, {})
    saver.put_writes(config, [("messages", "paid"), ("branch:to:agent", None)], "task-abc-123")
    # the connection is still open, as a killed process leaves it: the commits are in the WAL
    files = _files(tmp_path)
    assert "store.db-wal" in files
    lines = dbview.describe(files, "store.db")
    assert lines[0].startswith(f"LangGraph checkpoints: 2 saved; the latest {second['id']} "
                               "(step 4, loop; thread t1;")
    assert lines[1].startswith("pending writes against it: 2 from 1 task")
    assert lines[2:] == ["    task task-abc #0: messages", "    task task-abc #1: branch:to:agent"]
    # without the WAL the same file holds less: the view reads what a resume would
    assert dbview.describe({"store.db": files["store.db"]}, "store.db") != lines
    assert dbview.databases({**files, "@redis/x": b"SQLite format 3\x00"}) == ["store.db"]
    conn.close()


def test_any_other_schema_shows_each_table_and_its_last_row(tmp_path):
    conn = sqlite3.connect(tmp_path / "store.db", isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("CREATE TABLE messages (n INTEGER, role TEXT, body BLOB)")
    conn.execute("CREATE TABLE pending (id TEXT)")
    conn.execute("INSERT INTO messages VALUES (1, 'user', ?)", (b"\xff" * 9,))
    conn.execute("INSERT INTO messages VALUES (2, 'assistant', 'x' || ?)", ("y" * 80,))
    lines = dbview.describe(_files(tmp_path), "store.db")
    assert lines[1] == "table pending: 0 rows"
    start = "table messages: 2 rows, the last (2, 'assistant', 'xyyy"
    assert lines[0].startswith(start) and lines[0].endswith("yy...')")  # a long cell, cut
    assert len(lines[0]) == len(start) - 5 + dbview.CELL + 1
    conn.close()


def test_a_damaged_or_empty_database_is_said_so_not_raised():
    header = dbview.HEADER
    assert dbview.describe({"a.db": header + b"\x10\x00" + b"\xee" * 200}, "a.db")[0] \
        .startswith("unreadable as a database")
    assert dbview.describe({"a.db": b"not sqlite"}, "a.db") == ["not an SQLite database"]
