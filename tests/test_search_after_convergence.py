"""Longer schedules after convergence (faultsim.inprocess.search_after_convergence): a
session's last crash after an earlier crash's resumed run met the clean run is composed
from a known resumed run instead of resumed. Every verdict, and what the search finds and
shrinks to, must be what resuming every last crash gives (`after_convergence=False`), on
generated agents (tests/convergence_agents) and on mutants that fail only with two
crashes; and the shortcut must be taken (counted), or the comparison proves nothing."""
from __future__ import annotations

import importlib

import pytest

from faultsim import Crash, Session, load_scenario, search
from faultsim.inprocess import after_convergence, cpython

import convergence_agents as agents
from conftest import DATA

# Composing needs a resumed run cut where it met the clean run (convergence), made only on
# an interpreter whose frames faultsim reads (cpython.KNOWN); elsewhere nothing is composed
# and every pair is resumed (tests/test_convergence.py checks that no run is cut there).
pytestmark = pytest.mark.skipif(cpython.shapes() is None,
                                reason=f"nothing composed here: {cpython.unknown()}")


def lookups(tmp_path, steps: int, effect: bool = False):
    path = tmp_path / f"lookups_{steps}.toml"
    path.write_text(agents.scenario_text(steps, effect))
    return load_scenario(path)


def seen(result) -> tuple:
    """All a schedule's verdict shows: where, what broke, the counterexample's text."""
    return ([p.id for p in result.schedule], [(v.invariant, v.rule, v.explanation)
                                               for v in result.violations],
            None if result.ok else result.counterexample())


def every_pair(make_agent, scen, on: bool, firsts: int | None = None) -> tuple[list, int]:
    """Every single crash, then every pair (`firsts`: the first crashes at that many kill
    points, evenly spread), through `Session.run`: the verdicts in order, and how many were
    composed."""
    out = []
    with Session(make_agent, scen, after_convergence=on) as session:
        points = session.kill_points
        out += [seen(session.run([Crash(p)])) for p in points]
        step = 1 if firsts is None else max(1, len(points) // firsts)
        for p in points[1::step]:
            course = session.run([Crash(p), Crash(0)]).verdict.earlier[0].next_trace
            out += [seen(session.run([Crash(p), Crash(q)]))
                    for q in session.golden.kill_points(course)]
        return out, session.composed


SHAPES = [dict(), dict(effect=True, late=True), dict(marker=True),
          dict(hidden="memory"), dict(save="direct")]


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: ",".join(map(str, s.values())) or
                         "plain")
def test_every_pair_through_a_session_is_the_long_way(tmp_path, shape):
    """Generated agents: `effect` with `late` makes the history matter (a composed world
    must carry the first crash's stretch and the known run's tail), `marker` breaks a rule
    only under two crashes next to the meeting, `memory` keeps state on no disk."""
    scen = lookups(tmp_path, 2, shape.get("effect", False))
    make_agent = agents.factory(**shape)
    on, composed = every_pair(make_agent, scen, True, firsts=8)
    off, none = every_pair(make_agent, scen, False, firsts=8)
    assert none == 0
    assert on == off
    assert composed > 0, "the shortcut was never taken: the comparison proves nothing"
    if shape.get("marker"):
        assert any(v[2] for v in on)  # its pairs find it


# One of the two double-crash mutants: each costs some two CPU-minutes here, the other's
# search is tests/test_multicrash.py's, and the generated agents above cover the shapes.
@pytest.mark.parametrize("name", ["repeat_before_save"])
def test_double_crash_mutants_every_pair_and_the_search(name):
    """Reference-agent mutants that fail only with two crashes: their pairs through a
    session, then the built-in search on the session that judged them (its last crashes
    after a meeting find their shorter schedules known), with and without the shortcut:
    the same verdicts, the same failing schedule, violations, shrunk counterexample."""
    module = importlib.import_module(f"reference_agent.mutants.{name}")
    scen = load_scenario(DATA / "pair.toml")
    results = {}
    for on in (True, False):
        with Session(module.make_agent, scen, agent_name=module.__name__,
                     after_convergence=on) as session:
            points = session.kill_points
            verdicts = [seen(session.run([Crash(p)])) for p in points]
            for p in points[1::24]:  # first crashes spread over the run
                course = session.run([Crash(p), Crash(0)]).verdict.earlier[0].next_trace
                verdicts += [seen(session.run([Crash(p), Crash(q)]))
                             for q in session.golden.kill_points(course)]
            paired = session.composed
            searched = record(session)
            found = search(session, max_crashes=3, examples=300, seed=7)
            results[on] = (verdicts, paired, found, searched)
    (v_on, paired, s_on, r_on), (v_off, none, s_off, r_off) = results[True], results[False]
    assert r_on == r_off  # every schedule of the search, shrinking included
    assert none == 0 and s_off.after_convergence == 0
    assert paired > 0, "the shortcut was never taken among the pairs"
    assert any(v[2] for v in v_on) and not any(v[2] for v in v_on[:len(points)])
    assert v_on == v_off
    assert not s_on.ok and len(s_on.failure.schedule) >= 2
    assert (s_on.tried, s_on.examples) == (s_off.tried, s_off.examples)
    assert seen(s_on.failure) == seen(s_off.failure)
    assert s_on.failure.token == s_off.failure.token


def test_the_search_counts_what_it_composed(tmp_path):
    """A search of up to three crashes on a generated agent, its single crashes known
    first (as a user's session may have judged them): every schedule it runs, shrinking
    included, has the long way's verdict, and some were composed (counted)."""
    scen = lookups(tmp_path, 2)
    found, runs = {}, {}
    for on in (True, False):
        with Session(agents.factory(), scen, after_convergence=on) as session:
            for p in session.kill_points:
                session.run([Crash(p)])
            before = session.composed
            runs[on] = record(session)
            result = search(session, max_crashes=3, examples=150, seed=3)
            assert result.after_convergence == session.composed - before
            found[on] = result
    assert found[True].after_convergence > 0, "the search never took the shortcut"
    assert found[False].after_convergence == 0
    assert runs[True] == runs[False] and len(runs[True]) == found[True].tried


def record(session) -> list:
    """What every schedule the session runs from now on shows (`seen`), in order."""
    out, run = [], session._run

    def recorded(*args, **kwargs):
        result = run(*args, **kwargs)
        out.append(seen(result))
        return result

    session._run = recorded
    return out
