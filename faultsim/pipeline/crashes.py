"""The kill-point loop of the backends that kill real processes (the command backend,
`faultsim.command`, and the Claude Agent SDK adapter), and its conversion to faultsim's
report: one copy for both (issue 34 item 6).

For each chosen kill point: the backend's crash run; the landed check (the run reached its
point and the kill is proven landed: a crash test proves its kill before it judges
anything; else the crash run is tried once more, and a point whose second try fails too
is that point's finding, `kill_point_judged`, and the sweep goes on: `unjudged`); the
crash states the kill left; each judged by the memo
(`sweep.Shared`: a state whose key equals one resumed already shares its resumed run, and
is judged on its own bytes all the same), resumed by the backend where it is new; one
progress line per state. What differs between the backends is behind `Backend`: how a
crash run is made and its kill proven, which states a kill leaves, how a state is keyed
and resumed. `verdicts` turns what the loop judged into each crash model's `ModelRun`."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Protocol

from ..core.crashmodel import CRASH_MODELS, CrashState
from ..errors import KillDidNotLand
from ..killpoints import KillPoint
from ..judge.oracle import Golden, Violation
from ..reports.report import ModelRun, Verdict
from .sweep import ResumeResult, Shared
from .unjudged import NO_STATE, finding, twice


@dataclass
class Kill:
    """A crash run as the loop checks it: did it reach its kill point, did the kill land."""

    run: Any  # the backend's crashed incarnation
    world: Any  # the world as the kill left it
    reached: bool  # the run met its kill point (else it ended or failed first)
    landed: bool  # the kill is proven landed there (the process group dead, ...)
    met: str = ""  # when not reached: how far it got
    error: str | None = None  # when not reached: its error (None: it completed)
    why: str = ""  # when reached and not landed: why not, in words
    # the point is not reached by design in this run (the CLI's timed transcript
    # batches): said in a progress line and kept, never judged as passed
    missed: str | None = None


@dataclass(frozen=True)
class Found:
    """One crash state a kill left."""

    state: CrashState  # as the guards read it; `persisted` names it in the report
    models: tuple[str, ...]  # the crash models it is a state of
    label: str  # how a progress line, and a state sharing its resumed run, name it
    given: Any = None  # the backend's own form of it, for its key and its resume


@dataclass
class Judged:
    """One crash state judged: the verdict's makings."""

    point: Any  # the backend's kill point
    found: Found
    orders: dict[str, int]  # crash model -> its place among the point's states there
    violations: list[Violation]
    result: ResumeResult  # the resumed run it was judged on
    shared: str | None  # the state that run was resumed for, when shared; None: its own
    key: tuple | None  # its memo key (equal states share it; None: not shared)
    kill: Kill
    unjudged: bool = False  # the point could not be judged: this is its finding (`sweep`)


class Backend(Protocol):
    """What a real-process backend gives the loop."""

    where: str  # what its errors start with (the scenario's file)

    def crash(self, point: Any) -> Kill:
        """The crash run at `point`, its kill checked (`Kill.reached`, `Kill.landed`)."""

    def states(self, point: Any, kill: Kill) -> list[Found]:
        """The crash states the kill left, in order."""

    def key(self, point: Any, kill: Kill, found: Found) -> tuple[CrashState, str]:
        """The state's memo key: equal keys give the same resumed run (the argument is the
        backend's, written beside its key)."""

    def resume(self, point: Any, kill: Kill, found: Found) -> ResumeResult:
        """One resumed run from the state, judged by the resume guards."""

    def engine_point(self, point: Any) -> KillPoint:
        """The kill point as the oracle and the report name it."""


@dataclass
class Swept:
    """What the loop did: the points whose kill landed, each state judged, the points
    missed by design."""

    landed: list = field(default_factory=list)
    judged: list[Judged] = field(default_factory=list)
    missed: list = field(default_factory=list)
    taken: int = 0  # of `judged`, those `taken` gave out already (each verdict made once)

    @property
    def resumes(self) -> int:
        return sum(1 for j in self.judged if j.shared is None and not j.unjudged)


def landed(backend: Backend, point: Any, kill: Kill) -> bool:
    """The landed check: raises when the crash run never reached its point or its kill did
    not land; False when the point is missed by design (reported, never judged)."""
    if kill.missed is not None:
        return False
    if not kill.reached:
        raise KillDidNotLand.never_reached(f"{backend.where}{point.id}", kill.met,
                                           kill.error)
    if not kill.landed:
        raise KillDidNotLand(f"{backend.where}{point.id}: {kill.why}")
    return True


def judge_state(backend: Backend, memo: Shared, point: Any, kill: Kill, found: Found,
                orders: dict[str, int]) -> Judged:
    """One crash state's verdict: the memo's (`Shared.judge`), resumed by the backend
    where the state is new."""
    key = backend.key(point, kill, found) if memo.share else None
    violations, result, shared, exact = memo.judge(
        [backend.engine_point(point)], found.state, key,
        lambda: backend.resume(point, kill, found), f"{point.id} [{found.label}]")
    return Judged(point, found, orders, violations, result, shared, exact, kill)


def _crash(backend: Backend, point: Any) -> tuple[Kill, str | None]:
    """The crash run at `point`, tried again once when it did not reach its point or its
    kill could not be proven landed (`unjudged.twice`): the last try's kill, and its
    trouble (None: it landed, or is missed by design) when the second try has it too."""
    kills: list[Kill] = []

    def attempt() -> Kill:
        kills.append(backend.crash(point))
        landed(backend, point, kills[-1])
        return kills[-1]

    why = twice(attempt)[1]
    return kills[-1], why


def unjudged(backend: Backend, point: Any, kill: Kill, why: str) -> Judged:
    """A point whose crash run failed twice: its verdict, under every crash model, is the
    finding `kill_point_judged` with why (`KillDidNotLand`'s words), on no crash state."""
    violation = finding(why)
    found = Found(NO_STATE, tuple(CRASH_MODELS), "not judged",
                  {})  # no files: no state was left to judge
    return Judged(point, found, {m: 0 for m in CRASH_MODELS}, [violation],
                  ResumeResult([violation], None, None), None, None, kill, unjudged=True)


def line(j: Judged) -> str:
    """A state's progress line."""
    return (f"{j.point.id} [{j.found.label}]: "
            + (", ".join(v.invariant for v in j.violations) or "ok")
            + (f" (the resumed run of {j.shared}, an equal state)" if j.shared else ""))


def sweep(backend: Backend, points: Iterable[Any], golden: Golden, *, share: bool = True,
          progress: Callable[[str], None] | None = None,
          swept: Swept | None = None) -> Swept:
    """Crash the agent at each of `points`, check the kill, judge every state it left
    (`share=False`: every state resumed, none shared)."""
    swept = swept if swept is not None else Swept()
    memo = Shared(golden, share=share)
    for point in points:
        kill, why = _crash(backend, point)
        if why is not None:  # twice: the point's finding, and the sweep goes on
            j = unjudged(backend, point, kill, why)
            swept.judged.append(j)
            if progress is not None:
                progress(line(j))
            continue
        if not landed(backend, point, kill):
            swept.missed.append(point)
            if progress is not None:
                progress(f"{point.id}: {kill.missed}")
            continue
        swept.landed.append(point)
        orders: dict[str, int] = {}
        for found in backend.states(point, kill):
            places = {m: orders.get(m, 0) for m in found.models}
            orders.update({m: n + 1 for m, n in places.items()})
            j = judge_state(backend, memo, point, kill, found, places)
            swept.judged.append(j)
            if progress is not None:
                progress(line(j))
    return swept


def verdicts(runs: dict[str, ModelRun], judged: Iterable[Judged], golden: Golden,
             engine_point: Callable[[Any], KillPoint]) -> None:
    """Each judged state's verdict in the run of every crash model it is a state of, and
    counted as the in-process sweep counts (`sweep.Sweep.record`): resumed for it
    (`judged`) or sharing an equal state's resumed run (`reused`), escalated."""
    for j in judged:
        for model, order in j.orders.items():
            run = runs.get(model)
            if run is None:
                continue
            r = j.result
            run.verdicts.append(Verdict(
                engine_point(j.point), model, j.found.state.persisted, j.violations,
                j.found.state, r.summary if j.violations else None, golden, order=order,
                resumed_at=r.first_position, escalated=r.escalated))
            run.judged += j.shared is None and not j.unjudged
            run.reused += j.shared is not None
            run.escalated += r.escalated


def taken(swept: Swept) -> list[Judged]:
    """The states judged since the last call: each made into verdicts once, whether the
    sweep ends or is cut short (`so_far`)."""
    new = swept.judged[swept.taken:]
    swept.taken = len(swept.judged)
    return new


def so_far(runs: dict[str, ModelRun], swept: Swept, golden: Golden,
           engine_point: Callable[[Any], KillPoint]) -> list[ModelRun]:
    """A sweep cut short by Ctrl-C or SIGTERM (`faultsim.reports.interrupted.leaves` calls this as
    the interrupt passes): `runs` with the verdicts of every state judged so far, the
    runs an interrupted report is made of."""
    verdicts(runs, taken(swept), golden, engine_point)
    return list(runs.values())


def explored(judged: Iterable[Judged], model: str) -> list[Any]:
    """The points a crash model's run explored: those that left it a state, in order."""
    return list({j.point.id: j.point for j in judged if model in j.orders}.values())
