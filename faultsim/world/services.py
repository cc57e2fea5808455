"""External receivers: services that live outside the agent's crash domain.

A crash never undoes an applied effect: an email sent is sent. The three kinds differ in
what a resumed agent can learn from them, which is what the protocol's reconciliation
(P5, P8, P11) depends on:

- keyed:      takes an idempotency key; a repeat with the same key applies nothing
- queryable:  no key, but the effect can be looked up before writing; a write sets the
              record's fields, so a repeat that leaves the record as it was changes
              nothing (outcome `unchanged`, like a keyed repeat's `deduplicated`)
- blind:      neither; every call is a new effect
- readonly:   no effect at all (lookups of fixed data)
"""
from __future__ import annotations

import copy
import datetime as _dt
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping

from ..interpose import finality
from .ledger import APPLIED, DEDUPLICATED, UNCHANGED, canonical

if TYPE_CHECKING:
    from .world import World

RECEIVER_KINDS = ("keyed", "queryable", "blind", "readonly")


class ServiceError(Exception):
    """A receiver refused a request (the agent sees it like an HTTP 4xx)."""


class IdempotencyConflict(ServiceError):
    """The same idempotency key arrived with different parameters."""


@dataclass
class StoredKey:
    params: str
    result: Any
    at: _dt.datetime


class Receiver:
    kind = ""

    def __init__(self, name: str, world: "World") -> None:
        self.name = name
        self._world = world
        self._applied_count = 0

    def _guard(self, op: str) -> None:
        """A killed incarnation must not act on the world (a real SIGKILL runs no cleanup)."""
        finality.refuse_stray("call", self.name)
        if self._world.sealed:
            from ..core.trace import WorldSealed
            finality.went_on(f"it called {self.name}.{op}")
            raise WorldSealed(f"a killed incarnation called {self.name}.{op}")

    def _record(self, op: str, outcome: str, params: Mapping, key: str | None, result: Any):
        entry = self._world.ledger.record(
            service=self.name, receiver_kind=self.kind, op=op, outcome=outcome,
            params=copy.deepcopy(dict(params)), key=key, result=copy.deepcopy(result),
            incarnation=self._world.incarnation, at=self._world.clock.now().isoformat(),
            after_request=len(self._world.model.requests))
        self._world.emit("effect." + outcome, entry=entry)
        return entry

    def _next_id(self, prefix: str) -> str:
        self._applied_count += 1
        return f"{prefix}-{self._applied_count:04d}"

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r}>"


class KeyedReceiver(Receiver):
    """Accepts an idempotency key and answers a repeat with the original result."""

    kind = "keyed"

    def __init__(self, name: str, world: "World", *,
                 key_retention: _dt.timedelta = _dt.timedelta(hours=24)) -> None:
        super().__init__(name, world)
        self.key_retention = key_retention
        self._keys: dict[str, StoredKey] = {}

    def _forget_expired(self) -> None:
        now = self._world.clock.now()
        for key in [k for k, s in self._keys.items() if now - s.at >= self.key_retention]:
            del self._keys[key]

    def submit(self, params: Mapping[str, Any], *, key: str) -> Any:
        self._guard("submit")
        if not key or not isinstance(key, str):
            raise ServiceError(f"{self.name}: an idempotency key is required")
        self._forget_expired()
        stored = self._keys.get(key)
        if stored is not None:
            if stored.params != canonical(params):
                self._record("submit", "conflict", params, key, None)
                raise IdempotencyConflict(
                    f"{self.name}: idempotency key {key!r} was first used with different "
                    f"parameters {stored.params}")
            self._record("submit", DEDUPLICATED, params, key, stored.result)
            return copy.deepcopy(stored.result)
        result = {"id": self._next_id(self.name), **dict(params)}
        self._keys[key] = StoredKey(canonical(params), copy.deepcopy(result),
                                     self._world.clock.now())
        self._record("submit", APPLIED, params, key, result)
        return result

    def lookup_key(self, key: str) -> Any | None:
        """The stored result for a key still inside its retention window, else None."""
        self._guard("lookup_key")
        self._forget_expired()
        stored = self._keys.get(key)
        return None if stored is None else copy.deepcopy(stored.result)


class QueryableReceiver(Receiver):
    """Records by id; no key, but the current state of a record can be looked up."""

    kind = "queryable"

    def __init__(self, name: str, world: "World", *,
                 records: Mapping[str, Mapping] | None = None) -> None:
        super().__init__(name, world)
        self._records: dict[str, dict] = copy.deepcopy({k: dict(v) for k, v in
                                                        (records or {}).items()})

    def apply(self, record_id: str, fields: Mapping[str, Any]) -> dict:
        """Set the record's fields (creating it if new). Setting is idempotent: a write
        whose fields the record already holds, with the same values, changes nothing and
        is recorded `unchanged`, not applied (protocol P8: the effect is already there). A
        write that changes a value, or creates the record, is applied, whatever came
        before (a set back to an older value is a change)."""
        self._guard("apply")
        existed = record_id in self._records
        record = self._records.setdefault(record_id, {})
        before = copy.deepcopy(record)
        record.update(copy.deepcopy(dict(fields)))
        result = {"record_id": record_id, **record}
        outcome = UNCHANGED if existed and canonical(record) == canonical(before) else APPLIED
        self._record("apply", outcome, {"record_id": record_id, "fields": dict(fields)},
                     None, result)
        return copy.deepcopy(result)

    def query(self, record_id: str) -> dict | None:
        self._guard("query")
        record = self._records.get(record_id)
        result = None if record is None else {"record_id": record_id, **record}
        self._record("query", "found" if record is not None else "not_found",
                     {"record_id": record_id}, None, result)
        return copy.deepcopy(result)


class BlindReceiver(Receiver):
    """Neither keyed nor queryable: every call is a new effect (email, webhook)."""

    kind = "blind"

    def send(self, params: Mapping[str, Any]) -> dict:
        self._guard("send")
        result = {"id": self._next_id(self.name)}
        self._record("send", APPLIED, params, None, result)
        return result


class ReadOnlyReceiver(Receiver):
    """Fixed data to look up; reading changes nothing."""

    kind = "readonly"

    def __init__(self, name: str, world: "World", *,
                 records: Mapping[str, Any] | None = None) -> None:
        super().__init__(name, world)
        self._data = copy.deepcopy(dict(records or {}))

    def read(self, record_id: str) -> Any | None:
        self._guard("read")
        value = self._data.get(record_id)
        self._record("read", "read" if value is not None else "not_found",
                     {"record_id": record_id}, None, value)
        return copy.deepcopy(value)


_RECEIVERS = {cls.kind: cls for cls in
              (KeyedReceiver, QueryableReceiver, BlindReceiver, ReadOnlyReceiver)}


def make_receiver(kind: str, name: str, world: "World", **options: Any) -> Receiver:
    try:
        cls = _RECEIVERS[kind]
    except KeyError:
        raise ValueError(f"service {name!r}: unknown receiver kind {kind!r}; "
                         f"expected one of {', '.join(RECEIVER_KINDS)}") from None
    return cls(name, world, **options)
