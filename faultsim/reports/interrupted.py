"""What a run cut short by Ctrl-C, SIGTERM or a CI timeout leaves: the verdicts judged so
far, and a `Partial` that marks the report built from them as partial and says how much
of the plan was judged.

The verdicts travel up with the interrupt itself, the one mechanism of every backend. The
backends keep them in ModelRuns that live in the frame of the sweep (in-process:
`inprocess.explore.explore_in_process`; subprocess mode: `real.explore`; the command and Claude Agent
SDK backends: the states judged by `pipeline.crashes.sweep`, made into ModelRuns by
`pipeline.crashes.so_far` and the adapter's `model_runs`), and an interrupt unwinds that
frame before any front end could ask for them. `leaves(runs)` around a sweep puts its runs on the KeyboardInterrupt (or the CLI's
Terminated) as it passes, once, by the innermost sweep; `judged(exc)` takes them off in the
front end, which also knows the plan (`faultsim run`: cli/run.py; the pytest plugin keeps
its finished tests' runs). Only BaseExceptions that are not Exceptions are marked: an
error is not an interrupt, and its runs are not a report.

May import: the standard library (the ModelRuns are handled by their attributes)."""
from __future__ import annotations

import signal
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

_JUDGED = "faultsim_judged"  # the attribute an interrupt carries its runs in


@contextmanager
def leaves(runs: Callable[[], list]) -> Iterator[None]:
    """Around a sweep: an interrupt passing through carries `runs()` (the ModelRuns with
    the verdicts judged so far) to the front end."""
    try:
        yield
    except BaseException as exc:
        if not isinstance(exc, (Exception, GeneratorExit)) and _JUDGED not in vars(exc):
            try:
                setattr(exc, _JUDGED, list(runs()))
            except Exception:  # noqa: BLE001 - the interrupt matters more than its cargo
                pass
        raise


def judged(exc: BaseException) -> list:
    """The ModelRuns an interrupt carries (none: it was raised outside any sweep)."""
    return list(vars(exc).get(_JUDGED, ()))


class SigtermInterrupt(KeyboardInterrupt):
    """SIGTERM in a pytest session with faultsim tests (faultsim.pytest.summary): raised as
    Ctrl-C is, since pytest ends a session on a KeyboardInterrupt as interrupted, with its
    sessionfinish hooks run and its reports written (--junitxml, --faultsim-html), where a
    SystemExit (the CLI's Terminated) would only fail the test it lands in."""


def is_interrupt(exc: BaseException | None) -> bool:
    """Ctrl-C (KeyboardInterrupt, the pytest plugin's SigtermInterrupt) or the CLI's
    SIGTERM (cli.exits.Terminated, a front end's class: known here by its name, as in
    `reason`). An agent's own SystemExit is not one."""
    return isinstance(exc, KeyboardInterrupt) or type(exc).__name__ == "Terminated"


def unwinding_interrupt() -> bool:
    """Whether an interrupt is being handled in this thread, here or in any caller: code
    run by a `finally` or a `with` block's exit while Ctrl-C or SIGTERM unwinds the stack
    (sys.exc_info() sees the exception such a block handles, and its context chain the
    ones it was raised while handling)."""
    import sys

    exc, seen = sys.exc_info()[1], set()
    while exc is not None and id(exc) not in seen:
        if is_interrupt(exc):
            return True
        seen.add(id(exc))
        exc = exc.__context__
    return False


def reason(exc: BaseException) -> str:
    """How the run was cut short, as the report says it: `interrupted (SIGINT)` for Ctrl-C
    (and a CI service's cancel, which sends SIGINT), `terminated (SIGTERM)` for a kill or a
    timeout (`timeout`, a CI job's limit)."""
    if isinstance(exc, SigtermInterrupt):
        return f"terminated ({signal.Signals.SIGTERM.name})"
    if isinstance(exc, KeyboardInterrupt):
        return "interrupted (SIGINT)"
    if type(exc).__name__ == "Terminated":  # cli.exits.Terminated (a front end's class)
        return f"terminated ({signal.Signals.SIGTERM.name})"
    return f"interrupted ({type(exc).__name__})"


def settle(run: Any) -> Any:
    """A run cut short, made to say only what was judged: its verdicts in kill-point order
    (workers finish out of order), and `explored` narrowed to the kill points that have a
    verdict, so the table's kill points and passed, and the map (the rest `unexplored`),
    count judged work only. The planned figures are the Partial's."""
    position = {p.id: n for n, p in enumerate(run.kill_points)}
    run.verdicts.sort(key=lambda v: (position.get(v.kill_point.id, -1), v.order))
    seen = {v.kill_point.id for v in run.verdicts}
    run.explored = [p for p in run.explored if p.id in seen]
    return run


@dataclass
class Partial:
    """Marks a report as partial. `crash_states_judged` counts the first crash states with a
    verdict in the report's runs (`crash_states` summed); `crash_states_planned` the first
    crash states of every scenario begun: a finished one's judged ones, the interrupted
    one's from its plan (None when it was interrupted before its plan, in its clean runs).
    Schedules of two or more crashes are in neither count (their number is known only as
    the sweep goes)."""

    reason: str
    crash_states_judged: int = 0
    crash_states_planned: int | None = None
    finished: list[str] = field(default_factory=list)  # the scenario runs that ended
    interrupted: str | None = None  # the one cut short
    not_started: list[str] = field(default_factory=list)
    # `run --ray` cut short: its shards ("I/N") whose reports are whole, cut short (partial)
    # and lost (no report came back); their runs stand side by side, unmerged
    shards: dict[str, list[str]] | None = None

    def headline(self) -> str:
        """The one line every form of the report opens with."""
        return headline(self.to_json())

    def to_json(self) -> dict[str, Any]:
        out = {"reason": self.reason, "crash_states_judged": self.crash_states_judged,
               "crash_states_planned": self.crash_states_planned,
               "finished": list(self.finished), "interrupted": self.interrupted,
               "not_started": list(self.not_started)}
        if self.shards is not None:
            out["shards"] = {k: list(v) for k, v in self.shards.items()}
        return out


def headline(partial: dict[str, Any]) -> str:
    """A Partial's line, from its JSON (the HTML page and merged reports have only that)."""
    planned, judged = partial.get("crash_states_planned"), partial.get("crash_states_judged")
    of = "" if planned is None else f" of {planned}"
    where = f" in {partial['interrupted']}" if partial.get("interrupted") else ""
    waiting = len(partial.get("not_started") or ())
    rest = (f"; {waiting} scenario run{'s' if waiting != 1 else ''} not started"
            if waiting else "")
    shards = partial.get("shards") or {}
    for key, said in (("cut", "cut short"), ("lost", "lost")):
        if shards.get(key):
            rest += f"; shard{'s' if len(shards[key]) > 1 else ''} {', '.join(shards[key])} {said}"
    return (f"PARTIAL REPORT: {partial.get('reason', 'interrupted')}{where} after judging "
            f"{judged}{of} crash states{rest}")


def partial_reason(report: Any) -> str | None:
    """A JSON report's reason for being partial (None: a whole run's report). What reads
    reports as whole runs (--baseline, `report merge`) refuses a partial one: the crash
    states it never judged would pass for missing ones."""
    partial = report.get("partial") if isinstance(report, dict) else None
    if not partial:
        return None
    return str(partial.get("reason") or "interrupted") if isinstance(partial, dict) \
        else "interrupted"
