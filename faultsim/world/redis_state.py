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
import os
import re
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


# -- TTLs as set -------------------------------------------------------------------------
# The server's TTLs tick in real time, but the world's clock stands still while an
# incarnation runs (only downtime moves it), so a key's TTL in a crash state is what its
# last command asked for: no world time has passed since. Read from PTTL, it would be that
# less however long the machine took (more under load), and equal states would differ by
# how busy the machine was: a state's TTL is that of the command that set it, read from the
# server's MONITOR stream (`TtlWatch`); where a TTL was set some other way (an absolute
# time, a condition, copied from another key) the caller falls back to PTTL.

_LINE = re.compile(rb"^\d+\.\d+ \[(\d+) [^\]]*\] (.*)$", re.S)
_ARG = re.compile(rb'"((?:[^"\\]|\\.)*)"', re.S)
_ESCAPES = {b"n": b"\n", b"r": b"\r", b"t": b"\t", b"a": b"\a", b"b": b"\b"}


def monitor_command(line: bytes) -> tuple[int, list[bytes]] | None:
    """(db, argv) of one MONITOR line (its arguments unquoted); None if it is none."""
    m = _LINE.match(line)
    if m is None:
        return None
    return int(m.group(1)), [_unquote(a) for a in _ARG.findall(m.group(2))]


def _unquote(s: bytes) -> bytes:
    out, i = bytearray(), 0
    while i < len(s):
        if s[i:i + 1] == b"\\" and i + 1 < len(s):
            n = s[i + 1:i + 2]
            if n == b"x":
                out += bytes([int(s[i + 2:i + 4], 16)])
                i += 4
                continue
            out += _ESCAPES.get(n, n)
            i += 2
            continue
        out += s[i:i + 1]
        i += 1
    return bytes(out)


def _expiry(options: list[bytes]) -> tuple[str, int | None]:
    """A SET or GETEX's expiry options: ("set", ms), ("unknown", None) for an absolute
    time, ("keep", None) for KEEPTTL or none given to GETEX, ("clear", None) otherwise."""
    up = [o.upper() for o in options]
    for unit, scale in ((b"EX", 1000), (b"PX", 1)):
        if unit in up and up.index(unit) + 1 < len(up):
            return "set", int(options[up.index(unit) + 1]) * scale
    if b"EXAT" in up or b"PXAT" in up:
        return "unknown", None
    if b"KEEPTTL" in up:
        return "keep", None
    return ("clear", None) if b"PERSIST" in up else ("none", None)


def apply_ttl(as_set: dict[bytes, int | None], argv: list[bytes]) -> None:
    """Update `as_set` (key -> the TTL in ms its last command set, None: set some other
    way) with one command the server ran."""
    if not argv:
        return
    name, args = argv[0].upper(), argv[1:]
    try:
        if name in (b"FLUSHDB", b"FLUSHALL"):
            as_set.clear()
        elif name == b"SET" and len(args) >= 2:
            opts = [o.upper() for o in args[2:]]
            how, ms = _expiry(args[2:])
            if b"NX" in opts or b"XX" in opts:  # it may not have applied
                as_set[args[0]] = None
            elif how == "set":
                as_set[args[0]] = ms
            elif how == "unknown":
                as_set[args[0]] = None
            elif how != "keep":
                as_set.pop(args[0], None)  # a plain SET removes the TTL
        elif name == b"GETEX" and args:
            how, ms = _expiry(args[1:])
            if how == "set":
                as_set[args[0]] = ms
            elif how == "unknown":
                as_set[args[0]] = None
            elif how == "clear":
                as_set.pop(args[0], None)
        elif name in (b"SETEX", b"PSETEX") and len(args) >= 2:
            as_set[args[0]] = int(args[1]) * (1000 if name == b"SETEX" else 1)
        elif name in (b"EXPIRE", b"PEXPIRE") and len(args) >= 2:
            # with NX, XX, GT or LT it may not have applied
            as_set[args[0]] = (int(args[1]) * (1000 if name == b"EXPIRE" else 1)
                               if len(args) == 2 else None)
        elif name == b"PERSIST" and args:
            as_set.pop(args[0], None)
        elif name in (b"EXPIREAT", b"PEXPIREAT", b"RESTORE") and args:
            as_set[args[0]] = None
        elif name in (b"RENAME", b"RENAMENX", b"COPY") and len(args) >= 2:
            as_set[args[1]] = None  # the other key's TTL, if any
        elif name in (b"MOVE", b"SWAPDB"):
            as_set.clear()  # another database's keys, with their TTLs, may come here
    except ValueError:  # a malformed number: the server refused it
        pass


class TtlWatch:
    """The TTLs the commands on one database set (`apply_ttl`), from a MONITOR connection
    of its own, opened before the commands it is to see. `base`: TTLs in place already."""

    def __init__(self, url: str, base: dict[bytes, int | None] | None = None) -> None:
        self.client = redis.Redis.from_url(url, socket_timeout=30)
        self.db = self.client.connection_pool.connection_kwargs.get("db", 0)
        self.conn = self.client.connection_pool.get_connection()
        self.conn.send_command("MONITOR")
        self.conn.read_response()
        self.client.ping()  # its other connection (for the marks) made now, not later
        self.as_set: dict[bytes, int | None] = dict(base or {})
        self.marks = 0

    @classmethod
    def open(cls, url: str, base: dict[bytes, int | None] | None = None
             ) -> "TtlWatch | None":
        """A watch, or None where the server refuses one (then PTTL is read)."""
        try:
            return cls(url, base)
        except (redis.RedisError, OSError):
            return None

    def update(self) -> dict[bytes, int | None] | None:
        """The TTLs as set by every command run so far; None where the stream could not
        be read (then no TTL is known: the caller reads PTTL)."""
        self.marks += 1
        token = f"faultsim-ttl-mark-{os.getpid()}-{self.marks}".encode()
        try:
            self.client.echo(token)
            while True:
                parsed = monitor_command(_bytes(self.conn.read_response()))
                if parsed is None:
                    continue
                db, argv = parsed
                if argv == [b"ECHO", token]:
                    return self.as_set
                if db == self.db:
                    apply_ttl(self.as_set, argv)
        except (redis.RedisError, OSError):
            return None


def ttl_entries(state: dict[str, bytes], as_set: dict[bytes, int | None] | None
                ) -> dict[str, bytes]:
    """`state` (a `snapshot`) with each TTL the one its key's command set (`TtlWatch`),
    where that is known and consistent with what is left (no more than it); the others
    whole seconds, rounded up (the server's clock ran meanwhile; a second absorbs it where
    the key was set less than a second before)."""
    out = dict(state)
    for path, value in state.items():
        if not path.startswith(TTL):
            continue
        left = int(value)
        known = None if as_set is None else as_set.get(_bytes(path[len(TTL):]))
        out[path] = str(known if known is not None and 0 <= left <= known
                        else -(-left // 1000) * 1000).encode()
    return out
