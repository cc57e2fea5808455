"""The effect ledger: every attempt at every receiver, tagged with the incarnation."""
from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Iterable

# Outcomes that changed the world; everything else was only an attempt.
APPLIED = "applied"
DEDUPLICATED = "deduplicated"  # a keyed repeat: the receiver answered the first result
UNCHANGED = "unchanged"  # a queryable set whose fields the record already held: no effect
EFFECT_OUTCOMES = frozenset({APPLIED})
# a repeat the receiver recognised as one it had (by its key, or its record): nothing applied
RECOGNISED = frozenset({DEDUPLICATED, UNCHANGED})


def canonical(value: Any) -> str:
    """A stable text form for comparing parameters (dict order must not matter)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


@dataclass(frozen=True)
class LedgerEntry:
    seq: int
    service: str
    receiver_kind: str  # keyed | queryable | blind | readonly
    op: str  # submit | apply | send | query | read
    # applied | deduplicated | unchanged | conflict | expired_key | found | not_found | read
    outcome: str
    params: dict
    key: str | None
    result: Any
    incarnation: int
    at: str  # ISO instant on the world clock
    # how many model requests the world had logged when this call arrived: the model turn
    # whose answer the call carries out (the last one asked before it)
    after_request: int = 0

    @property
    def applied(self) -> bool:
        return self.outcome in EFFECT_OUTCOMES

    def effect_id(self) -> str:
        """What makes two applied effects 'the same effect': service, operation, parameters."""
        return f"{self.service}.{self.op}({canonical(self.params)})"

    def describe(self) -> str:
        key = f" key={self.key}" if self.key else ""
        return (f"#{self.seq} inc{self.incarnation} {self.service}.{self.op}"
                f"{key} {canonical(self.params)} -> {self.outcome}")


@dataclass
class Ledger:
    entries: list[LedgerEntry] = field(default_factory=list)

    def record(self, **fields: Any) -> LedgerEntry:
        entry = LedgerEntry(seq=len(self.entries) + 1, **fields)
        self.entries.append(entry)
        return entry

    def attempts(self, service: str | None = None) -> list[LedgerEntry]:
        return [e for e in self.entries if service is None or e.service == service]

    def applied(self, service: str | None = None) -> list[LedgerEntry]:
        return [e for e in self.attempts(service) if e.applied]

    def effect_counts(self, service: str | None = None) -> Counter:
        return Counter(e.effect_id() for e in self.applied(service))

    def duplicates(self, service: str | None = None) -> dict[str, int]:
        """Effects applied more than once: the failure faultsim exists to find."""
        return {k: n for k, n in self.effect_counts(service).items() if n > 1}

    def by_incarnation(self, incarnation: int) -> list[LedgerEntry]:
        return [e for e in self.entries if e.incarnation == incarnation]

    def describe(self, entries: Iterable[LedgerEntry] | None = None) -> str:
        return "\n".join(e.describe() for e in (self.entries if entries is None else entries))


def effect_difference(expected: Ledger, actual: Ledger) -> dict[str, dict[str, int]]:
    """Per effect id: how many more (positive) or fewer (negative) times it was applied."""
    want, got = expected.effect_counts(), actual.effect_counts()
    diff = {k: got[k] - want[k] for k in set(want) | set(got) if got[k] != want[k]}
    return {"extra": {k: n for k, n in diff.items() if n > 0},
            "missing": {k: -n for k, n in diff.items() if n < 0}}
