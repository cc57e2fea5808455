"""Kill points inside redis-py: events after each landed write, transactions sent one
command at a time, and what a SIGKILL at each point really leaves on a real server."""
from __future__ import annotations

import os
import signal

import pytest
import redis

from faultsim.interpose import redis as tracing
from faultsim.core.trace import digest


@pytest.fixture
def events():
    seen: list[tuple[str, str, str]] = []
    tracing.install(lambda kind, subject, detail="": seen.append((kind, subject, detail)))
    try:
        yield seen
    finally:
        tracing.uninstall()


def workload(c: redis.Redis) -> list:
    """The common commands, plain and in both kinds of pipeline; returns every result."""
    out = [c.set("a", "1"), c.get("a"), c.incr("n"), c.rpush("l", "x", "y"),
           c.lrange("l", 0, -1), c.expire("l", 100), c.set("t", "v", ex=50),
           c.set("p", "v", px=5000), c.hset("h", "f", "v"), c.hgetall("h"), c.delete("a"),
           c.exists("a"), c.get("missing")]
    with c.pipeline(transaction=True) as p:
        p.set("a", "2").incr("n").rpush("l", "z").lrange("l", 0, -1).get("a")
        p.set("e", "v", ex=10).hset("h", "g", "w").expire("h", 100).delete("t")
        out.append(p.execute())
    with c.pipeline(transaction=False) as p:
        out.append(p.set("b", "3").get("b").incr("n").lrange("l", 0, -1).execute())
    return out


def test_results_equal_an_unpatched_client(redis_db, events):
    traced = workload(redis_db)
    redis_db.flushdb()
    tracing.uninstall()
    assert workload(redis_db) == traced
    assert traced[-2] == [True, 2, 3, [b"x", b"y", b"z"], b"2", True, 1, True, 1]


def test_plain_writes_emit_after_landing_reads_emit_nothing(redis_db):
    seen = []

    def emit(kind, subject, detail=""):  # the write is visible by the time we hear of it
        seen.append((kind, subject, redis_db.get(subject)))  # a read: emits nothing
    tracing.install(emit)
    try:
        redis_db.set("k", "v")
        redis_db.get("k")
        redis_db.exists("k")
        redis_db.pttl("k")
        redis_db.incr("n")
    finally:
        tracing.uninstall()
    # redis-py's incr() sends INCRBY: events name the command on the wire.
    assert seen == [("redis.set", "k", b"v"), ("redis.incrby", "n", b"1")]


def test_plain_event_details_are_stable_digests(redis_db, events):
    redis_db.set("k", "v", ex=5)
    redis_db.set("k", "v", ex=5)
    redis_db.set("k", "w", ex=5)
    assert [e[:2] for e in events] == [("redis.set", "k")] * 3
    assert events[0][2] == events[1][2] != events[2][2]
    assert len(events[0][2]) == len(digest(b""))


def test_transaction_emits_multi_each_queued_write_then_exec(redis_db, events):
    with redis_db.pipeline() as p:
        p.set("a", "1").get("a").rpush("l", "x").expire("l", 60)
        assert p.execute() == [True, b"1", 1, True]
    kinds = [(k, s) for k, s, _ in events]
    assert kinds == [("redis.multi", ""), ("redis.set", "a"), ("redis.rpush", "l"),
                     ("redis.expire", "l"), ("redis.exec", "")]
    assert all(d.startswith("queued ") for _, _, d in events[1:4])
    assert events[-1][2] == "n=4"


def test_plain_pipeline_emits_each_write(redis_db, events):
    with redis_db.pipeline(transaction=False) as p:
        assert p.set("a", "1").get("a").incr("a").execute() == [True, b"1", 2]
    assert [(k, s) for k, s, _ in events] == [("redis.set", "a"), ("redis.incrby", "a")]


def test_errors_are_raised_as_redis_py_raises_them(redis_db, events):
    redis_db.set("s", "text")
    with pytest.raises(redis.ResponseError, match="Command # 1"):  # error at EXEC time
        with redis_db.pipeline() as p:
            p.incr("s").set("ok", "1").execute()
    assert redis_db.get("ok") == b"1"  # Redis has no rollback: the rest applied
    with redis_db.pipeline() as p:
        assert isinstance(p.incr("s").set("ok", "2").execute(raise_on_error=False)[0],
                          redis.ResponseError)
    with pytest.raises(redis.ResponseError):  # refused at queue time: EXECABORT, nothing
        with redis_db.pipeline() as p:
            p.set("ok", "3").execute_command("SET", "only-key")
            p.execute()
    assert redis_db.get("ok") == b"2"
    with pytest.raises(redis.ResponseError):
        redis_db.incr("s")


def test_watch_error(redis_db, redis_server, events):
    other = redis_server.client()
    with redis_db.pipeline() as p:
        p.watch("w")
        p.get("w")
        other.set("w", "changed")
        p.multi()
        p.set("w", "mine")
        with pytest.raises(redis.WatchError):
            p.execute()
    assert redis_db.get("w") == b"changed"
    assert ("redis.exec", "", "n=1") not in events


def test_simulated_kill_mid_transaction_drops_the_connection(redis_db, events):
    class Killed(BaseException):
        pass

    def emit(kind, subject, detail=""):
        if kind == "redis.set":
            raise Killed
    tracing.install(emit)
    with pytest.raises(Killed):
        with redis_db.pipeline() as p:
            p.set("a", "1").set("b", "2").execute()
    tracing.uninstall()
    assert redis_db.set("c", "3") and redis_db.get("c") == b"3"  # not queued in a MULTI
    assert redis_db.get("a") is None and redis_db.get("b") is None


def run_killed_child(url: str, kill_after: tuple[str, ...], body) -> list[str]:
    """Fork; the child traces redis-py and SIGKILLs itself once the events so far end
    with `kill_after`. Returns the child's events, proving where the kill landed."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never return into pytest, whatever happens
        try:
            os.close(r)
            seen: list[str] = []

            def emit(kind, subject, detail=""):
                seen.append(kind)
                os.write(w, (kind + "\n").encode())
                if tuple(seen[-len(kill_after):]) == kill_after:
                    os.kill(os.getpid(), signal.SIGKILL)
            tracing.install(emit)
            body(redis.Redis.from_url(url))
            os._exit(0)  # not killed: the parent reports it
        except BaseException:
            os._exit(1)
        finally:
            os._exit(2)
    os.close(w)
    with os.fdopen(r) as f:
        events = f.read().split()
    _, status = os.waitpid(pid, 0)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL, status
    return events


def test_sigkill_inside_multi_applies_nothing(redis_server, redis_db):
    def body(c):
        with c.pipeline() as p:
            p.set("a", "1").rpush("l", "x").set("b", "2").execute()
    events = run_killed_child(redis_server.url, ("redis.multi", "redis.set"), body)
    assert events == ["redis.multi", "redis.set"]
    assert redis_db.keys() == []


def test_sigkill_before_exec_applies_nothing(redis_server, redis_db):
    def body(c):
        with c.pipeline() as p:
            p.set("a", "1").set("b", "2").execute()
    events = run_killed_child(redis_server.url, ("redis.set", "redis.set"), body)
    assert events == ["redis.multi", "redis.set", "redis.set"]
    assert redis_db.keys() == []


def test_sigkill_after_exec_applies_everything(redis_server, redis_db):
    def body(c):
        with c.pipeline() as p:
            p.set("a", "1").set("b", "2").execute()
    run_killed_child(redis_server.url, ("redis.exec",), body)
    assert redis_db.mget("a", "b") == [b"1", b"2"]


def test_sigkill_after_a_plain_set_leaves_it_applied(redis_server, redis_db):
    def body(c):
        c.set("a", "1")
        c.set("b", "2")
    events = run_killed_child(redis_server.url, ("redis.set",), body)
    assert events == ["redis.set"]
    assert redis_db.get("a") == b"1" and redis_db.get("b") is None


def test_sigkill_inside_a_plain_pipeline_keeps_what_landed(redis_server, redis_db):
    def body(c):
        with c.pipeline(transaction=False) as p:
            p.set("a", "1").set("b", "2").execute()
    run_killed_child(redis_server.url, ("redis.set",), body)
    assert redis_db.get("a") == b"1" and redis_db.get("b") is None


def test_uninstall_restores_redis_py():
    original = redis.Redis.execute_command, redis.client.Pipeline._execute_transaction
    tracing.install(lambda *a: None)
    tracing.install(lambda *a: None)  # again: swaps the callable only
    assert redis.Redis.execute_command is not original[0]
    tracing.uninstall()
    assert (redis.Redis.execute_command, redis.client.Pipeline._execute_transaction) == original
