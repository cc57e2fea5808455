"""The agent-factory contract checked where the user meets it (issue 51, item 9): a factory
that cannot be called as `make_agent(env)`, or whose call makes no object with a callable
`.run()`, is refused in one line naming it (exit 2), right away, in both modes; the shapes
the contract allows (extra parameters with defaults, `*args`, a class, a partial, a
coroutine `.run()`) pass."""
from __future__ import annotations

import functools
import glob
import os
import tempfile
import time

import pytest

from conftest import DATA, SESSION_RUNS
from faultsim import explore, load_scenario
from faultsim.agent import FactoryError, check_factory, check_made
from faultsim.cli import main
from faultsim.settings.loading import load_callable

TINY = str(DATA / "tiny.toml")

# How users get it wrong: the module they would write, each factory one mistake.
BROKEN = '''
class Helper:
    run = "not a method"


class NoRun:
    def start(self):
        return "done"


def forgets_to_return(env):
    agent = NoRun()


def builds_the_wrong_thing(env):
    return NoRun()


def run_is_data(env):
    return Helper()


def takes_nothing():
    return NoRun()


def takes_two(env, config):
    return NoRun()
'''


@pytest.fixture
def broken(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "my_agent.py").write_text(BROKEN)
    # temporary folders of this run only (other processes share /tmp and /dev/shm)
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    return tmp_path


def _leftovers(root) -> set[str]:
    """What this run may leave: its temporary folders, and in /dev/shm the subprocess
    mode's run folders (named by the session's marker) and this process's lead boards."""
    mine = (SESSION_RUNS, f"-{os.getpid()}-")
    return set(glob.glob(f"{root}/tmp/*")) | {
        p for p in glob.glob("/dev/shm/faultsim-*") if any(m in p for m in mine)}


@pytest.mark.parametrize("mode", ["in-process", "subprocess"])
@pytest.mark.parametrize("attr, why", [
    ("forgets_to_return", "forgets_to_return(env) returned None; a factory returns an object "
                          "with .run()"),
    ("builds_the_wrong_thing", "builds_the_wrong_thing(env) returned an object of class "
                               "NoRun, which has no .run()"),
    ("run_is_data", "run_is_data(env) returned an object of class Helper whose .run is a "
                    "str, not a method"),
    ("takes_nothing", "takes_nothing() cannot be called as takes_nothing(env) (too many "
                      "positional arguments)"),
    ("takes_two", "takes_two(env, config) cannot be called as takes_two(env) (missing a "
                  "required argument: 'config')"),
])
def test_a_broken_factory_is_one_line_naming_it_and_exits_2(broken, mode, attr, why, capsys):
    before = _leftovers(broken)
    started = time.monotonic()
    code = main(["run", TINY, "--agent", f"my_agent.py:{attr}", "--mode", mode])
    took = time.monotonic() - started
    err = capsys.readouterr().err
    assert code == 2, err
    assert f"agent my_agent.py:{attr}: {why}" in err, err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    # at the first call (or at load), not after the clean runs: a second on an idle machine,
    # the bound leaves room for a shared CI core and subprocess mode's fork server start
    assert took < 15, took
    assert _leftovers(broken) <= before


def test_a_factory_given_as_a_callable_is_checked_too(broken):
    # the pytest plugin and faultsim.explore take the factory itself, loaded by no spec
    tiny = load_scenario(TINY)
    with pytest.raises(FactoryError, match=r"<lambda>\(env\) returned None"):
        explore(lambda env: None, tiny, crashes=1)
    with pytest.raises(FactoryError, match=r"cannot be called as takes_nothing\(env\)"):
        explore(load_callable("my_agent.py:takes_nothing"), tiny, crashes=1)


class _Agent:
    def __init__(self, env, retries=3):
        self.env = env

    def run(self):
        return "done"


class _AsyncAgent:
    async def run(self):
        return "done"


def _with_options(env, *, verbose=False):
    return _Agent(env)


@pytest.mark.parametrize("factory", [
    _Agent,  # a class: its __init__ takes env
    _with_options,
    functools.partial(_Agent, retries=1),
    lambda *args, **kwargs: _Agent(None),
    lambda env, extra=None: _Agent(env),
], ids=["class", "keyword-only", "partial", "varargs", "default"])
def test_what_the_contract_allows_passes_the_signature_check(factory):
    check_factory(factory, "agent.py:make_agent")
    check_made(factory(object()), factory)


def test_an_async_run_passes_the_made_object_check():
    check_made(_AsyncAgent(), lambda env: _AsyncAgent())
