"""The world as JSON: what a checkpoint corpus stores beside the agent's files, so that an
entry recorded by one release resumes under the next one in the world it was left in
(receivers' keys and records, the ledger so far, the clock, what the model has answered).

Plain JSON, not pickle: a corpus outlives the code that wrote it, faultsim's own included.
"""
from __future__ import annotations

import datetime as _dt
from dataclasses import asdict
from typing import Any

from ..model.fake import RequestRecord
from .ledger import LedgerEntry
from .services import (BlindReceiver, KeyedReceiver, QueryableReceiver, ReadOnlyReceiver,
                       StoredKey)
from .world import World

SNAPSHOT_VERSION = 1


class SnapshotError(ValueError):
    """A stored world does not fit the scenario it is restored into."""


def _slots(table: dict) -> list:
    return [[tag, position, n] for (tag, position), n in sorted(table.items())]


def world_to_json(world: World) -> dict[str, Any]:
    services: dict[str, Any] = {}
    for name, s in sorted(world.services.items()):
        state: dict[str, Any] = {"kind": s.kind, "applied_count": s._applied_count}
        if isinstance(s, KeyedReceiver):
            state["keys"] = {k: {"params": v.params, "result": v.result,
                                 "at": v.at.isoformat()} for k, v in sorted(s._keys.items())}
        elif isinstance(s, QueryableReceiver):
            state["records"] = s._records
        services[name] = state
    return {
        "snapshot_version": SNAPSHOT_VERSION,
        "clock": world.clock.now().isoformat(),
        "incarnation": world.incarnation,
        "services": services,
        "ledger": [asdict(e) for e in world.ledger.entries],
        "model": {"answered": _slots(world.model._answered),
                  "faulted": _slots(world.model._faulted),
                  "requests": [{**asdict(r), "tool_use_ids": list(r.tool_use_ids)}
                               for r in world.model.requests]},
    }


def restore_world(world: World, data: dict[str, Any]) -> World:
    """Overlay a stored state on a freshly built world of the same scenario."""
    version = data.get("snapshot_version")
    if version != SNAPSHOT_VERSION:
        raise SnapshotError(f"world snapshot version {version!r}; this faultsim reads "
                            f"{SNAPSHOT_VERSION}")
    stored, present = set(data["services"]), set(world.services)
    if stored != present:
        raise SnapshotError(f"the stored world has services {sorted(stored)}, the scenario "
                            f"{sorted(present)}")
    from .clock import parse_instant

    world.clock._now = parse_instant(data["clock"])
    world.incarnation = data["incarnation"]
    for name, state in data["services"].items():
        s = world.services[name]
        if state["kind"] != s.kind:
            raise SnapshotError(f"service {name!r} was {state['kind']}, the scenario makes it "
                                f"{s.kind}")
        s._applied_count = state["applied_count"]
        if isinstance(s, KeyedReceiver):
            s._keys = {k: StoredKey(v["params"], v["result"],
                                     _dt.datetime.fromisoformat(v["at"]))
                       for k, v in state["keys"].items()}
        elif isinstance(s, QueryableReceiver):
            s._records = state["records"]
        elif not isinstance(s, (BlindReceiver, ReadOnlyReceiver)):
            raise SnapshotError(f"service {name!r}: cannot restore a {s.kind} receiver")
    world.ledger.entries = [LedgerEntry(**e) for e in data["ledger"]]
    model = data["model"]
    world.model._answered = {(t, p): n for t, p, n in model["answered"]}
    world.model._faulted = {(t, p): n for t, p, n in model["faulted"]}
    world.model.requests = [RequestRecord(**{**r, "tool_use_ids": tuple(r["tool_use_ids"])})
                            for r in model["requests"]]
    return world
