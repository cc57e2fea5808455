"""Hypothesis strategies for crash schedules, to compose in your own `@given` tests.

    from hypothesis import given, settings
    from faultsim import Session, strategies as fst

    def test_my_agent_survives_two_crashes():
        with Session(make_agent, "scenarios/refund.toml") as session:
            @settings(max_examples=200, deadline=None)
            @given(fst.schedules(session, max_crashes=2))
            def check(schedule):
                session.run(schedule).assert_ok()
            check()

Shrinking goes to fewer crashes first, then to earlier kill points.
"""
from __future__ import annotations

from typing import Any, Iterable, Sequence

from hypothesis import strategies as st

from .killpoints import CATEGORIES, KillPoint
from .killpoints import kill_points as _kill_points
from .schedule import RESOLUTION, Crash, Schedule, pending_windows, recovery_points


def _points(source: Any) -> list[KillPoint]:
    """Kill points from a `Session`, a trace (list of events) or a list of kill points."""
    if hasattr(source, "kill_points"):
        return list(source.kill_points)
    items = list(source)
    if items and isinstance(items[0], KillPoint):
        return items
    return _kill_points(items)


def kill_points(source: Any, categories: Iterable[str] | None = None
                ) -> st.SearchStrategy[KillPoint]:
    """A kill point of the recorded trace, optionally only of some categories
    (`faultsim.CATEGORIES`); shrinks towards the earliest."""
    points = _points(source)
    if categories is not None:
        wanted = set(categories)
        unknown = wanted - set(CATEGORIES)
        if unknown:
            raise ValueError(f"unknown kill-point categories {sorted(unknown)}; known: "
                             f"{', '.join(CATEGORIES)}")
        points = [p for p in points if p.category in wanted]
    if not points:
        raise ValueError("no kill points to choose from")
    return st.sampled_from(points)


def spread(items: Sequence) -> st.SearchStrategy:
    """One of `items`, about uniformly. (`sampled_from` favours the first few elements,
    which here are the least interesting kill points of a window.) Shrinks to the first."""
    items = list(items)
    return st.integers(0, (1 << 16) - 1).map(lambda v: items[v % len(items)])


def focused(points: Sequence[KillPoint], focus: Sequence[Sequence[KillPoint]],
            odds: int = 9) -> st.SearchStrategy[KillPoint]:
    """A kill point, `odds` times in `odds + 1` from one of the `focus` windows (a window
    first, then a point in it), otherwise any; shrinks to the focus and to earlier points."""
    windows = [list(w) for w in focus if w]
    anywhere = spread(points)
    if not windows:
        return anywhere
    inside = spread(windows).flatmap(spread)
    return st.integers(0, odds).flatmap(lambda n: inside if n < odds else anywhere)


def pending_points(source: Any) -> st.SearchStrategy[KillPoint]:
    """A kill point of the first incarnation, mostly where a tool call is pending on disk
    (a turn first, then a point in it): a crash there makes the next run reconcile."""
    points = _points(source)
    return focused(points, pending_windows(points))


def recovery_points_of(points: Sequence[KillPoint], trace: Sequence
                       ) -> st.SearchStrategy[KillPoint]:
    """A kill point of a resumed incarnation, mostly within its recovery (before it first
    asks the model): its reading of the files, its reconciliation, the save after it."""
    return focused(points, [recovery_points(points, trace)])


def later_crashes() -> st.SearchStrategy[Crash]:
    """A crash of a resumed incarnation: a place along its kill points, half the time
    within its recovery (before it first asks the model), and a crash-state choice."""
    return st.builds(Crash, at=st.integers(0, RESOLUTION - 1), state=st.integers(0, 7),
                     recovery=st.booleans().map(lambda b: not b))


def first_crashes(source: Any) -> st.SearchStrategy[Crash]:
    """A crash of the first incarnation (`pending_points`) and a crash-state choice."""
    return st.builds(Crash, at=pending_points(source), state=st.integers(0, 7))


@st.composite
def schedules(draw, source: Any, max_crashes: int = 2, min_crashes: int = 1) -> Schedule:
    """A crash schedule over the recorded trace of `source` (a `Session`, a trace, or its
    kill points): `min_crashes`..`max_crashes` crashes, one per incarnation."""
    if not 1 <= min_crashes <= max_crashes:
        raise ValueError(f"need 1 <= min_crashes <= max_crashes, got {min_crashes}, "
                         f"{max_crashes}")
    first = draw(first_crashes(source))
    rest: Sequence[Crash] = draw(st.lists(later_crashes(), min_size=min_crashes - 1,
                                          max_size=max_crashes - 1))
    return Schedule((first, *rest))
