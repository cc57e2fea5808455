"""The in-process backend's `formats` job: the sandbox `faultsim formats` (faultsim.formats)
records and checks a checkpoint corpus in. One `Explorer` (pyfakefs in this process) per
`FormatsSandbox`; faultsim.formats asks for it through `faultsim.backends.formats` and
keeps the corpus, its manifest and the hostile cases to itself, so that no front end
reaches this package but through the seam.

What it offers is what the corpus work needs of a run, and nothing of the sandbox's
insides: the recording run (the state at each kill point, handed over), the clean run the
oracle judges against, a recorded state resumed and judged, a process crash at one event,
and a state resumed."""
from __future__ import annotations

from typing import Any, Callable

from ..core.crashmodel import CrashState
from ..killpoints import KillPoint
from ..world.snapshot import world_to_json
from .sandbox import Explorer, resume_and_judge


class _RecordAt:
    """Tracer policy: at each kill point, hand the state over; kill nothing."""

    def __init__(self, ex: Explorer, world, points: list[KillPoint],
                 take: Callable[[KillPoint, dict, dict], None]) -> None:
        from ..pipeline.sweep import by_event

        self.ex, self.world, self.take = ex, world, take
        self.boundary, self.torn = by_event(points)

    def after(self, tracer, event) -> None:
        point = self.boundary.get(event.index)
        if point is not None:
            self.take(point, self.ex.interposer.snapshot(), world_to_json(self.world))

    def before_write(self, tracer, write) -> bytes | None:
        points = self.torn.get(tracer.next_index, ())
        if points:
            base, world = self.ex.interposer.snapshot(), world_to_json(self.world)
            for point in points:
                self.take(point, {**base, write.path: write.torn(point.offset)}, world)
        return None


class FormatsSandbox:
    """`with FormatsSandbox(...) as sandbox:` one sandbox for one corpus's work; its
    methods in the order the corpus work calls them."""

    def __init__(self, make_agent: Callable, scenario: Any, *, agent_name: str | None,
                 seed: str, timeout: float | str | None) -> None:
        named = {} if agent_name is None else {"agent_name": agent_name}
        self.ex = Explorer(make_agent, scenario, timeout=timeout, seed=seed, **named)

    def __enter__(self) -> "FormatsSandbox":
        self.ex.__enter__()
        return self

    def __exit__(self, *exc: Any) -> Any:
        return self.ex.__exit__(*exc)

    def record(self, only: Callable[[KillPoint], bool] | None,
               take: Callable[[KillPoint, dict, dict], None]) -> str | None:
        """The recording run: the clean run's kill points (those `only` keeps), then one
        more clean incarnation that hands `take(point, files, world as JSON)` the state at
        each of them and kills nothing. Its error, None when it ended."""
        ex = self.ex
        points = [p for p in ex.golden().kill_points()
                  if p.index > 0 and (only is None or only(p))]
        ex.reset_sandbox()
        world = ex.new_world()
        return ex.incarnation(world, _RecordAt(ex, world, points, take)).error

    def golden(self) -> Any:
        """The clean run the oracle judges against. A corpus keeps the scenario it was
        recorded with; whether today's agent still reaches each of its services is the
        sweep's question, not the format check's."""
        return self.ex.golden(every_service=False)

    def judge(self, golden: Any, world: Any, state: CrashState, point: KillPoint) -> Any:
        """`state` resumed in `world` and judged (a ResumeResult)."""
        return resume_and_judge(self.ex, golden, world, state, [point], None)

    def crash(self, point: KillPoint) -> tuple[dict, Any]:
        """A process killed at `point` of a first incarnation: its files and world."""
        crashed = self.ex.crash(point, "process")
        return crashed.states[0].as_dict(), crashed.world

    def resume(self, world: Any, state: CrashState) -> Any:
        """`state` resumed in `world`, unjudged: its error, outcome and final files."""
        return self.ex.resume(world, state, [])
