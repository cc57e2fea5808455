"""An incarnation's time limit (faultsim.pipeline.incarnation.time_limit): it stops a hang,
counts no time the run only waited for a CPU, and is never raised inside a finaliser."""
from __future__ import annotations

import gc
import time

import pytest

from faultsim.pipeline import incarnation
from faultsim.pipeline.incarnation import IncarnationTimeout, time_limit


def test_a_spinning_run_is_stopped():
    with pytest.raises(IncarnationTimeout):
        with time_limit(0.2):
            end = time.monotonic() + 3
            while time.monotonic() < end:
                pass


def test_time_spent_waiting_for_a_cpu_is_not_counted(monkeypatch):
    # as on a loaded machine: the first 0.5 s of the run it waited on a run queue
    started = time.monotonic()
    monkeypatch.setattr(incarnation, "_queued",
                        lambda: min(time.monotonic() - started, 0.5))
    with time_limit(0.3):
        time.sleep(0.7)  # 0.2 s of its own: within the limit
    started = time.monotonic()
    with pytest.raises(IncarnationTimeout):
        with time_limit(0.3):
            time.sleep(1.5)  # 1.0 s of its own: past it


class _SlowFinaliser:
    def __del__(self):
        time.sleep(0.4)  # the limit expires in here


def test_the_limit_is_not_raised_inside_a_finaliser():
    # raised in a __del__, the exception would be printed and lost, and the hang go on
    with pytest.raises(IncarnationTimeout):
        with time_limit(0.2):
            _SlowFinaliser()  # collected at once: its __del__ runs past the limit
            gc.collect()
            end = time.monotonic() + 3
            while time.monotonic() < end:
                pass
