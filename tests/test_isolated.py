"""inprocess.isolated: one call in a forked child. Its result comes back; its death, or its
overrunning the limit, is WorkerDied with the status, and the parent goes on."""
import os
import signal
import time
from pathlib import Path

import pytest

from faultsim.errors import WorkerDied
from faultsim.inprocess.isolated import in_child

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")


def test_the_result_comes_back_and_the_childs_changes_stay_there():
    seen = []
    assert in_child(lambda: seen.append(1) or ("ok", os.getpid()), 30)[0] == "ok"
    assert seen == []  # appended in the child only


def test_a_child_that_kills_itself_is_worker_died_with_its_status():
    with pytest.raises(WorkerDied) as info:
        in_child(lambda: os.kill(os.getpid(), signal.SIGKILL), 30)
    status = info.value.status
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL


def test_a_child_past_its_limit_is_stopped():
    started = time.monotonic()
    with pytest.raises(WorkerDied) as info:
        in_child(lambda: time.sleep(60), 0.5)
    assert info.value.status == -1 and time.monotonic() - started < 10


def test_a_fork_that_fails_in_the_driver_is_a_harness_error_not_non_determinism(monkeypatch):
    """fork() failing at a kill point (EAGAIN: the machine's process limit) leaves the
    driver's run going on with a kill it never had; that is faultsim's failure, named as
    such with the point, never the agent's non-determinism or a violation."""
    import errno

    import faultsim
    from faultsim.errors import ForkFailed
    from faultsim.inprocess import forking
    from faultsim.scenario import load_scenario
    from reference_agent import make_agent

    forks = []

    def fork():
        forks.append(1)
        if len(forks) == 3:  # two children made, then the limit
            raise OSError(errno.EAGAIN, "Resource temporarily unavailable")
        return real()

    real = forking.fork
    monkeypatch.setattr(forking, "fork", fork)
    scen = load_scenario(Path(__file__).parent / "data" / "tiny.toml")
    with pytest.raises(ForkFailed, match=r"tiny\.toml: could not fork the process that "
                                         r"dies at k\S+: \[Errno 11\]"):
        faultsim.explore(make_agent, scen, crash_model="process", crashes=1, workers=1)
    assert len(forks) == 3
