"""A Redis database's crash state as plain data: pseudo-file entries beside the agent's files.

One key is one entry, `redis/<key>`: a string's raw bytes, or for the other types a compact
canonical JSON document such as `{"list":["a","b"]}` (members as text, decoded from UTF-8
with `surrogateescape`, so any bytes survive the round trip). Two more entries only when
they apply: `redis-type/<key>` names the type of a non-string key (a string value may well
look like such a JSON document, so the type cannot be guessed from the bytes), and
`redis-ttl/<key>` holds the remaining TTL in milliseconds, as ASCII.

Downtime is applied to this data, not waited for: the world clock is simulated, and the
real server's clock only ever runs for the seconds a test actually takes.
"""
from __future__ import annotations

import json
from typing import Any

import redis

VALUE, TYPE, TTL = "redis/", "redis-type/", "redis-ttl/"
PREFIXES = (VALUE, TYPE, TTL)
TYPES = ("list", "hash", "set", "zset")  # besides "string"


def _text(b: bytes | str) -> str:
    return b if isinstance(b, str) else b.decode("utf-8", "surrogateescape")


def _bytes(s: bytes | str) -> bytes:
    # Accepts either, so a client with decode_responses=True snapshots the same way.
    return s if isinstance(s, bytes) else s.encode("utf-8", "surrogateescape")


def _dump(kind: str, value: Any) -> bytes:
    # sort_keys and no spaces: equal databases give byte-equal documents.
    return json.dumps({kind: value}, sort_keys=True, separators=(",", ":")).encode()


def _read(client: redis.Redis, key: bytes, kind: str) -> bytes | None:
    """The key's value entry; None if it vanished (expired) meanwhile."""
    if kind == "string":
        return client.get(key)
    if kind == "list":
        value: Any = [_text(v) for v in client.lrange(key, 0, -1)]
    elif kind == "hash":
        value = {_text(f): _text(v) for f, v in client.hgetall(key).items()}
    elif kind == "set":
        value = sorted(_text(m) for m in client.smembers(key))  # SMEMBERS order is arbitrary
    elif kind == "zset":  # the server's order (score, then member) is canonical already
        value = [[_text(m), s] for m, s in client.zrange(key, 0, -1, withscores=True)]
    else:
        raise ValueError(f"redis key {_text(key)!r}: type {kind!r} is not supported")
    return _dump(kind, value) if value else None


def snapshot(client: redis.Redis) -> dict[str, bytes]:
    """Every key of the client's db as pseudo-file entries (see the module docstring).
    Meant for a quiescent database: the agent is dead when its crash state is taken."""
    state: dict[str, bytes] = {}
    for raw in client.scan_iter(count=1000):  # SCAN may repeat a key: the dict absorbs it
        key = _bytes(raw)
        kind = _text(client.type(key))
        if kind == "none":
            continue
        value = _read(client, key, kind)
        if value is None:
            continue
        name = _text(key)
        state[VALUE + name] = value
        if kind != "string":
            state[TYPE + name] = kind.encode()
        ttl = client.pttl(key)
        if ttl >= 0:  # -1: no TTL; -2: gone since (keep the value read: it existed)
            state[TTL + name] = str(ttl).encode()
    return state


def restore(client: redis.Redis, state: dict[str, bytes]) -> None:
    """FLUSHDB, then recreate exactly what `snapshot` described, TTLs included. Entries
    outside `redis/`, `redis-type/` and `redis-ttl/` are ignored."""
    client.flushdb()
    pipe = client.pipeline(transaction=False)
    for path, value in state.items():
        if not path.startswith(VALUE):
            continue
        name = path[len(VALUE):]
        key = _bytes(name)
        kind = state.get(TYPE + name, b"string").decode()
        if kind == "string":
            pipe.set(key, value)
        else:
            doc = json.loads(value)[kind]
            if kind == "list":
                pipe.rpush(key, *(_bytes(v) for v in doc))
            elif kind == "hash":
                pipe.hset(key, mapping={_bytes(f): _bytes(v) for f, v in doc.items()})
            elif kind == "set":
                pipe.sadd(key, *(_bytes(m) for m in doc))
            elif kind == "zset":
                pipe.zadd(key, {_bytes(m): float(s) for m, s in doc})
            else:
                raise ValueError(f"{path}: unknown redis type {kind!r}")
        if TTL + name in state:
            pipe.pexpire(key, int(state[TTL + name]))
    pipe.execute()


def apply_downtime(state: dict[str, bytes], seconds: float) -> dict[str, bytes]:
    """The state after `seconds` with nobody running: keys whose TTL is at most the
    downtime are gone, the others have that much less TTL. Pure: `state` is untouched."""
    if seconds < 0:
        raise ValueError(f"downtime must not be negative, got {seconds}")
    elapsed = round(seconds * 1000)
    out = dict(state)
    for path, value in state.items():
        if not path.startswith(TTL):
            continue
        name, left = path[len(TTL):], int(value) - elapsed
        if left <= 0:
            for prefix in PREFIXES:
                out.pop(prefix + name, None)
        else:
            out[path] = str(left).encode()
    return out


def split(files: dict[str, bytes]) -> tuple[dict[str, bytes], dict[str, bytes]]:
    """(the agent's own files, the Redis entries) from one mapping holding both."""
    fs: dict[str, bytes] = {}
    entries: dict[str, bytes] = {}
    for path, value in files.items():
        (entries if path.startswith(PREFIXES) else fs)[path] = value
    return fs, entries
