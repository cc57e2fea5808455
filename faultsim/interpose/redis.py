"""Kill points inside an agent's redis-py calls.

Every command that can change the database becomes an event once the server has replied
(the command landed): `emit("redis.<command>", key, digest_of_args)`. Reads emit nothing:
a kill between two reads leaves the same database as a kill after both.

Pipelines are normally written to the socket in one batch, which would hide every point
inside them. Here they are sent one command at a time instead, with an event after each
reply. For a MULTI/EXEC pipeline that means `redis.multi`, then one `redis.<command>` per
queued command (detail `queued <digest>`), then `redis.exec`: a process killed between two
of them leaves the server holding an open MULTI on a dead connection, which it discards,
exactly as a real crash mid-transaction would.

`emit` may never return (the caller SIGKILLs its own process inside it) or may raise a
simulated kill; if it raises inside a transaction the connection is dropped first, so the
half-sent MULTI dies with it as it would with the process.

Patches `Redis.execute_command` and `Pipeline.immediate_execute_command` (commands sent at
once), and relies on redis-py 8.1 internals: `Pipeline._execute_transaction` and
`Pipeline._execute_pipeline` (replaced, so that `Pipeline.execute` keeps its retry,
connection and WATCH handling), `Pipeline.parse_response`, `annotate_exception`,
`raise_first_error` and `_himport_prepare_pipeline`.
"""
from __future__ import annotations

from typing import Any, Callable

import redis
from redis.client import EMPTY_RESPONSE, Pipeline
from redis.exceptions import ExecAbortError, ResponseError, WatchError

from ..core.trace import digest

Emit = Callable[..., Any]  # emit(kind: str, subject: str, detail: str = "")

# Commands that cannot change the database, so cannot split a save. WATCH/UNWATCH only
# touch the connection's state, which a crash discards anyway.
READS = frozenset("""
    GET MGET GETRANGE STRLEN EXISTS TYPE TTL PTTL KEYS SCAN RANDOMKEY DBSIZE PING ECHO
    LRANGE LLEN LINDEX LPOS HGET HMGET HGETALL HKEYS HVALS HLEN HEXISTS HSTRLEN HSCAN
    SMEMBERS SISMEMBER SMISMEMBER SCARD SRANDMEMBER SSCAN ZRANGE ZRANGEBYSCORE ZREVRANGE
    ZREVRANGEBYSCORE ZSCORE ZMSCORE ZCARD ZCOUNT ZRANK ZREVRANK ZSCAN WATCH UNWATCH
""".split())

_emit: Emit | None = None
_originals: dict[str, Any] = {}


def _name(args: tuple) -> str:
    name = args[0]
    return (name.decode() if isinstance(name, bytes) else str(name)).upper()


def _kind(args: tuple) -> str:
    return "redis." + _name(args).lower().replace(" ", ".")  # "SCRIPT LOAD" → redis.script.load


def _subject(args: tuple) -> str:
    """The key a command concerns: by convention its first argument ("" if none)."""
    if len(args) < 2:
        return ""
    arg = args[1]
    return arg.decode("utf-8", "backslashreplace") if isinstance(arg, bytes) else str(arg)


def _args_digest(args: tuple) -> str:
    # Length-prefixed so that ("ab", "c") and ("a", "bc") differ.
    parts = []
    for a in args:
        b = a if isinstance(a, bytes) else str(a).encode("utf-8", "surrogateescape")
        parts.append(b"%d:%s" % (len(b), b))
    return digest(b"".join(parts))


def _writes(args: tuple) -> bool:
    return _name(args) not in READS


def _execute_command(self, *args, **options):
    result = _originals["execute_command"](self, *args, **options)
    if _emit is not None and _writes(args):
        _emit(_kind(args), _subject(args), _args_digest(args))
    return result


def _immediate_execute_command(self, *args, **options):
    # A pipeline's commands while WATCHing, before MULTI, are sent at once: trace them too.
    result = _originals["immediate_execute_command"](self, *args, **options)
    if _emit is not None and _writes(args):
        _emit(_kind(args), _subject(args), _args_digest(args))
    return result


def _emit_or_drop(connection, kind: str, subject: str, detail: str) -> None:
    """Emit inside a transaction. If emit raises (a simulated kill), close the socket so
    the server discards the open MULTI, as it does when a killed process's socket closes;
    otherwise the pool would hand out a connection still inside MULTI."""
    try:
        if _emit is not None:
            _emit(kind, subject, detail)
    except BaseException:
        connection.disconnect()
        raise


def _execute_transaction(self: Pipeline, connection, commands, raise_on_error) -> list:
    # Mirrors redis-py 8.1's Pipeline._execute_transaction, one round trip per command.
    if hasattr(self, "_himport_prepare_pipeline"):
        self._himport_prepare_pipeline(connection, commands)
    errors: list[tuple[int, Any]] = []
    connection.send_command("MULTI")
    try:
        self.parse_response(connection, "_")
    except ResponseError as e:
        errors.append((0, e))
    else:
        _emit_or_drop(connection, "redis.multi", "", "")
    for i, (args, options) in enumerate(commands):
        if EMPTY_RESPONSE in options:  # not sent: its fallback value stands in
            errors.append((i, options[EMPTY_RESPONSE]))
            continue
        # No health check: a PING inside MULTI would be queued, not answered.
        connection.send_command(*args, check_health=False)
        try:
            self.parse_response(connection, "_")  # QUEUED
        except ResponseError as e:
            self.annotate_exception(e, i + 1, args)
            errors.append((i, e))
            continue
        if _writes(args):
            _emit_or_drop(connection, _kind(args), _subject(args),
                          "queued " + _args_digest(args))
    connection.send_command("EXEC", check_health=False)
    try:
        response = self.parse_response(connection, "_")
    except ExecAbortError:
        if errors:
            raise errors[0][1]
        raise
    self.watching = False  # EXEC clears any watched keys
    if response is None:
        raise WatchError("Watched variable changed.")
    if _emit is not None:  # the connection is out of MULTI now: nothing to drop
        _emit("redis.exec", "", f"n={len(commands)}")
    for i, e in errors:
        response.insert(i, e)
    if len(response) != len(commands):
        connection.disconnect()
        raise ResponseError("Wrong number of response items from pipeline execution")
    if raise_on_error:
        self.raise_first_error(commands, response)
    data = []
    for r, (args, options) in zip(response, commands):
        if not isinstance(r, Exception):
            options.pop("keys", None)  # only for client-side caching
            if args[0] in self.response_callbacks:
                r = self.response_callbacks[args[0]](r, **options)
        data.append(r)
    return data


def _execute_pipeline(self: Pipeline, connection, commands, raise_on_error) -> list:
    # Mirrors redis-py 8.1's Pipeline._execute_pipeline, one round trip per command.
    # (HIMPORT PREPAREs are sent ahead, not folded into the batch: there is no batch.)
    if hasattr(self, "_himport_prepare_pipeline"):
        self._himport_prepare_pipeline(connection, commands)
    responses = []
    for args, options in commands:
        connection.send_command(*args)
        try:
            responses.append(self.parse_response(connection, args[0], **options))
        except ResponseError as e:
            responses.append(e)
            continue
        if _emit is not None and _writes(args):
            _emit(_kind(args), _subject(args), _args_digest(args))
    if raise_on_error:
        self.raise_first_error(commands, responses)
    return responses


def install(emit: Emit) -> None:
    """Trace every redis-py client in this process through `emit`. Installing again only
    swaps the callable."""
    global _emit
    _emit = emit
    if _originals:
        return
    _originals["execute_command"] = redis.Redis.execute_command
    _originals["immediate_execute_command"] = Pipeline.immediate_execute_command
    _originals["_execute_transaction"] = Pipeline._execute_transaction
    _originals["_execute_pipeline"] = Pipeline._execute_pipeline
    redis.Redis.execute_command = _execute_command
    Pipeline.immediate_execute_command = _immediate_execute_command
    Pipeline._execute_transaction = _execute_transaction
    Pipeline._execute_pipeline = _execute_pipeline


def uninstall() -> None:
    """Put redis-py back as it was."""
    global _emit
    _emit = None
    if not _originals:
        return
    redis.Redis.execute_command = _originals.pop("execute_command")
    Pipeline.immediate_execute_command = _originals.pop("immediate_execute_command")
    Pipeline._execute_transaction = _originals.pop("_execute_transaction")
    Pipeline._execute_pipeline = _originals.pop("_execute_pipeline")
