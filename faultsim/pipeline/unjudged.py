"""A kill point faultsim could not judge (issue 51 item 13): its crash run did not reach the
point or its kill could not be proven landed, or the process judging it died without a
verdict. Such a point is tried once more (`twice`), and a point whose second try fails too
is that point's finding, `kill_point_judged` (`finding`), on no crash state (`NO_STATE`):
counted as a failure, replayable, and the sweep goes on. One copy for every backend and
executor, so that the finding reads the same on any worker count.

Mode-neutral: may import the oracle, the report and the bottom layer."""
from __future__ import annotations

from typing import Any, Callable, TypeVar

from ..core.crashmodel import CrashState
from ..errors import KillDidNotLand, WorkerDied
from ..judge.oracle import Violation
from ..reports.report import Verdict

T = TypeVar("T")

# the state an unjudged point's verdicts stand on: no state was left to judge
NO_STATE = CrashState.of("process", "none: the kill point could not be judged", {})
AGAIN = "(on a second try too)"


def twice(attempt: Callable[[], T], failed: str | None = None) -> tuple[T | None, str | None]:
    """`attempt()` (a crash run, a resumed run), tried once more when it raises
    `KillDidNotLand` or `WorkerDied`: (its result, None), or (None, the second try's
    trouble in words). `failed`: the first try was made already (in a batch) and failed so;
    one more is made. Deterministic as far as the agent is: a point that fails once by
    chance (a machine under load) is judged on its second try, one that fails each time is
    reported, on any worker count."""
    why = failed
    for _ in range(1 if failed is not None else 2):
        try:
            return attempt(), None
        except (KillDidNotLand, WorkerDied) as exc:
            why = str(exc)
    return None, why


def finding(why: str) -> Violation:
    """The finding of a point whose second try failed too, saying why."""
    return Violation.of("kill_point_judged", f"{why} {AGAIN}")


def record(sweep: Any, model: str, point: Any, why: str) -> None:
    """An unjudged point's verdict in an in-process or subprocess sweep
    (`pipeline.sweep.Sweep`): the finding, on no state, counted neither resumed nor
    reused (nothing was resumed for it). A further crash is never tried after it."""
    if (model, point.id, 0) in sweep.recorded:
        return
    sweep.recorded.add((model, point.id, 0))
    run = sweep.runs[model]
    verdict = Verdict(point, model, NO_STATE.persisted, [finding(why)], NO_STATE, None,
                      sweep.golden, 0, earlier=sweep.earlier)
    if sweep.earlier:
        run.depth(len(sweep.earlier) + 1).explored += 1
        run.deep_failures.append(verdict)
    else:
        run.verdicts.append(verdict)
