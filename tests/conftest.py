"""Shared helpers for hand-made crash tests: stop the agent at a chosen point by raising
a BaseException (as a kill would: no `except Exception` in the agent can swallow it)."""
from __future__ import annotations

import glob
import os
import shutil
import sys
import tempfile
import uuid
from pathlib import Path

import pytest

from faultsim import load_scenario
from faultsim.real.pool import MARKER, sandbox_parent

# pytester: tests/test_plugin.py runs pytest on generated projects; redis_fixture: a real
# redis-server for the tests that need one (skipped without it, failed in CI)
pytest_plugins = ["pytester", "redis_fixture"]

# Byte-code caching, Python's default, for the suite and every process it starts, as users
# run it: some machines set PYTHONDONTWRITEBYTECODE (these do), and the suite run that way
# hid a bug (a module first imported inside run() under pytest wrote its cache outside the
# sandbox: tests/test_sandbox_escape.py). The caches go to __pycache__ (ignored by git).
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
sys.dont_write_bytecode = False

ROOT = Path(__file__).resolve().parent.parent
SCENARIOS = ROOT / "scenarios"
DATA = Path(__file__).resolve().parent / "data"


# Every run folder of the subprocess mode is named after its run marker; the session's runs
# carry this one (the tests that kill faultsim extend it), so the session can remove what
# they left behind, and never the folder of a run that is not its own.
SESSION_RUNS = f"pytest-{uuid.uuid4().hex}"


def pytest_sessionstart(session):
    os.environ[MARKER] = SESSION_RUNS
    # The package installs the reference agent as faultsim.reference_agent only: the tests'
    # own processes (pytester projects, `python -m faultsim` runs in temporary folders) find
    # the repository's top-level `reference_agent` as this process does, from its root
    paths = os.environ.get("PYTHONPATH", "").split(os.pathsep)
    if str(ROOT) not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join(p for p in [str(ROOT), *paths] if p)
    # `faultsim run` prints ::error annotations under GitHub Actions: the tests that want
    # them ask (tests/test_ci.py), whichever CI runs the suite
    os.environ.pop("GITHUB_ACTIONS", None)
    # progress lines are timed (faultsim.cli.console): on a loaded machine any run may cross
    # their interval, so the tests that compare stderr see none; tests/test_progress.py
    # asks for them
    os.environ["FAULTSIM_PROGRESS_SECONDS"] = "0"


# The longest tests go first: xdist hands tests out in collection order, so one that starts
# last holds the whole run up while the other workers idle (longest first keeps the tail
# short). Order only: every test still runs.
LONGEST_FIRST = (
    "tests/test_docs.py::test_first_command_prints_what_the_docs_show",
    "examples/javascript_agent/test_javascript_agent.py::test_the_sweep_finds_the_agent_clean",
    "tests/test_search_after_convergence.py::test_double_crash_mutants_every_pair_and_the_search",
    "tests/test_printed_commands.py::test_every_printed_command_reproduces_its_counterexample",
    "tests/test_docs.py::test_five_line_example_runs_as_shown",
    "tests/test_multicrash.py::test_search_catches_double_crash_mutants_with_two_crashes",
    "tests/test_plugin.py::test_shards_partition_the_kill_points",
)


def pytest_collection_modifyitems(session, config, items):
    rank = {prefix: n for n, prefix in enumerate(LONGEST_FIRST)}

    def key(item):
        return next((n for prefix, n in rank.items() if item.nodeid.startswith(prefix)),
                    len(rank))

    items.sort(key=key)  # stable: the rest keep their order


def pytest_sessionfinish(session, exitstatus):
    parent = sandbox_parent() or tempfile.gettempdir()
    for folder in glob.glob(os.path.join(parent, f"faultsim-{SESSION_RUNS}-*")):
        shutil.rmtree(folder, ignore_errors=True)


class Killed(BaseException):
    """A simulated kill. Each instance records where it landed, so a test can prove it did."""


class KillAtMark:
    """An `env.mark` that raises at the n-th mark called `name` (optionally matching info)."""

    def __init__(self, name: str, nth: int = 1, **match) -> None:
        self.name, self.nth, self.match = name, nth, match
        self.seen = 0
        self.landed: dict | None = None

    def __call__(self, name: str, **info) -> None:
        if name != self.name or any(info.get(k) != v for k, v in self.match.items()):
            return
        self.seen += 1
        if self.seen == self.nth:
            self.landed = {"mark": name, **info}
            raise Killed(f"killed at {name} #{self.nth} {info}")


class KillAfterEffect:
    """A world listener that raises right after the n-th effect applied by `service`:
    the effect stands (the receiver lives outside the crash domain), the tool never returns."""

    def __init__(self, service: str, nth: int = 1) -> None:
        self.service, self.nth = service, nth
        self.seen = 0
        self.landed = None

    def __call__(self, kind: str, **info) -> None:
        if kind != "effect.applied" or info["entry"].service != self.service:
            return
        self.seen += 1
        if self.seen == self.nth:
            self.landed = info["entry"]
            raise Killed(f"killed after {info['entry'].describe()}")


@pytest.fixture(scope="session")
def support_tickets():
    return load_scenario(SCENARIOS / "support_tickets.toml")


@pytest.fixture(scope="session")
def golden(support_tickets):
    """One clean run of the reference agent: what every crash run is compared with."""
    import reference_agent
    from faultsim import run_once

    return run_once(support_tickets, reference_agent.make_agent)


SB = "/sb"  # the sandbox of the interposer tests, inside pyfakefs


@pytest.fixture
def sandbox():
    """(fake fs, interposer, tracer) with an empty sandbox at /sb; the hooks are installed
    before the Patcher is built, as the explorer does."""
    from pyfakefs.fake_filesystem_unittest import Patcher

    import faultsim.inprocess.fs as fsmod
    from faultsim.inprocess.fs import FsInterposer, install
    from faultsim.core.trace import Tracer

    install()
    with Patcher() as patcher:
        patcher.fs.create_dir(SB)
        tracer = Tracer()
        ip = FsInterposer(patcher.fs, SB, tracer)
        yield patcher.fs, ip, tracer
    assert fsmod._active is None  # no test left an interposer active


def dir_fsync(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@pytest.fixture(scope="session")
def shared_cache(tmp_path_factory):
    """Results computed once per session, shared by the xdist workers (tests/shared_runs.py)."""
    from shared_runs import SharedCache, cache_folder

    return SharedCache(cache_folder(tmp_path_factory))


@pytest.fixture
def memo_backend(shared_cache):
    """The in-process backend's sweeps made once per session and shared: for tests of what a
    front end does with a report, not of the sweep (tests/shared_runs.py says why sound)."""
    from shared_runs import memo_in_process

    with memo_in_process(shared_cache) as memo:
        yield memo
