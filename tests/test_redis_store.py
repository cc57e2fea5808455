"""The real redis-server fixture, and a Redis database's crash state as plain data."""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from faultsim.real import redis_server as rs
from faultsim.world.redis_state import (TtlWatch, apply_downtime, apply_ttl, monitor_command,
                                        restore, snapshot, split, ttl_entries)


def test_server_answers_on_loopback(redis_server):
    assert redis_server.url == f"redis://127.0.0.1:{redis_server.port}/0"
    c = redis_server.client(db=1)
    assert c.ping()
    assert c.config_get("bind")["bind"] == "127.0.0.1"
    assert c.config_get("save")["save"] == ""
    assert c.config_get("appendonly")["appendonly"] == "no"


def test_missing_binary_says_how_to_install(monkeypatch):
    monkeypatch.setattr(rs.shutil, "which", lambda name: None)
    with pytest.raises(rs.RedisUnavailable, match="apt-get install redis-server"):
        rs.RedisServer().start()


def test_server_stops_and_cleans_up(redis_server):  # redis_server: skip without the binary
    with rs.RedisServer() as server:
        proc, tmp = server._proc, server._dir
        assert server.client().set("k", "v")
    assert proc.poll() is not None and not tmp.exists()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG")
def test_server_dies_with_a_sigkilled_parent(redis_server):
    # A child Python starts a server, prints its pid, and is SIGKILLed: no cleanup code
    # runs, yet the kernel must take the server down with it.
    code = textwrap.dedent("""
        import os, signal, sys
        from faultsim.real.redis_server import RedisServer
        s = RedisServer().start()
        print(s._proc.pid, s._dir, flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=30)
    pid, tmp = out.stdout.split()
    deadline = time.monotonic() + 5
    while alive(int(pid)):
        if time.monotonic() > deadline:
            os.kill(int(pid), signal.SIGKILL)
            pytest.fail("redis-server outlived its SIGKILLed parent")
        time.sleep(0.02)
    shutil.rmtree(tmp, ignore_errors=True)  # the killed parent could not clean up


def alive(pid: int) -> bool:
    """Running, not a zombie (an orphan's reaper may be slow, or absent in a container)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def fill(c) -> None:
    c.set("str", b"raw \xff\x00 bytes")
    c.set("empty", b"")
    c.rpush("list", "a", "b", b"\xfe", "a")
    c.hset("hash", mapping={"f1": "v1", "f2": b"\xc3\x28"})
    c.sadd("set", "x", "y", b"\x80")
    c.zadd("zset", {"m1": 1.5, "m2": -2, "m3": float("inf"), b"\xff": 0.1})
    c.set("slash/key", "v", px=3_600_000)
    c.rpush("ttl-list", "1")
    c.expire("ttl-list", 60)


def dump(c) -> dict:
    """What the database holds, read back independently of redis_state."""
    out = {}
    for k in c.keys():
        t = c.type(k)
        if t == b"string":
            out[k] = c.get(k)
        elif t == b"list":
            out[k] = c.lrange(k, 0, -1)
        elif t == b"hash":
            out[k] = c.hgetall(k)
        elif t == b"set":
            out[k] = c.smembers(k)
        elif t == b"zset":
            out[k] = c.zrange(k, 0, -1, withscores=True)
    return out


def test_snapshot_entries(redis_db):
    fill(redis_db)
    state = snapshot(redis_db)
    assert state["redis/str"] == b"raw \xff\x00 bytes"
    assert state["redis/empty"] == b""
    assert "redis-type/str" not in state
    assert json.loads(state["redis/list"]) == {"list": ["a", "b", "\udcfe", "a"]}
    assert state["redis-type/list"] == b"list"
    assert state["redis/hash"] == b'{"hash":{"f1":"v1","f2":"\\udcc3("}}'  # invalid UTF-8 kept
    assert json.loads(state["redis/set"]) == {"set": sorted(["x", "y", "\udc80"])}
    assert json.loads(state["redis/zset"])["zset"][0] == ["m2", -2]
    assert 3_590_000 < int(state["redis-ttl/slash/key"]) <= 3_600_000
    assert 59_000 < int(state["redis-ttl/ttl-list"]) <= 60_000
    assert "redis-ttl/str" not in state


@pytest.mark.parametrize("kind", ["string", "list", "hash", "set", "zset", "all"])
def test_round_trip(redis_db, kind):
    fill(redis_db)
    if kind != "all":  # keep only the keys of one type
        for k in redis_db.keys():
            if redis_db.type(k).decode() != kind:
                redis_db.delete(k)
    before, state = dump(redis_db), snapshot(redis_db)
    assert state
    redis_db.set("stray", "gone after restore")
    restore(redis_db, {**state, "notes/readme.txt": b"ignored"})
    assert dump(redis_db) == before
    again = snapshot(redis_db)
    assert again.keys() == state.keys()
    for path in state:  # TTLs tick in real time: allow the test's own duration
        if path.startswith("redis-ttl/"):
            assert 0 <= int(state[path]) - int(again[path]) < 5_000
        else:
            assert again[path] == state[path]


def test_equal_databases_give_equal_snapshots(redis_db):
    # Same content, different insertion order (and so different internal order).
    redis_db.sadd("s", *"abcdefgh")
    redis_db.hset("h", mapping={c: c for c in "abcdefgh"})
    first = snapshot(redis_db)
    redis_db.flushdb()
    redis_db.sadd("s", *reversed("abcdefgh"))
    redis_db.hset("h", mapping={c: c for c in reversed("abcdefgh")})
    assert snapshot(redis_db) == first


def test_downtime_expires_and_shortens(redis_db):
    redis_db.set("short", "v", ex=60)
    redis_db.rpush("long", "v")
    redis_db.expire("long", 3600)
    redis_db.set("forever", "v")
    state = snapshot(redis_db)
    after = apply_downtime(state, 90)
    assert "redis/short" not in after and "redis-ttl/short" not in after
    assert after["redis/long"] == state["redis/long"]
    assert after["redis-type/long"] == b"list"
    assert int(after["redis-ttl/long"]) == int(state["redis-ttl/long"]) - 90_000
    assert after["redis/forever"] == b"v" and "redis-ttl/forever" not in after
    assert "redis/short" in state  # pure: the input is untouched
    restore(redis_db, after)
    assert sorted(redis_db.keys()) == [b"forever", b"long"]
    assert 3_400_000 < redis_db.pttl("long") <= 3_510_000


def test_downtime_edge_is_gone_and_negative_refused():
    state = {"redis/k": b"v", "redis-ttl/k": b"1000"}
    assert apply_downtime(state, 1) == {}
    assert apply_downtime(state, 0.5) == {"redis/k": b"v", "redis-ttl/k": b"500"}
    assert apply_downtime(state, 0) == state
    with pytest.raises(ValueError):
        apply_downtime(state, -1)


def test_split():
    files = {"notes.txt": b"n", "redis/k": b"v", "redis-ttl/k": b"5", "redis-type/l": b"list",
             "redisx/other": b"file"}
    fs, entries = split(files)
    assert fs == {"notes.txt": b"n", "redisx/other": b"file"}
    assert entries == {"redis/k": b"v", "redis-ttl/k": b"5", "redis-type/l": b"list"}


def test_string_that_looks_like_a_typed_document_stays_a_string(redis_db):
    redis_db.set("k", b'{"list":["a"]}')
    restore(redis_db, snapshot(redis_db))
    assert redis_db.type("k") == b"string"


# -- TTLs as set (redis_state.TtlWatch) ---------------------------------------------------
# The world's clock stands still while an incarnation runs; the server's does not. A crash
# state's TTL is what the command asked for, whatever the machine's speed: read from PTTL
# and rounded up to whole seconds, a key set more than a second before the snapshot (a
# loaded machine) read a second less, and equal states differed by the load (the
# ttl_on_running mutant's resumed runs varied between 108 and 109 from run to run).

def test_ttls_are_as_set_however_slow_the_machine(redis_server, redis_db):
    watch = TtlWatch(redis_server.url)
    redis_db.set("k", "v", ex=3600)
    pipe = redis_db.pipeline(transaction=True)
    pipe.rpush("l", "x")
    pipe.pexpire("l", 1500)
    pipe.execute()
    redis_db.set("gone", "v", ex=60)
    redis_db.set("gone", "plain")  # a plain SET removes the TTL
    time.sleep(1.1)  # the machine is slow: more than a second between the set and the look
    state = snapshot(redis_db)
    assert int(state["redis-ttl/k"]) < 3_599_000  # the server's clock ran
    exact = ttl_entries(state, watch.update())
    assert exact["redis-ttl/k"] == b"3600000" and exact["redis-ttl/l"] == b"1500"
    assert "redis-ttl/gone" not in exact
    # without the watch (a server refusing MONITOR), whole seconds rounded up: off by one
    # second here, which is what the watch is for
    assert ttl_entries(state, None)["redis-ttl/k"] == b"3599000"


def test_ttl_watch_starts_from_what_was_restored(redis_server, redis_db):
    restore(redis_db, {"redis/a": b"1", "redis-ttl/a": b"90000"})
    watch = TtlWatch(redis_server.url, {b"a": 90000})  # a driving child's: after the restore
    time.sleep(1.1)
    assert ttl_entries(snapshot(redis_db), watch.update())["redis-ttl/a"] == b"90000"


def test_ttls_set_some_other_way_are_read_from_the_server(redis_server, redis_db):
    watch = TtlWatch(redis_server.url)
    redis_db.set("abs", "v", pxat=int(time.time() * 1000) + 50_000)
    redis_db.set("cond", "v", ex=70)
    redis_db.expire("cond", 80, gt=True)  # applied or not: the watch cannot tell
    state = ttl_entries(snapshot(redis_db), watch.update())
    assert state["redis-ttl/abs"] in (b"49000", b"50000")
    assert state["redis-ttl/cond"] == b"80000"


def test_apply_ttl():
    as_set: dict = {}
    for argv in (["SET", "a", "v", "EX", "10"], ["PSETEX", "b", "250", "v"],
                 ["SET", "c", "v", "px", "7"], ["SET", "c", "w", "KEEPTTL"],
                 ["EXPIRE", "d", "3"], ["SET", "e", "v", "EX", "9"], ["PERSIST", "e"],
                 ["SET", "f", "v", "NX", "EX", "5"], ["GETEX", "g", "PXAT", "123"],
                 ["SETEX", "h", "2", "v"], ["SET", "h", "v"], ["GETEX", "a"],
                 ["EXPIRE", "i", "5", "GT"], ["RENAME", "a", "j"]):
        apply_ttl(as_set, [x.encode() for x in argv])
    assert as_set == {b"a": 10_000, b"b": 250, b"c": 7, b"d": 3000, b"f": None, b"g": None,
                      b"i": None, b"j": None}
    apply_ttl(as_set, [b"FLUSHDB"])
    assert as_set == {}


def test_monitor_command_unquotes():
    line = b'1796501876.329331 [3 127.0.0.1:48478] "SET" "k a" "v\\"\\x00\\n\\xff" "EX" "3600"'
    assert monitor_command(line) == (3, [b"SET", b"k a", b'v"\x00\n\xff', b"EX", b"3600"])
    assert monitor_command(b'1.2 [0 lua] "EXPIRE" "k" "5"') == (0, [b"EXPIRE", b"k", b"5"])
    assert monitor_command(b"OK") is None


def test_a_discarded_transaction_sets_no_ttl(redis_server, redis_db):
    # a process killed between MULTI and EXEC: its queued commands never ran
    watch = TtlWatch(redis_server.url)
    redis_db.set("k", "v", ex=3600)
    conn = redis_db.connection_pool.get_connection()
    conn.send_command("MULTI")
    conn.read_response()
    conn.send_command("EXPIRE", "k", "7200")
    assert conn.read_response() == b"QUEUED"
    conn.disconnect()
    assert watch.update() == {b"k": 3_600_000}
