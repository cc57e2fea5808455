"""The pair stage's first crashes from one driver run (faultsim/inprocess/crash_feed.py)
are the ones `Explorer.crash` makes by running each prefix again: compared crash by crash,
under both crash models, at boundary and torn points, repeated and out of the run's order;
a crash the feed cannot give is made the long way; and a pair sweep on the feed crashes
nothing the long way."""
from __future__ import annotations

import copy
import json
import sys
from contextlib import nullcontext

import pytest

import reference_agent
from faultsim import explore, load_scenario
from faultsim.inprocess import crash_feed, pairs
from faultsim.inprocess import explore as explore_module
from faultsim.inprocess.crash_feed import CrashFeed
from faultsim.inprocess.fingerprints import world_key
from faultsim.inprocess.sandbox import Explorer
from faultsim.pipeline.incarnation import world_signature

from conftest import DATA, ROOT

sys.path.insert(0, str(ROOT / "bench"))
from same_json import strip  # noqa: E402  (the bench's own rule for what is a timing)
from test_worker_count import POINTS  # noqa: E402

pytestmark = pytest.mark.skipif(not hasattr(__import__("os"), "fork"), reason="needs fork")


def _seen(ex, crash, point):
    """What the pair stage reads of a first crash (crash_feed.py's list). A crash run that
    touches no file before its kill (a point before the first event, or before the first
    file) leaves the file last touched as the process had it: the same before each."""
    ex.interposer.last_touched = "before/the-crash"
    crashed = crash(point)
    world = copy.deepcopy(crashed.world)
    return ([s.digest() for s in crashed.states], world_signature(world), world_key(world),
            world.clock.now(), crashed.after_kill, ex.interposer.last_touched)


@pytest.mark.parametrize("model", ["process", "power"])
def test_each_crash_is_the_one_a_run_of_its_prefix_gives(model):
    scenario = load_scenario(DATA / "tiny.toml")
    with Explorer(reference_agent.make_agent, scenario) as ex:
        points = ex.golden().kill_points()
        torn = [p for p in points if p.torn][:3]
        boundary = [p for p in points if not p.torn and p.index > 0]
        # a spread of points, one asked twice, one asked before an earlier one, the start
        asked = [points[0], *boundary[::40], *torn, boundary[7], boundary[3], boundary[7]]
        long_way = [_seen(ex, lambda q: ex.crash(q, model), p) for p in asked]
        calls = []
        crash = ex.crash
        ex.crash = lambda *a, **k: calls.append(a[0].id) or crash(*a, **k)
        try:
            with CrashFeed(ex, model, asked) as feed:
                fed = [_seen(ex, feed.crash, p) for p in asked]
        finally:
            del ex.crash
    assert len(long_way) == len(asked) > 10
    for point, a, b in zip(asked, long_way, fed):
        assert a == b, point.id
    # only the point before the first event, as documented
    assert calls == [p.id for p in asked if p.index == 0] and points[0].index == 0


def test_a_crash_the_feed_cannot_give_is_made_the_long_way(monkeypatch):
    scenario = load_scenario(DATA / "tiny.toml")
    with Explorer(reference_agent.make_agent, scenario) as ex:
        points = [p for p in ex.golden().kill_points() if p.index > 0 and not p.torn]
        asked = points[5:40:7]
        long_way = [_seen(ex, lambda q: ex.crash(q, "process"), p) for p in asked]
        broken = asked[2]
        real = crash_feed._ForkAt._fork

        def dies(self, point):  # the child of one point dies before it sends anything
            child = real(self, point)
            if child and point.id == broken.id:
                crash_feed._os._exit(3)
            return child

        monkeypatch.setattr(crash_feed._ForkAt, "_fork", dies)
        calls = []
        crash = ex.crash
        ex.crash = lambda *a, **k: calls.append(a[0].id) or crash(*a, **k)
        try:
            with CrashFeed(ex, "process", asked) as feed:
                fed = [_seen(ex, feed.crash, p) for p in asked]
        finally:
            del ex.crash
    assert calls == [broken.id]  # that one, and only that one, the long way
    assert fed == long_way


def test_a_pair_sweep_on_the_feed_runs_no_prefix_and_reports_as_the_long_way(monkeypatch):
    """The same sweep, forked alike, with its first crashes from the feed and from a run of
    each prefix (`Explorer.crash`, as `--workers 0` makes them; tests/test_worker_count.py
    compares the whole report with `--workers 0` too)."""
    scenario = load_scenario(DATA / "pair.toml")
    # first incarnations the pair stage runs into a point: the points' indexes
    prefixes: list[int] = []
    crash, stage, in_stage = Explorer.crash, explore_module.sweep_pairs, []

    def counted(self, point, model, start=None):
        if start is None and in_stage:
            prefixes.append(point.index)
        return crash(self, point, model, start)

    def pair_stage(*args, **kwargs):
        in_stage.append(True)
        try:
            return stage(*args, **kwargs)
        finally:
            in_stage.clear()

    fed: list[int] = []
    feed = pairs._feed

    def counting_feed(ex, model, points, workers):
        fed.append(len(points))
        return feed(ex, model, points, workers) if use_feed else nullcontext(None)

    monkeypatch.setattr(Explorer, "crash", counted)
    monkeypatch.setattr(pairs, "_feed", counting_feed)
    monkeypatch.setattr(explore_module, "sweep_pairs", pair_stage)
    reports, runs = {}, {}
    for use_feed in (False, True):
        prefixes.clear()
        fed.clear()
        # the first crashes tests/test_worker_count.py narrows to (boundary and torn)
        report = explore(reference_agent.make_agent, scenario, crashes=2, workers=2,
                         only=lambda p: p.id in POINTS)
        reports[use_feed] = json.dumps(strip(report.to_json(), sharing=False), sort_keys=True)
        runs[use_feed] = (list(prefixes), list(fed), report.runs[0])
    long_prefixes, (firsts,), run = runs[False]
    fed_prefixes, _, _ = runs[True]
    assert run.depth(2).explored > 100  # the pair stage ran
    # the long way: a prefix per first crash of the pair stage; the feed: one driver run,
    # and no prefix (a point before the first event would be crashed here: none is chosen)
    assert len(long_prefixes) == firsts >= 2 and all(i > 0 for i in long_prefixes)
    assert fed_prefixes == []
    assert reports[False] == reports[True]
