"""Convergence (faultsim.inprocess.convergence): a resumed run stopped where it reaches the
clean run's state, its verdict completed from the clean run's remainder, must give the
report a run to the end gives. A property over generated agents (tests/convergence_agents),
among them agents that keep state on no disk, which a cut must not mask. And pairs after
convergence (faultsim.inprocess.after_convergence): second crashes after the first crash's
resumed run met the clean run, composed from the single-crash sweep instead of resumed,
must give the report resuming them gives."""
from __future__ import annotations

import threading

import pytest
from hypothesis import HealthCheck, example, given, settings, strategies as st

import faultsim
from faultsim.inprocess import cpython, fingerprints
from faultsim.scenario import load_scenario

import convergence_agents as agents
from conftest import DATA

SHAPES = dict(save=st.sampled_from(["atomic", "direct", "tempfile"]), late=st.booleans(),
              hidden=st.sampled_from([None, "memory", "global", "class", "incarnation",
                                      "tokens", "leftover"]), journal=st.booleans())


# Cuts, meetings and composed pairs are made only on an interpreter whose frames and
# bytecode faultsim reads (cpython.KNOWN); on another the tests that count them or read
# frames do not apply (their comparisons with the long way are the long way twice), and
# test_a_plain_agent_converges_where_frames_are_read checks it cuts none and says why.
shortcut = pytest.mark.skipif(cpython.shapes() is None,
                              reason=f"no cut here: {cpython.unknown()}")


def scenario(tmp_path, steps: int):
    path = tmp_path / f"lookups_{steps}.toml"
    path.write_text(agents.scenario_text(steps))
    return load_scenario(path)


def comparable(report) -> list:
    """The report's JSON without timings and the convergence counts (how, not what): of
    longer schedules, how many were resumed (the rest shared or composed) is how too."""
    out = []
    for run in report.runs:
        data = run.to_json()
        # timeout_seconds: a resumed run's limit, derived from the clean runs' time (a
        # loaded machine stretches it; bench/same_json.py strips it as a timing too)
        for key in ("seconds", "wall_seconds", "crash_states_converged", "convergence",
                    "timeout_seconds", "shortcuts"):
            data.pop(key)
        for depth in data["schedules"].values():
            for key in ("seconds", "converged", "resumed", "after_convergence", "composed"):
                depth.pop(key)
        out.append(data)
    return out


def both(make_agent, scen, **options):
    on = faultsim.explore(make_agent, scen, convergence=True, **options)
    off = faultsim.explore(make_agent, scen, convergence=False, **options)
    assert all(r.converged == 0 and all(d.after_convergence == d.composed == 0
                                        for d in r.depths.values()) for r in off.runs)
    return on, off


@settings(max_examples=6, deadline=None, suppress_health_check=list(HealthCheck))
@given(steps=st.integers(2, 3), shape=st.fixed_dictionaries(SHAPES),
       workers=st.sampled_from([0, 2]))
@example(steps=2, shape={"save": "atomic", "late": False, "hidden": "memory",
                        "journal": False}, workers=2)
@example(steps=2, shape={"save": "atomic", "late": True, "hidden": "incarnation",
                        "journal": False}, workers=2)
@example(steps=3, shape={"save": "atomic", "late": False, "hidden": "leftover",
                        "journal": True}, workers=0)
@example(steps=3, shape={"save": "tempfile", "late": False, "hidden": None,
                        "journal": True}, workers=0)
def test_verdicts_are_the_same_with_and_without_convergence(tmp_path_factory, steps, shape,
                                                             workers):
    scen = scenario(tmp_path_factory.mktemp("conv"), steps)
    if shape["hidden"] == "leftover":
        # one after another: with two workers how many of its states are resumed varies
        # from run to run, convergence or not (a corner of issue 19, seen on the code
        # before leads.py too), which is not what this compares
        workers = 0
    on, off = both(agents.factory(**shape), scen, crash_model="process", crashes=1,
                   workers=workers)
    assert comparable(on) == comparable(off)
    if shape["hidden"] in ("memory", "global", "class", "incarnation", "tokens") or (
            shape["hidden"] == "leftover" and shape["save"] == "atomic"):
        # the state it keeps off disk shows in every resumed run that skipped a step (a
        # leftover: in every run that found a stale temp file)
        assert not on.ok


def test_a_plain_agent_converges_where_frames_are_read(tmp_path):
    """Cut where cpython.py knows the interpreter; elsewhere no run is cut, and the report
    says why (the long way: the same report)."""
    scen = scenario(tmp_path, 3)
    on, off = both(agents.factory(), scen, crash_model="process", crashes=1, workers=2)
    (run,) = on.runs
    if cpython.shapes() is None:
        assert run.converged == run.met == 0 and run.convergence == cpython.unknown()
    else:
        assert run.converged > 0 and run.convergence is None
    assert on.ok and comparable(on) == comparable(off)


@shortcut
def test_hidden_state_refuses_the_cut(tmp_path):
    # A counter kept in the instance and written to the outputs at the end: a resumed run
    # that meets the clean run's files, world and request still differs in memory (only
    # one that started over from nothing is where the clean run was, and may be cut).
    scen = scenario(tmp_path, 3)
    plain = faultsim.explore(agents.factory(), scen, crash_model="process", crashes=1,
                             workers=2).runs[0].converged
    assert plain > 0
    on, off = both(agents.factory(hidden="memory"), scen, crash_model="process", crashes=1,
                   workers=2)
    assert on.runs[0].converged < plain and not on.ok
    assert comparable(on) == comparable(off)


@shortcut
def test_resumed_runs_meet_each_other(tmp_path):
    """Convergence with an earlier resumed run (faultsim.inprocess.leads). The `journal`
    agent notes a pending call it settles on resume, so those runs never meet the clean
    run; runs resumed from states that differ only in whether the lookup was made meet
    each other at their first request, and are cut (counted in `met`). One after another
    (workers=0) the count is fixed; the report is the long way's either way."""
    scen = scenario(tmp_path, 3)
    on, off = both(agents.factory(journal=True), scen, crash_model="process", crashes=1,
                   workers=0)
    (run,) = on.runs
    assert on.ok and run.met > 0 and off.runs[0].met == 0
    assert comparable(on) == comparable(off)
    # with the tempfile save too: both runs draw their temp names from one seed, and are
    # at one place in it when they meet
    on, off = both(agents.factory(save="tempfile", journal=True), scen,
                   crash_model="process", crashes=1, workers=0)
    assert on.runs[0].met > 0 and on.runs[0].converged == 0
    assert comparable(on) == comparable(off)


@shortcut
def test_a_leftover_in_memory_refuses_the_meeting(tmp_path, monkeypatch):
    """The `leftover` agent remembers whether its resume found a stale temp file (and
    deletes it): two runs equal on disk at their first request differ in memory. The cut
    is refused there and the report is the long way's; were memory not compared
    (`same_memory` always true), the cut run would take the other's ending and the report
    would differ: the comparison is what keeps it right."""
    from faultsim.inprocess import leads

    scen = scenario(tmp_path, 3)
    make = agents.factory(journal=True, hidden="leftover")
    on, off = both(make, scen, crash_model="process", crashes=1, workers=0)
    assert not on.ok and comparable(on) == comparable(off)
    monkeypatch.setattr(leads, "same_memory", lambda own, lead: True)
    blind = faultsim.explore(make, scen, crash_model="process", crashes=1, workers=0)
    assert blind.runs[0].met > on.runs[0].met  # the refused meetings, now cut
    assert comparable(blind) != comparable(off)  # and wrongly: findings lost


@shortcut
def test_meetings_do_not_change_the_report_with_any_worker_count(tmp_path):
    """Which runs find an earlier one to meet depends on which child ended first; the
    report does not (timings and how the work was done aside)."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
    from same_json import strip

    scen = scenario(tmp_path, 3)
    reports = [faultsim.explore(agents.factory(journal=True), scen, crash_model="process",
                                crashes=1, workers=w) for w in (0, 1, 2)]
    assert reports[0].runs[0].met > 0
    assert len({repr(strip(r.to_json())) for r in reports}) == 1
    # nor how many met the clean run (a lead met it nowhere: leads.py)
    assert len({r.runs[0].converged for r in reports}) == 1


@shortcut
@pytest.mark.parametrize("steps", [3, 6])
def test_with_the_lead_board_every_meeting_happens_on_any_worker_count(tmp_path, steps):
    """Runs resumed side by side share leads while they run (faultsim.inprocess.board):
    with two workers as many runs meet an earlier one as one after another, where each
    finds every lead before it (without the board: 0 or 1 of 3 and of 6 here, by timing),
    and the report is the same."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
    from same_json import strip

    scen = scenario(tmp_path, steps)
    alone, side_by_side = (faultsim.explore(agents.factory(journal=True), scen,
                                            crash_model="process", crashes=1, workers=w)
                           for w in (0, 2))
    assert alone.runs[0].met > 0 and side_by_side.runs[0].met == alone.runs[0].met
    assert repr(strip(alone.to_json())) == repr(strip(side_by_side.to_json()))


@shortcut
def test_pairs_with_convergence(tmp_path):
    scen = scenario(tmp_path, 2)
    on, off = both(agents.factory(), scen, crash_model="process", crashes=2, workers=2)
    (run,) = on.runs
    assert run.depths[2].converged > 0  # second crashes' resumed runs are cut
    assert run.converged > 0 and run.convergence is None  # first crashes' too (their
    # course completed from the clean run's)
    # second crashes after a first crash's resumed run met the clean run: composed from the
    # single-crash sweep, not resumed
    pairs, long_way = run.depths[2], off.runs[0].depths[2]
    assert pairs.after_convergence > 0 and pairs.explored == long_way.explored
    assert pairs.resumed + pairs.after_convergence <= long_way.resumed
    assert comparable(on) == comparable(off)
    # how many were composed does not depend on the worker count (nor does `resumed`)
    one_by_one = faultsim.explore(agents.factory(), scen, crash_model="process", crashes=2,
                                  workers=0).runs[0].depths[2]
    assert (one_by_one.resumed, one_by_one.after_convergence) == (pairs.resumed,
                                                                  pairs.after_convergence)


PAIR_SHAPES = dict(save=st.sampled_from(["atomic", "direct"]), late=st.booleans(),
                   hidden=st.sampled_from([None, "memory", "incarnation", "tokens"]),
                   effect=st.booleans(), marker=st.booleans())


def pair_scenario(tmp_path, effect: bool):
    path = tmp_path / "lookups_2.toml"
    path.write_text(agents.scenario_text(2, effect))
    return load_scenario(path)


@settings(max_examples=3, deadline=None, suppress_health_check=list(HealthCheck))
@given(shape=st.fixed_dictionaries(PAIR_SHAPES), workers=st.sampled_from([0, 2]))
@example(shape={"save": "atomic", "late": True, "hidden": None, "effect": True,
                "marker": False}, workers=2)
@example(shape={"save": "direct", "late": False, "hidden": "memory", "effect": False,
                "marker": True}, workers=0)
def test_pair_verdicts_are_the_same_with_and_without_convergence(tmp_path_factory, shape,
                                                                  workers):
    """Two crashes: the report with cuts and composed pairs is the long way's. `effect`
    with `late` makes the history matter (a pair passes where the clean run's single crash
    at that point fails: the first crash repeated nothing); `marker` breaks a rule only
    under two crashes, next to where the resumed run meets the clean run."""
    scen = pair_scenario(tmp_path_factory.mktemp("pairs"), shape["effect"])
    on, off = both(agents.factory(**shape), scen, crash_model="process", crashes=2,
                   workers=workers)
    assert comparable(on) == comparable(off)
    if shape["marker"]:  # its second crashes find it (the first ones too, for some shapes)
        assert on.runs[0].deep_failures


@shortcut
def test_a_rule_broken_only_under_two_crashes_beside_composed_pairs(tmp_path):
    """The `marker` agent throws its progress away when a resume finds the marker of a
    crashed resume: only second crashes before the meeting find it. The pairs after it
    are composed (counted), the ones before resumed, and the report is the long way's."""
    scen = pair_scenario(tmp_path, False)
    on, off = both(agents.factory(marker=True), scen, crash_model="process", crashes=2,
                   workers=2)
    (run,) = on.runs
    assert not any(v.violations for v in run.verdicts)  # one crash: no finding
    assert {x.invariant for v in run.deep_failures for x in v.violations} >= {
        "no_silent_restart"}
    assert run.depths[2].after_convergence > 0
    assert comparable(on) == comparable(off)


@shortcut
def test_the_reference_agent_converges(tmp_path):
    import reference_agent

    on, off = both(reference_agent.make_agent, "tests/data/tiny.toml",
                   crash_model="process", crashes=1, workers=2)
    assert on.runs[0].converged > 0
    assert comparable(on) == comparable(off)


# -- the fingerprint ---------------------------------------------------------------------
@shortcut
def test_fingerprint_reads_live_locals_only():
    import sys

    def read_before(value):
        status = value
        size = len(status)
        return fingerprints._frame_state(sys._getframe()), size

    def read_after(value):
        status = value
        state = fingerprints._frame_state(sys._getframe())
        return state, status

    assert "status" not in read_before({"x": 1})[0]  # never read again: not state
    assert read_after({"x": 1})[0]["status"] == {"x": 1}


@shortcut
def test_fingerprint_refuses_what_it_cannot_read():
    import itertools

    with pytest.raises(fingerprints.Refused):
        fingerprints._Canon().add({"counter": itertools.count(3)})  # C state
    first, second = fingerprints._Canon(), fingerprints._Canon()
    first.add([{"a": [1, 2]}, "x"])
    second.add([{"a": [1, 2]}, "x"])
    assert first.digest() == second.digest()
    third = fingerprints._Canon()
    third.add([{"a": [1, 3]}, "x"])
    assert third.digest() != first.digest()


@shortcut
def test_the_request_being_sent_is_read_by_its_body_not_again_by_its_options():
    """The SDK's options for the request it is sending: their json_data is that request's
    body, compared as the request (`request_key`), so the SDK's frames do not read it
    again; every other field is read, and so is json_data anywhere else."""
    from anthropic._models import FinalRequestOptions

    def options(text: str, retries: int = 2):
        return FinalRequestOptions.construct(
            method="post", url="/v1/messages", max_retries=retries,
            json_data={"messages": [{"role": "user", "content": text}]})

    def digest(obj, sending: bool) -> str:
        canon = fingerprints._Canon()
        canon.sending = sending
        canon.add(obj)
        return canon.digest()

    a, b = options("refund ORD-7"), options("refund ORD-8")
    assert digest(a, True) == digest(b, True)
    assert digest(a, False) != digest(b, False)
    assert digest(a, True) != digest(options("refund ORD-7", retries=5), True)


@shortcut
def test_a_fingerprint_reads_the_conversation_in_the_agents_frames_only(monkeypatch):
    """At a model request the conversation is in the agent's frames and, as the request's
    options, in two of the SDK's frames: read in the agent's only (the test above says
    why sound). The replaying executor (no fork) keeps every fingerprint in this
    process, each frame's share of its text after that frame's mark."""
    import reference_agent

    shares: list[dict] = []
    real = fingerprints._Canon.digest

    def digest(self):
        share, frame = {}, None
        for part in self.out:
            if part.startswith(("F/", "G")):
                frame = part.split(":")[0].rsplit("/", 1)[-1] + ":" + part.split(":")[1] \
                    if part.startswith("F/") else part
            share.setdefault(frame, []).append(part)
        shares.append({k: "\x00".join(v) for k, v in share.items()})
        return real(self)

    tiny = DATA / "tiny.toml"
    task = load_scenario(tiny).task
    monkeypatch.setattr(fingerprints._Canon, "digest", digest)
    faultsim.explore(reference_agent.make_agent, tiny, crash_model="process", crashes=1,
                     workers=0, only=lambda p: p.index < 40)
    read = [s for s in shares if "agent.py:_loop" in s and "_base_client.py:_request" in s]
    assert read  # fingerprints were taken at model requests, through the SDK's frames
    for share in read:
        assert task in share["agent.py:_loop"]
        assert [k for k, v in share.items() if task in v and "_base_client" in k] == []


@shortcut
def test_threads_alive_refuse_the_cut():
    from faultsim.interpose import finality

    life = finality.begin()
    stop = threading.Event()
    thread = threading.Thread(target=stop.wait)
    thread.start()
    try:
        memory, why = fingerprints.read_memory(None)
        assert memory is None and "threads" in why
    finally:
        stop.set()
        thread.join()
        finality.end(life, False, None)


@shortcut
def test_the_diagnostic_names_what_keeps_runs_apart(tmp_path, monkeypatch):
    """FAULTSIM_CONVERGENCE_DIAG (faultsim.inprocess.diagnose): a line per model request
    of each resumed run; where a run was cut against the clean run nothing is apart, and
    the `journal` agent's runs that settled a call are apart by its journal."""
    import json

    log = tmp_path / "diag.jsonl"
    monkeypatch.setenv("FAULTSIM_CONVERGENCE_DIAG", str(log))
    scen = scenario(tmp_path, 2)
    report = faultsim.explore(agents.factory(journal=True), scen, crash_model="process",
                              crashes=1, workers=0)
    lines = [json.loads(x) for x in log.read_text().splitlines()]
    assert report.runs[0].converged > 0
    assert any(x["cut"] and x["differs"] == [] for x in lines)
    assert any(not x["cut"] and x["differs"][:1] == ["file:journal.log"] for x in lines)


@shortcut
def test_second_crashes_equal_to_earlier_ones_are_composed_with_their_own_history(
        tmp_path, monkeypatch):
    """A second crash whose state and observable world equal those of one resumed after an
    earlier first crash is composed from that run (after_convergence.py): counted, the
    same on any worker count, and the report is the long way's. Each half of the rule is
    needed: keyed on the crash state alone, or composed without what that run added (its
    ledger entries and requests), the report changes (`effect` with `late`: the history
    matters)."""
    import dataclasses

    from faultsim.inprocess import after_convergence, search_after_convergence

    scen = pair_scenario(tmp_path, True)
    make = agents.factory(save="atomic", late=True, effect=True)
    on, off = both(make, scen, crash_model="process", crashes=2, workers=2)
    serial = faultsim.explore(make, scen, crash_model="process", crashes=2, workers=0)
    depth, depth0 = on.runs[0].depths[2], serial.runs[0].depths[2]
    assert depth.composed > 0
    assert (depth.composed, depth.resumed) == (depth0.composed, depth0.resumed)
    assert comparable(on) == comparable(off) == comparable(serial)

    def broken() -> list:
        return comparable(faultsim.explore(make, scen, crash_model="process", crashes=2,
                                           workers=0))

    known = search_after_convergence.Known
    with monkeypatch.context() as m:  # the crash state alone, whatever the world
        m.setattr(known, "key", staticmethod(lambda state, world: state.digest()))
        assert broken() != comparable(off)

    def without_tail(self, key, schedule, state, world):
        run = self.runs.get(key)
        if run is None:
            return None
        bare = dataclasses.replace(run.tail, ledger=(), requests=())
        return after_convergence.compose(self.golden, schedule, state, world,
                                         dataclasses.replace(run, tail=bare))

    with monkeypatch.context() as m:
        m.setattr(known, "compose", without_tail)
        assert broken() != comparable(off)


def test_a_context_variable_is_read_by_its_value_in_the_agents_context():
    """A ContextVar among the agent's globals (the reference agent's P13 fence) is read as
    its value in the context the request runs in: equal values compare equal, another value
    or none differs (before, any ContextVar refused every cut)."""
    import contextvars

    from faultsim.inprocess.fingerprints import _Canon

    var = contextvars.ContextVar("fence")

    def digest():
        canon = _Canon()
        canon.add({"fence": var})
        return canon.digest()

    def holding(value):
        def inside():
            var.set(value)
            return digest()
        return contextvars.copy_context().run(inside)

    assert holding(1) == holding(1) != holding(2)
    assert digest() not in (holding(1), holding(None))


# -- where a frame stands ----------------------------------------------------------------
@shortcut
def test_a_call_through_c_reads_at_one_offset_cold_or_warm():
    """A frame in a call to a C function that calls back into Python (Context.run) stands
    at its CALL until 3.11 specialises the code, at its PRECALL after: `position` reads
    both as the CALL. (The raw offsets are checked to move, so the test sees the case.)"""
    import contextvars
    import sys

    seen = []

    def inside():
        caller = sys._getframe(1)
        seen.append((caller.f_lasti, cpython.position(caller.f_code, caller.f_lasti)))

    def outer():
        contextvars.copy_context().run(inside)

    for _ in range(20):  # past 3.11's warm-up (8 calls) and the call's specialisation
        outer()
    assert len({raw for raw, _ in seen}) == 2  # cold and warm stood apart
    assert len({at for _, at in seen}) == 1


@shortcut
def test_an_agent_run_through_context_run_converges_as_a_plain_one(tmp_path):
    """The plain agent run inside `contextvars.copy_context().run` (tests/convergence_agents
    ContextAgent). Its clean runs are the process's first calls of that code, its resumed
    runs later ones: before `cpython.position`, their `run` frames read at two offsets
    (CALL, then PRECALL once specialised), so one state of sixteen was cut against eleven
    for the plain agent, on one worker (a fork's children differ again)."""
    scen = scenario(tmp_path, 3)
    plain = faultsim.explore(agents.factory(), scen, crash_model="process", crashes=1,
                             workers=0)
    on, off = both(agents.context_agent, scen, crash_model="process", crashes=1, workers=0)
    assert plain.runs[0].converged > 0
    assert on.runs[0].converged == plain.runs[0].converged
    assert comparable(on) == comparable(off)
