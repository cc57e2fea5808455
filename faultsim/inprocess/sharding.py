"""Shards of distinct crash states (`--shard I/N` in the in-process mode): which shard owns
each first crash state, decided alike in every shard from one clean run that kills nothing.

Sharding kill points loses the equal-state memo across shards (a state met at kill points
of two shards is resumed in both). Sharding states keeps it: every shard drives the clean
run and computes every crash state, and resumes (and reports) only the states it owns.

Owners go by class, not by single state, so the sweep's sharing decisions are the same in
a shard as in the whole run. A state is shared from another (`Sweep.known`) only through
three keys: its exact key, its digest with the watched file's content blanked, and its
digest without the watched file. Every state here joins the class of all three
(union-find), so any two states the whole run could let share one resumed run are in one
class, and a class's memo entries are made and read by its own members only: the shard
owning a class meets its members in the same order as the whole run and takes the same
decisions, so the resumed runs of the N shards add up to the whole run's and each state's
verdict comes from the same representative (tests/test_shards.py checks both). A class is
owned by the shard a stable hash of its least key names: the same in every shard, on every
machine. Standard library, pipeline and sandbox only."""
from __future__ import annotations

from ..killpoints import KillPoint
from ..pipeline.incarnation import world_signature
from ..pipeline.shards import Classes, shard_of
from ..pipeline.sweep import absent_digest, by_event, masked_digest
from ..core.trace import Event, Tracer
from .sandbox import Explorer, crash_states


class _SurveyAt:
    """Tracer policy of the survey: every crash state at each chosen kill point, with the
    keys it could be shared by (computed as the forking executor computes them)."""

    def __init__(self, ex: Explorer, world, boundary, torn, models) -> None:
        self.ex, self.world, self.boundary, self.torn = ex, world, boundary, torn
        self.models, self.classes, self.keys = models, Classes(), []

    def _add(self, snapshot: dict, watch: str | None) -> None:
        signature = world_signature(self.world)
        for model in self.models:
            for state in crash_states(self.ex, model, snapshot):
                key = ("k", state.digest(), signature)
                self.keys.append((model, key))
                self.classes.find(key)
                masked = masked_digest(state, watch)
                if masked is not None:
                    self.classes.union(key, ("m", masked, watch, signature))
                absent = absent_digest(state, watch)
                if absent is not None:
                    self.classes.union(key, ("k", absent, signature))

    def after(self, tracer: Tracer, event: Event) -> None:
        if event.index in self.boundary:
            self._add(self.ex.interposer.snapshot(), self.ex.interposer.last_touched)

    def before_write(self, tracer: Tracer, write) -> bytes | None:
        for point in self.torn.get(tracer.next_index, ()):
            self._add({**self.ex.interposer.snapshot(), write.path: write.torn(point.offset)},
                      write.path)
        return None


def state_owner(ex: Explorer, chosen: list[KillPoint], models: list[str],
                shard: tuple[int, int]):
    """A predicate on a sweep's memo key (state digest, world signature): whether shard
    `shard` = (i, n) owns that crash state; its `counts`, the first crash states the shard
    owns per crash model (what the run says up front). One clean run computes every
    state."""
    i, n = shard
    ex.reset_sandbox()
    world = ex.new_world()
    policy = _SurveyAt(ex, world, *by_event(chosen), models)
    if any(p.index == 0 for p in chosen):
        policy._add(ex.interposer.snapshot(), ex.interposer.last_touched)
    ex.incarnation(world, policy)
    owner = {key[1:]: shard_of(policy.classes.find(key), n) for _, key in policy.keys}
    mine = {m: 0 for m in models}
    for model, key in policy.keys:
        mine[model] += owner[key[1:]] == i - 1

    def owns(key: tuple) -> bool:
        # a state the survey did not meet (an executor that watched another file) goes by
        # its own key: still one owner, only its sharing may be lost
        found = owner.get(key)
        return (found if found is not None else shard_of(("k", *key), n)) == i - 1

    owns.counts = mine  # type: ignore[attr-defined]  # this shard's states, per model
    return owns
