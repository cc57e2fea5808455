"""The tests' shared sweeps (tests/shared_runs.py): a shared report is the report the real
in-process backend makes, the front end is told what the real run told it, inputs that
differ never share, inputs without a key never share, and xdist's workers compute a
shared value once."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))

import faultsim  # noqa: E402
from faultsim import backends  # noqa: E402
from faultsim.backends import Agent  # noqa: E402
from faultsim.settings.options import ExploreOptions  # noqa: E402
from same_json import strip  # noqa: E402  (the CI's own "timings aside")
from helpers import SMALL  # noqa: E402
from shared_runs import SharedCache, memo_in_process  # noqa: E402


def _explore(agent, scenario, options, calls):
    return backends.explore(agent, scenario, options,
                            plan=lambda p: calls.append(("plan", p)),
                            progress=lambda *a, **k: calls.append(("progress", a, k)))


def test_a_shared_report_is_the_real_backends_and_the_front_end_hears_the_same(tmp_path):
    path = tmp_path / "small.toml"
    path.write_text(SMALL)
    scenario = faultsim.load_scenario(path)
    agent, options = Agent("reference_agent"), ExploreOptions(crashes=1, workers=1)
    real_calls, made_calls, shared_calls = [], [], []
    real = _explore(agent, scenario, options, real_calls)  # no memo: the real backend
    cache = SharedCache(tmp_path / "cache")
    with memo_in_process(cache) as memo:
        made = _explore(agent, scenario, options, made_calls)
        shared = _explore(agent, scenario, options, shared_calls)
        assert (memo.shared, memo.unkeyed, len(cache.computed)) == (1, 0, 1)
        # a seed, a crash model: another key, another real sweep
        other = _explore(agent, scenario, ExploreOptions(crashes=1, workers=1,
                                                         crash_model="power"), [])
        assert (memo.shared, len(cache.computed)) == (1, 2)
        assert other.runs[0].crash_model == "power"
        # an `only` callable has no key: the real backend, every time
        for _ in range(2):
            _explore(agent, scenario, ExploreOptions(crashes=1, workers=1,
                                                     only=lambda p: p.index < 3), [])
        assert (memo.shared, memo.unkeyed, len(cache.computed)) == (1, 2, 2)
    assert backends.backend("in-process") is memo.real  # put back
    assert shared.to_json() == made.to_json()  # what was made, timings and all
    assert strip(shared.to_json()) == strip(real.to_json())  # a real sweep's report
    assert real.runs[0].verdicts and len(real.runs[0].explored) > 100
    # the plan and progress calls of the real run, in its order
    assert [c[0] for c in shared_calls] == [c[0] for c in made_calls] == \
        [c[0] for c in real_calls]
    assert [c[1:] for c in shared_calls if c[0] == "progress"] == \
        [c[1:] for c in made_calls if c[0] == "progress"]
    (plan,) = [c[1] for c in shared_calls if c[0] == "plan"]
    (real_plan,) = [c[1] for c in real_calls if c[0] == "plan"]
    assert plan.crash_states == real_plan.crash_states


def test_a_changed_scenario_file_is_another_key(tmp_path):
    path = tmp_path / "small.toml"
    path.write_text(SMALL)
    cache = SharedCache(tmp_path / "cache")
    options = ExploreOptions(crashes=1, workers=1, only=None, crash_model="process")
    with memo_in_process(cache) as memo:
        first = _explore(Agent("reference_agent"), faultsim.load_scenario(path), options, [])
        path.write_text(SMALL.replace("12.00", "12.50").replace("1200", "1250"))
        second = _explore(Agent("reference_agent"), faultsim.load_scenario(path), options, [])
        assert (memo.shared, len(cache.computed)) == (0, 2)
    assert first.to_json() != second.to_json()


_ASK = """
import sys, time
sys.path.insert(0, sys.argv[1])
from shared_runs import SharedCache

def compute():
    open(sys.argv[3] + "/" + sys.argv[4], "w").close()
    time.sleep(0.5)  # long enough for the other processes to ask meanwhile
    return {"value": 42}

assert SharedCache(sys.argv[2]).get("the key", compute) == {"value": 42}
"""


def test_processes_asking_at_once_compute_once(tmp_path):
    marks = tmp_path / "marks"
    marks.mkdir()
    procs = [subprocess.Popen([sys.executable, "-c", _ASK, str(Path(__file__).parent),
                               str(tmp_path / "cache"), str(marks), str(n)])
             for n in range(4)]
    assert [p.wait(60) for p in procs] == [0, 0, 0, 0]
    assert len(list(marks.iterdir())) == 1  # one computed, three read it


def test_each_xdist_workers_run_marker_is_left_out_of_the_key(tmp_path, monkeypatch):
    """tests/conftest.py gives each worker its own FAULTSIM_RUN: in the key, no worker would
    ever read another's sweep. Any other faultsim variable is in it."""
    from shared_runs import explore_key

    path = tmp_path / "small.toml"
    path.write_text(SMALL)
    scenario, options = faultsim.load_scenario(path), ExploreOptions(crashes=1)

    def key():
        return explore_key(Agent("reference_agent"), scenario, options, None, None, None)

    monkeypatch.setenv("FAULTSIM_RUN", "pytest-worker-a")
    a = key()
    monkeypatch.setenv("FAULTSIM_RUN", "pytest-worker-b")
    assert key() == a is not None
    monkeypatch.setenv("FAULTSIM_CONVERGENCE_DIAG", "1")
    assert key() != a
