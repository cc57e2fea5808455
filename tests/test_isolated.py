"""inprocess.isolated: one call in a forked child. Its result comes back; its death, or its
overrunning the limit, is WorkerDied with the status, and the parent goes on."""
import os
import signal
import time

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
