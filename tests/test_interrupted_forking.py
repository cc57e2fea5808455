"""Ctrl-C or SIGTERM in the forking executor's driver: the partial report holds exactly the
verdicts recorded before the interrupt was raised, each the one the whole run gives that
crash state, and the driver forks nothing after it (faultsim.inprocess.forking,
`_Pool.cut_short`).

The flake this pins (tests/test_interrupted_backends.py, in-process, once under load):
SIGTERM landed while the driver collected a child inside the flush of the agent's atomic
write; the `with open(...)` exit flushed that write again, which re-entered `fork_for` at
the same torn points: it forked a child while unwinding and collected a sibling that had
finished meanwhile, so the report counted 4 verdicts, or 3, as the timing went. Here the
interrupt is raised at such a place on purpose (a KeyboardInterrupt, as SIGTERM's
Terminated is raised: from the handler, wherever the main thread is), after a pause that
lets running siblings finish, and every fork and record after it is counted."""
from __future__ import annotations

import sys
import time

import pytest

from conftest import DATA
from faultsim.inprocess import forking
from faultsim.inprocess.explore import explore
from faultsim.pipeline.sweep import Sweep
from faultsim.reports.interrupted import judged

AGENT = "reference_agent.mutants.overwrite_in_place"  # fails some states: verdicts differ


def _in(names: set[str]) -> bool:
    frame = sys._getframe(2)
    while frame is not None:
        if frame.f_code.co_name in names:
            return True
        frame = frame.f_back
    return False


def _key(v) -> tuple:
    return (v.crash_model, v.kill_point.id, v.order)


def _what(v) -> tuple:
    return (v.persisted, v.state.digest(), [(x.invariant, x.rule, x.explanation)
                                            for x in v.violations], v.resumed_at, v.escalated)


def _whole() -> dict:
    report = explore(AGENT, str(DATA / "tiny.toml"), crash_model="process", crashes=1,
                     workers=2)
    return {_key(v): _what(v) for r in report.runs for v in r.verdicts}


@pytest.fixture(scope="module")
def whole() -> dict:
    return _whole()


@pytest.mark.parametrize("where", ["recording", "agent"])
def test_an_interrupt_in_the_driver_is_the_stop(where, whole, monkeypatch):
    """`recording`: raised from `Sweep.record` as the driver collects a child inside a torn
    point's `before_write` (the flake's place). `agent`: raised at that write's event in the
    agent's own code, before faultsim's policy acts on it. Both inside the flush of the
    agent's `atomic_write_bytes`, whose `with open(...)` exit flushes again."""
    state = {"records": 0, "stopped": False, "forks_after": 0, "records_after": 0}
    before: list[tuple] = []

    def stop() -> None:
        state["stopped"] = True
        time.sleep(0.5)  # running siblings finish: what the unwinding could collect
        raise KeyboardInterrupt

    record = Sweep.record

    def counted(self, model, point, order, *args, **kwargs):
        n = sum(len(r.verdicts) for r in self.runs.values())
        record(self, model, point, order, *args, **kwargs)
        if sum(len(r.verdicts) for r in self.runs.values()) == n:
            return
        if state["stopped"]:
            state["records_after"] += 1
            return
        before.append((model, point.id, order))
        state["records"] += 1
        if where == "recording" and state["records"] >= 3 and _in(
                {"before_write"}) and _in({"atomic_write_bytes"}):
            stop()

    fork = forking.fork

    def forked():
        if state["stopped"]:
            state["forks_after"] += 1
        return fork()

    before_write = forking.ForkAt.before_write

    def agent_stop(self, tracer, write):
        if where == "agent" and not state["stopped"] and state["records"] >= 3 \
                and _in({"atomic_write_bytes"}):
            stop()
        return before_write(self, tracer, write)

    monkeypatch.setattr(Sweep, "record", counted)
    monkeypatch.setattr(forking, "fork", forked)
    monkeypatch.setattr(forking.ForkAt, "before_write", agent_stop)
    with pytest.raises(KeyboardInterrupt) as raised:
        explore(AGENT, str(DATA / "tiny.toml"), crash_model="process", crashes=1,
                workers=2)
    assert state["stopped"]  # the interrupt landed where this test puts it
    runs = judged(raised.value)
    partial = {_key(v): _what(v) for r in runs for v in r.verdicts}
    # nothing after the stop: no child forked, no verdict collected
    assert (state["forks_after"], state["records_after"]) == (0, 0)
    # exactly the verdicts recorded before it, each the whole run's for that crash state
    assert sorted(partial) == sorted(before) and len(before) >= 3
    assert {k: whole[k] for k in partial} == partial
    assert any(what[2] for what in whole.values())  # verdicts that can differ: some fail
