"""The counting pass: how many crash states a run's first crashes leave, per crash model,
from one clean run that kills nothing (so a long run can say up front what it explores)."""
from __future__ import annotations

from dataclasses import dataclass, field

from ..killpoints import KillPoint
from ..pipeline.incarnation import held, world_signature
from ..pipeline.sweep import by_event, masked_digest
from ..core.trace import Event, Tracer
from .sandbox import Explorer, crash_states


class _CountAt:
    """Tracer policy of the counting pass: the crash states each chosen kill point leaves,
    per crash model, without killing anything."""

    def __init__(self, ex: Explorer, boundary: dict[int, KillPoint],
                 torn: dict[int, list[KillPoint]], models: list[str]) -> None:
        self.ex, self.boundary, self.torn, self.models = ex, boundary, torn, models
        self.counts = {m: 0 for m in models}
        self.world = None  # the counting run's world (its signature keys states as a sweep)
        # each point's states by the class the sweep would share a resumed run over when
        # the agent proves blind to the file being written (its content masked), after
        # an equal world: what a forecast counts resumed runs by (`Census.classes_at`)
        self.keys: dict[str, set[tuple]] = {}
        self.at: dict[str, dict[str, int]] = {}  # point id -> crash states per model

    def _count(self, point_id: str, snapshot: dict, watch: str | None = None) -> None:
        signature = world_signature(self.world) if self.world is not None else ""
        if watch is None:
            watch = self.ex.interposer.last_touched
        keys = self.keys.setdefault(point_id, set())
        counts = self.at.setdefault(point_id, {})
        for model in self.models:
            states = crash_states(self.ex, model, snapshot)
            self.counts[model] += len(states)
            counts[model] = counts.get(model, 0) + len(states)
            for state in states:
                keys.add((model, masked_digest(state, watch) or state.digest(), signature))

    # faultsim's own work, held: it never counts against the incarnation's time limit
    def after(self, tracer: Tracer, event: Event) -> None:
        point = self.boundary.get(event.index)
        if point is not None:
            with held():
                self._count(point.id, self.ex.interposer.snapshot())

    def before_write(self, tracer: Tracer, write) -> bytes | None:
        points = self.torn.get(tracer.next_index, ())
        if points:
            with held():
                for point in points:
                    self._count(point.id, {**self.ex.interposer.snapshot(),
                                           write.path: write.torn(point.offset)}, write.path)
        return None


def count_crash_states(ex: Explorer, chosen: list[KillPoint], models: list[str]
                       ) -> dict[str, int]:
    """How many crash states the first crashes at `chosen` leave, per crash model: one clean
    run that computes them at each kill point (so a long run can say up front what it will
    explore)."""
    return census(ex, chosen, models).counts


@dataclass
class Census:
    """What the counting pass saw: crash states per model, each kill point's classes of
    states (`_CountAt.keys`), and the clean run's length in events."""

    counts: dict[str, int]
    keys: dict[str, set[tuple]] = field(default_factory=dict)
    events: int = 0
    at: dict[str, dict[str, int]] = field(default_factory=dict)  # per point, per model

    def counts_at(self, points: "list[KillPoint]") -> dict[str, int]:
        """Crash states per model the first crashes at `points` (counted ones) leave."""
        out = {m: 0 for m in self.counts}
        for p in points:
            for m, n in self.at.get(p.id, {}).items():
                out[m] += n
        return out

    def classes_at(self, points: "list[KillPoint]", models: "list[str] | None" = None
                   ) -> int:
        """How many distinct classes of crash states `points` leave (any subset of the
        points counted) under `models` (None: every one counted): the forecast's measure
        of the resumed runs a sweep of them needs."""
        seen: set[tuple] = set()
        for p in points:
            seen |= self.keys.get(p.id, set())
        return sum(1 for key in seen if models is None or key[0] in models)


def census(ex: Explorer, chosen: list[KillPoint], models: list[str]) -> Census:
    """The counting pass (`count_crash_states`), with each point's classes of states."""
    ex.reset_sandbox()
    policy = _CountAt(ex, *by_event(chosen), models)
    world = ex.new_world()
    policy.world = world
    zero = [p for p in chosen if p.index == 0]  # before the first event: one snapshot
    if zero:
        policy._count(zero[0].id, ex.interposer.snapshot())
        for p in zero[1:]:
            policy.keys[p.id] = policy.keys[zero[0].id]
            policy.at[p.id] = policy.at[zero[0].id]
    inc = ex.incarnation(world, policy)
    return Census(policy.counts, policy.keys, len(inc.events), policy.at)
