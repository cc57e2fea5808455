"""The counting pass: how many crash states a run's first crashes leave, per crash model,
from one clean run that kills nothing (so a long run can say up front what it explores)."""
from __future__ import annotations

from ..killpoints import KillPoint
from ..pipeline.incarnation import held
from ..pipeline.sweep import by_event
from ..trace import Event, Tracer
from .sandbox import Explorer, crash_states


class _CountAt:
    """Tracer policy of the counting pass: the crash states each chosen kill point leaves,
    per crash model, without killing anything."""

    def __init__(self, ex: Explorer, boundary: dict[int, KillPoint],
                 torn: dict[int, list[KillPoint]], models: list[str]) -> None:
        self.ex, self.boundary, self.torn, self.models = ex, boundary, torn, models
        self.counts = {m: 0 for m in models}

    def _count(self, snapshot: dict) -> None:
        for model in self.models:
            self.counts[model] += len(crash_states(self.ex, model, snapshot))

    # faultsim's own work, held: it never counts against the incarnation's time limit
    def after(self, tracer: Tracer, event: Event) -> None:
        if event.index in self.boundary:
            with held():
                self._count(self.ex.interposer.snapshot())

    def before_write(self, tracer: Tracer, write) -> bytes | None:
        points = self.torn.get(tracer.next_index, ())
        if points:
            with held():
                for point in points:
                    self._count({**self.ex.interposer.snapshot(),
                                 write.path: write.torn(point.offset)})
        return None


def count_crash_states(ex: Explorer, chosen: list[KillPoint], models: list[str]
                       ) -> dict[str, int]:
    """How many crash states the first crashes at `chosen` leave, per crash model: one clean
    run that computes them at each kill point (so a long run can say up front what it will
    explore)."""
    ex.reset_sandbox()
    policy = _CountAt(ex, *by_event(chosen), models)
    if any(p.index == 0 for p in chosen):
        policy._count(ex.interposer.snapshot())
    ex.incarnation(ex.new_world(), policy)
    return policy.counts
