"""The lead board (faultsim.inprocess.board): a claim is the first process's, its waiters
get what it publishes, and a claimant that dies without publishing holds nobody up. And
the time a run is held there does not count against its time limit."""
from __future__ import annotations

import os
import time

import pytest

from faultsim.inprocess.board import Board
from faultsim.pipeline.incarnation import IncarnationTimeout, held, time_limit


@pytest.fixture
def board():
    b = Board.create()
    assert b is not None
    yield b
    b.remove()
    assert not os.path.exists(b.root)  # nothing left behind


def _child(body) -> int:
    pid = os.fork()
    if pid == 0:
        try:
            body()
        finally:
            os._exit(0)
    return pid


def test_the_first_claim_wins_and_its_waiter_gets_what_it_publishes(board):
    name = board.name("state", "memory")
    assert board.name("state", "other memory") != name

    def claimant():
        assert board.claim(name)
        time.sleep(0.2)  # the waiter is waiting by now
        board.publish(name, {"lead": 1})

    pid = _child(claimant)
    try:
        while not os.path.exists(f"{board.root}/{name}.claim"):
            time.sleep(0.001)
        notes = []
        board.notify = notes.append
        assert not board.claim(name)  # claimed already
        assert board.wait(name) == {"lead": 1}
        assert notes == [b"W", b"R"]  # it told the parent it waited, then that it runs
    finally:
        os.waitpid(pid, 0)


def test_a_claimant_that_dies_without_publishing_holds_nobody_up(board):
    name = board.name("state", "memory")
    pid = _child(lambda: board.claim(name))  # and exits, publishing nothing
    os.waitpid(pid, 0)
    started = time.monotonic()
    assert board.wait(name) is None
    assert time.monotonic() - started < 1


def test_a_published_none_lets_waiters_go_on(board):
    name = board.name("state", "memory")
    assert board.claim(name)
    board.publish(name, None)  # its run made no lead
    assert board.wait(name) is None


def test_time_held_does_not_count_against_the_time_limit(monkeypatch):
    """Held: the limit's timer stops, and the time is credited where the limit is worked
    out again (a run starved of CPU gets its starved time back when the timer fires)."""
    from faultsim.pipeline import incarnation

    def busy(seconds):
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            pass

    def starved(after: float):  # the run waited `after` s for a CPU once the limit began
        calls = []
        monkeypatch.setattr(incarnation, "_queued", lambda: after if calls.append(1) or
                            len(calls) > 1 else 0.0)

    starved(0.2)
    with time_limit(0.3):
        busy(0.2)
        with held():
            time.sleep(0.5)  # held by faultsim: not the run's time
        busy(0.25)  # the timer fires here (0.3 s run), 0.2 s starved: 0.2 s are left
    starved(0.2)
    with pytest.raises(IncarnationTimeout):  # the same, not held, is past the limit
        with time_limit(0.3):
            busy(0.2)
            time.sleep(0.5)
            busy(0.25)


def test_a_board_left_by_a_killed_run_is_removed_by_the_next():
    stale = Board.create()
    pid = _child(lambda: None)
    os.waitpid(pid, 0)  # a process that is gone
    dead = stale.root.replace(f"-{os.getpid()}-", f"-{pid}-")
    os.rename(stale.root, dead)  # as if that process had made it, then been killed
    open(f"{dead}/x.claim", "w").close()
    fresh = Board.create()
    try:
        assert not os.path.exists(dead)
    finally:
        fresh.remove()
