"""What a kill unwinds through, read from the code (faultsim/inprocess/unwind.py): the
forking executor skips the child that would only learn a kill point's aftermath where the
stack provably lets the kill through to run(). Proven twice: each handler shape read on
its own (lets the kill through, or refuses), and whole sweeps of agents written as users
write them (tests/unwind_agents.py, tests/finality_agents.py) give the same verdicts with
the shortcut, without it, and on the replaying executor, with the shortcut taken."""
from __future__ import annotations

import contextlib
import contextvars
import json
import os
import sys
import threading

import pytest

import faultsim
from faultsim.inprocess import cpython, unwind
from tests import finality_agents, state_agent, unwind_agents
from tests.helpers import scenario_from
from tests.test_checkpoints import BASE

pytestmark = pytest.mark.skipif(cpython.shapes() is None, reason=str(cpython.unknown()))


class Kill(BaseException):
    pass


def _driver(case, *args):
    return case(*args)


def _here() -> bool:
    """Would a kill raised in the caller reach `_driver` with nothing run on the way?"""
    return unwind.quiet(sys._getframe(1), Kill, _driver.__code__)


def _plain():
    return _here()


def _typed():
    try:
        return _here()
    except (KeyError, ValueError) as exc:
        raise RuntimeError from exc
    except json.JSONDecodeError:
        raise
    except Exception:
        return None


def _nested_typed():
    try:
        try:
            return _here()
        except OSError:
            pass
    except LookupError:
        pass


def _except_base():
    try:
        return _here()
    except BaseException:
        raise


def _except_tuple_with_base():
    try:
        return _here()
    except (ValueError, BaseException):
        raise


def _bare_except():
    try:
        return _here()
    except:  # noqa: E722
        raise


def _unreadable_class():
    try:
        return _here()
    except _errors()[0]:
        pass


def _errors():
    return (OSError,)


def _finally_close(fd):
    try:
        return _here()
    finally:
        os.close(fd)


def _finally_other(fd):
    try:
        return _here()
    finally:
        print("cleanup", fd, file=sys.stderr)


def _finally_branch(fd):
    try:
        return _here()
    finally:
        if fd:
            os.close(fd)


_VAR: contextvars.ContextVar = contextvars.ContextVar("var", default=None)


def _finally_set_back():
    previous = _VAR.get()
    _VAR.set(1)
    try:
        return _here()
    finally:
        _VAR.set(previous)


def _finally_reset():  # reset raises on a token of another context: it could replace the kill
    token = _VAR.set(1)
    try:
        return _here()
    finally:
        _VAR.reset(token)


def _with_open(path):
    with open(path, "w") as f:
        f.write("x")
        return _here()


class _Holder:
    def __init__(self, path):
        self.path = path

    def opener(self, path, mode):
        return open(path, mode)


def _with_open_built(holder):  # its arguments were computed before the kill
    with open(holder.path + ".tmp", "w") as f:
        f.write("x")
        return _here()


def _with_open_fstring(holder):
    with open(f"{holder.path}.{7:03d}", "w"):
        return _here()


def _with_a_locals_opener(holder):  # the callee is a local's: it may be anything
    with holder.opener(holder.path, "w"):
        return _here()


def _with_lock():
    with threading.Lock():
        return _here()


def _with_suppress():
    with contextlib.suppress(OSError):
        return _here()


def _with_open_then_typed(path):
    with open(path, "w"):
        try:
            return _here()
        except ValueError:
            pass


class _Finaliser:
    def __del__(self):
        pass


def _in_del():
    _Finaliser.__del__.__code__  # a frame named __del__ refuses: see below
    return _here()


def _fd(tmp_path):
    return os.open(tmp_path / "fd", os.O_WRONLY | os.O_CREAT)


@pytest.mark.parametrize("case,through", [
    (_plain, True), (_typed, True), (_nested_typed, True),
    (_except_base, False), (_except_tuple_with_base, False), (_bare_except, False),
    (_unreadable_class, False), (_with_lock, False), (_with_suppress, False),
])
def test_each_handler_shape_lets_the_kill_through_or_refuses(case, through):
    assert _driver(case) is through


@pytest.mark.parametrize("case,through", [
    (_finally_close, True), (_finally_other, False), (_finally_branch, False)])
def test_a_finally_lets_it_through_only_when_it_closes_a_descriptor(case, through, tmp_path):
    assert _driver(case, _fd(tmp_path)) is through


def test_a_finally_that_sets_a_context_variable_back_lets_it_through_and_a_reset_refuses():
    assert _driver(_finally_set_back) is True
    assert _driver(_finally_reset) is False


def test_a_finally_closing_through_pyfakefs_os_lets_it_through():
    """Under pyfakefs, an agent's `os` is an instance of its FakeOsModule: `os.close` is a
    method of its class, read as the callee it binds (the sandbox's `finally: os.close`)."""
    from pyfakefs.fake_filesystem_unittest import Patcher

    with Patcher():
        assert type(os).__name__ == "FakeOsModule"
        fd = os.open("/fd", os.O_WRONLY | os.O_CREAT)
        assert _driver(_finally_close, fd) is True
        assert _driver(_finally_branch, os.open("/fd", os.O_RDONLY)) is False


@pytest.mark.parametrize("case,through", [(_with_open, True), (_with_open_then_typed, True)])
def test_a_with_over_a_file_opened_in_the_statement_lets_it_through(case, through, tmp_path):
    assert _driver(case, str(tmp_path / "f")) is through


@pytest.mark.parametrize("case,through", [
    (_with_open_built, True), (_with_open_fstring, True), (_with_a_locals_opener, False)])
def test_an_openers_arguments_built_from_locals_do_not_matter(case, through, tmp_path):
    assert _driver(case, _Holder(str(tmp_path / "f"))) is through


def test_a_frame_not_under_run_refuses_and_a_finaliser_refuses():
    assert unwind.quiet(sys._getframe(), Kill, _driver.__code__) is False  # no _driver

    class Finalised:
        def __del__(self):
            self.seen = _here()
            seen.append(self.seen)

    seen: list = []

    def drop():
        Finalised()  # freed at once: __del__ runs inside this frame's call
        return True

    assert _driver(drop) and seen == [False]


# -- whole sweeps: the same verdicts with and without the shortcut --------------------------

@pytest.fixture(scope="module")
def charge(tmp_path_factory):
    return scenario_from(tmp_path_factory, BASE.format(
        id="unwind", checkpoint='[checkpoint]\nfiles = ["state.json"]\n'))


def _verdicts(report) -> list:
    return sorted((v.kill_point.id, v.order, tuple((x.invariant, x.explanation)
                                                   for x in v.violations))
                  for run in report.runs for v in run.verdicts)


# (agent, its sweep passes, the shortcut is taken somewhere). Forked as before: the kills
# inside framework_cleanup's save (all under `except BaseException`), and every kill of
# swallows_the_kill (its run() is inside a `finally` that restores an attribute).
AGENTS = [
    (state_agent.make_agent, True, True), (unwind_agents.typed_handlers, True, True),
    (unwind_agents.saves_under_except_exception, True, True),
    (unwind_agents.suppressing_guard, False, True),
    (unwind_agents.retries_on_anything, False, True),
    (finality_agents.framework_cleanup, True, True),
    (finality_agents.swallows_the_kill, False, False),
    (unwind_agents.context_scoped, True, True),
]


@pytest.mark.parametrize("make,clean,taken", AGENTS, ids=[a.__name__ for a, _, _ in AGENTS])
def test_verdicts_are_the_same_with_and_without_reading_the_stack(make, clean, taken, charge,
                                                                    monkeypatch):
    before = dict(unwind.counts)
    short = faultsim.explore(make, charge, crashes=1)
    read = unwind.counts["read"] - before["read"]
    replayed = faultsim.explore(make, charge, crashes=1, workers=0)
    monkeypatch.setattr(unwind, "ENABLED", False)
    long = faultsim.explore(make, charge, crashes=1)
    assert unwind.counts["read"] - before["read"] == read  # off means off
    points = sum(len(run.explored) for run in short.runs)
    assert points > 20 and len(_verdicts(short)) >= points  # every kill landed, judged
    assert _verdicts(short) == _verdicts(long) == _verdicts(replayed)
    assert short.ok is clean, short.counterexamples(2)
    assert (read > 0) is taken
    # the report's count (its `shortcuts`), per first crash state at its kill: the same
    # on the replaying executor, which reads the same frame at its own kill; and off says so
    found = [_unwind_blocks(r) for r in (short, replayed, long)]
    assert found[0] == found[1], found
    for block in found[0]:
        assert block["of"] == sum(len(run.verdicts) for run in short.runs
                                  if run.crash_model == block["model"]) - block["at_start"]
        assert (block["applied"] > 0) is taken, block
        if not taken:  # the frame that stopped the reading, named
            assert "swallows_the_kill" in block["why_not"] or \
                "finality_agents.py" in block["why_not"], block
    assert all(b["applied"] == 0 and b["why_not"] == unwind.OFF for b in found[2])
    if not clean:  # where the kill is caught, the point was forked, and its finding kept
        assert any(v.invariant == "no_work_after_kill" for run in short.runs
                   for x in run.verdicts for v in x.violations)


def test_a_kill_never_read_says_where_in_the_summary(charge, capsys):
    """swallows_the_kill runs its whole loop inside a `try` whose `finally` restores an
    attribute: no kill is read, every point with its states judged forks a child for its
    aftermath, and the summary's `shortcuts` line names the frame that stopped the reading
    (issue 53: a shortcut that is off says so). StateAgent's kills are read: no line."""
    from faultsim.cli.console import print_run

    for make, said in ((finality_agents.swallows_the_kill, True),
                       (state_agent.make_agent, False)):
        (run,) = faultsim.explore(make, charge, crashes=1, crash_model="process").runs
        found = run.to_json()["shortcuts"]["unwind"]
        capsys.readouterr()
        print_run(run)
        lines = [x.strip() for x in capsys.readouterr().out.splitlines()
                 if x.strip().startswith("shortcuts")]
        if said:
            assert found["applied"] == 0 and found["of"] > 20, found
            assert found["why_not"] == ("SwallowsTheKill.run in finality_agents.py may run "
                                        "code as the kill unwinds (an except, finally or "
                                        "with not shown to let it through)"), found
            # the most states' reason (a kill during a request stops in httpx first)
            assert sum(found["refused"].values()) == found["of"]
            assert found["refused"][found["why_not"]] == max(found["refused"].values())
            (line,) = lines
            assert (f"unwind 0 of {found['of']} first crash states "
                    f"(never: {found['why_not']})") in line
        else:
            assert found["applied"] > 20 and not lines, (found, lines)


def _unwind_blocks(report) -> list[dict]:
    """Each run's `shortcuts.unwind`, with its crash model and its states killed before the
    first event (no kill is raised there: not counted)."""
    return [{**run.to_json()["shortcuts"]["unwind"], "model": run.crash_model,
             "at_start": sum(v.kill_point.index == 0 for v in run.verdicts)}
            for run in report.runs]


def test_a_run_scoped_by_a_context_variable_costs_no_fork(charge):
    """ContextScoped is StateAgent with its run inside `finally: CURRENT_RUN.set(previous)`,
    under every kill point: the aftermath is read at as many points as StateAgent's (each
    was forked before that `finally` was read). Its save's `finally: os.close(fd)` is read
    through pyfakefs's `os`."""
    def counted(make):
        before = dict(unwind.counts)
        assert faultsim.explore(make, charge, crashes=1).ok
        return {k: unwind.counts[k] - before[k] for k in before}

    scoped, plain = counted(unwind_agents.context_scoped), counted(state_agent.make_agent)
    assert scoped == plain and scoped["read"] >= 10, (scoped, plain)


def test_the_reference_agent_forks_no_child_to_learn_a_kill():
    """Its run sets its ownership check (storage.FENCE) around `_run` and puts the enclosing
    one back in a `finally`, and its writes fsync under `finally: os.close(fd)`: from the
    day FENCE came until `ContextVar.set` was read, every one of its points whose states
    were all judged forked a child (refunds: 318, research_50_steps: 1,398), and nothing
    said so."""
    from reference_agent import make_agent

    from faultsim.scenario import load_scenario
    from tests.conftest import DATA

    before = dict(unwind.counts)
    report = faultsim.explore(make_agent, load_scenario(DATA / "tiny.toml"), crashes=1,
                              crash_model="process")
    assert report.ok
    assert unwind.counts["read"] - before["read"] > 100
    assert unwind.counts["forked"] == before["forked"]


def test_the_real_openers_are_known_when_first_read_under_pyfakefs():
    """CI: a worker whose first sweep read the openers under pyfakefs knew only its fake
    `open`, and the real one refused from then on."""
    import io

    from pyfakefs.fake_filesystem_unittest import Patcher

    real_open, real_fdopen = io.open, os.fdopen
    with Patcher():
        cleanup, openers = unwind._known()
    assert {real_open, real_fdopen} <= openers and os.close in cleanup
    import pathlib

    assert pathlib.Path.open in unwind._KNOWN[1]  # read when unwind was imported


def test_an_open_fake_files_attributes_are_refused_as_when_pyfakefs_hooked_every_read():
    """pyfakefs's open files take the generic lookup now (inprocess/fs.py,
    _direct_wrapper_lookup), with forwards where its `__getattribute__` ran code: a read
    on one may still run code, so the handler reader refuses each, as it did when their
    `__getattribute__` made it refuse every read. An ordinary object's own value and
    method are still read. (Checked to fail without `_forwarding` in `unwind._attribute`.)"""
    from pyfakefs.fake_filesystem_unittest import Patcher

    from faultsim.inprocess.fs import install

    install()
    with Patcher() as patcher:
        patcher.fs.create_file("/f", contents=b"x")
        for mode in ("rb", "r", "ab"):
            with open("/f", mode) as f:
                for name in ("close", "flush", "write", "read", "_io", "file_object"):
                    assert unwind._attribute(f, name) is unwind._Refuse, (mode, name)

    class Plain:
        def method(self):
            return None

    plain = Plain()
    plain.value = 3
    assert unwind._attribute(plain, "value") == 3
    assert unwind._attribute(plain, "method") is Plain.method
