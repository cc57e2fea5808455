"""The readers of CPython internals (faultsim/inprocess/cpython.py: unwind.py's reading of
handlers, fingerprints.py's liveness pass and its reading of frames) on code and
interpreters they do not know: each takes the long way (the point forks, every local is
kept, no run is cut), never a guess, and a sweep's report is the long way's. On code they
know, the shortcut still applies (each test also fails if a reader always refused)."""
from __future__ import annotations

import dataclasses
import dis
import sys
import types

import pytest

import convergence_agents
import faultsim
from faultsim.inprocess import cpython, fingerprints, unwind
from tests.test_convergence import comparable, scenario

pytestmark = pytest.mark.skipif(cpython.shapes() is None, reason=str(cpython.unknown()))


def _forget(monkeypatch) -> None:
    """The readers cache what they read of each code object: read afresh."""
    monkeypatch.setattr(unwind, "_tables", {})
    monkeypatch.setattr(fingerprints, "_LIVE", {})


def without(monkeypatch, *names: str) -> None:
    """This interpreter's version as known, but for the opcodes `names`."""
    key = (sys.implementation.name, *sys.version_info[:2])
    known = cpython.KNOWN[key]
    assert set(names) <= known.opcodes
    monkeypatch.setitem(cpython.KNOWN, key,
                        dataclasses.replace(known, opcodes=known.opcodes - set(names)))
    _forget(monkeypatch)


def another_version(monkeypatch) -> None:
    monkeypatch.setattr(cpython, "_running", lambda: ("cpython", 3, 99))
    _forget(monkeypatch)


def _opnames(function) -> set:
    return {i.opname for i in dis.get_instructions(function)}


# -- what is known is this interpreter's --------------------------------------------------

def test_the_known_opcodes_and_jumps_are_this_interpreters():
    """The set is this version's own, name for name, and so are its jumps: a reader's table
    that lagged its interpreter would call a real opcode unknown, or miss a jump."""
    known = cpython.shapes()
    assert known.opcodes == set(dis.opmap)
    assert known.jumps == {dis.opname[op] for op in {*dis.hasjrel, *dis.hasjabs}}
    assert known.stops <= known.opcodes
    assert cpython.unknown() is None


def _codes(module) -> list:
    todo = [v for v in vars(module).values() if isinstance(v, types.FunctionType)]
    todo += [f for cls in vars(module).values() if isinstance(cls, type)
             for f in vars(cls).values() if isinstance(f, types.FunctionType)]
    seen: dict = {}
    while todo:
        obj = todo.pop()
        code = obj if isinstance(obj, types.CodeType) else obj.__code__
        if code not in seen:
            seen[code] = True
            todo += [c for c in code.co_consts if isinstance(c, types.CodeType)]
    return list(seen)


def test_an_exception_table_is_read_only_when_it_reads_back_to_its_bytes():
    import asyncio.base_events
    import json.decoder

    from faultsim.inprocess import fs

    codes = [c for m in (json.decoder, asyncio.base_events, fs, unwind) for c in _codes(m)]
    assert len(codes) > 200
    tables = 0
    for code in codes:  # every table the compiler wrote reads (the shortcut applies)
        offsets = {i.offset for i in cpython.instructions(code)}
        table = cpython.exception_table(code, offsets)
        assert table is not None, code
        tables += bool(table)
    assert tables > 30

    def handled():
        try:
            return 1
        except KeyError:
            return 2

    code = handled.__code__
    offsets = {i.offset for i in dis.get_instructions(code)}
    assert cpython.exception_table(code, offsets)
    # `dis` stops quietly at a truncated entry: its handler would read as none
    cut = code.replace(co_exceptiontable=code.co_exceptiontable[:-1])
    assert len(dis.Bytecode(cut).exception_entries) < len(dis.Bytecode(code).exception_entries)
    assert cpython.exception_table(cut, offsets) is None
    # a handler that starts at no instruction of the code
    entry = dis.Bytecode(code).exception_entries[0]
    assert cpython.exception_table(code, offsets - {entry.target}) is None


# -- unwind.py: what a kill unwinds through ------------------------------------------------

class Kill(BaseException):
    pass


def _driver(case):
    return case()


def _here() -> bool:
    return unwind.quiet(sys._getframe(1), Kill, _driver.__code__)


def _typed():
    try:
        return _here()
    except KeyError:
        raise


def _plain():
    return _here()


def test_unwind_forks_where_the_code_holds_an_opcode_it_does_not_know(monkeypatch):
    assert "CHECK_EXC_MATCH" in _opnames(_typed) and "CHECK_EXC_MATCH" not in _opnames(_plain)
    assert _driver(_typed) and _driver(_plain)  # known: read, the kill goes through
    without(monkeypatch, "CHECK_EXC_MATCH")
    assert not _driver(_typed)  # that frame refuses: its point is forked
    assert _driver(_plain)  # refused per code, not everywhere


def test_unwind_forks_everywhere_on_an_unknown_version(monkeypatch):
    frame = sys._getframe()
    assert unwind._code_info(frame.f_code) is not None
    another_version(monkeypatch)
    assert unwind._code_info(frame.f_code) is None and not _driver(_plain)
    before = dict(unwind.counts)
    assert not unwind.decided(unwind.refusal_here(frame)) and unwind.counts == before
    assert "CPython 3.99 is not a version" in cpython.unknown()


# -- fingerprints.py: the liveness pass, the frames ----------------------------------------

def _read_before(value):
    status = value
    size = len(status)
    return fingerprints._frame_state(sys._getframe()), size


def test_the_liveness_pass_keeps_every_local_where_it_does_not_know_an_opcode(monkeypatch):
    assert "status" not in _read_before({"x": 1})[0]  # known: a dead local is not state
    without(monkeypatch, "STORE_FAST")
    assert fingerprints.live_locals(_read_before.__code__, 0) is None
    assert _read_before({"x": 1})[0]["status"] == {"x": 1}  # every local kept


def test_frames_are_not_read_on_an_unknown_version(monkeypatch):
    another_version(monkeypatch)
    assert fingerprints.live_locals(_read_before.__code__, 0) is None
    with pytest.raises(fingerprints.Refused, match="CPython 3.99"):
        _read_before({"x": 1})
    memory, why = fingerprints.read_memory(sys._getframe())
    assert memory is None and "CPython 3.99" in why


def test_a_locals_mapping_of_another_type_is_not_read():
    """3.13's f_locals is a write-through proxy (PEP 667), not the dict 3.11 gives."""
    class Proxy(dict):
        pass

    def frame(values):
        return types.SimpleNamespace(f_code=_read_before.__code__, f_lasti=0, f_locals=values)

    assert cpython.frame_locals(frame({"status": 1})) == {"status": 1}
    assert fingerprints._frame_state(frame({"status": 1, "value": 2})) == {"value": 2}
    assert cpython.frame_locals(frame(Proxy(status=1))) is None
    with pytest.raises(fingerprints.Refused, match="locals are a Proxy"):
        fingerprints._frame_state(frame(Proxy(status=1)))


class _Base:
    def finish(self):
        return 1


class _Child(_Base):
    def run(self, x):
        here = fingerprints._frame_state(sys._getframe())
        return here, super().finish()  # reads `self` from the frame, no LOAD_FAST


def test_zero_argument_super_keeps_the_first_argument():
    state, _ = _Child().run(3)
    assert "self" in state and "x" not in state


def test_a_class_body_keeps_its_whole_namespace():
    class Body:
        settings = {"retries": 3}
        state = fingerprints._frame_state(sys._getframe())

    assert Body.state["settings"] == {"retries": 3}


# -- whole sweeps: the long way's report ---------------------------------------------------

def _sweep(tmp_path):
    """A plain agent's two-step sweep: the report, and how many kill points unwind.py read."""
    before = unwind.counts["read"]
    report = faultsim.explore(convergence_agents.factory(), scenario(tmp_path, 2),
                              crash_model="process", crashes=1, workers=2)
    return report, unwind.counts["read"] - before


def test_a_sweep_on_an_unknown_version_takes_the_long_way_with_the_same_report(
        tmp_path, monkeypatch):
    short, read = _sweep(tmp_path)
    assert read > 0 and short.runs[0].converged > 0 and short.runs[0].convergence is None
    another_version(monkeypatch)
    long, read = _sweep(tmp_path)
    assert read == 0 and long.runs[0].converged == 0
    assert long.runs[0].convergence == cpython.unknown()
    assert comparable(long) == comparable(short) and long.ok
    # the report says why no kill was read, as it says why no run was cut
    kills = [r.runs[0].to_json()["shortcuts"]["unwind"] for r in (short, long)]
    assert kills[0]["applied"] > 0 and kills[1]["applied"] == 0
    assert kills[1]["of"] == kills[0]["of"]
    assert kills[1]["why_not"] == f"not read on this interpreter: {cpython.unknown()}"


def test_a_sweep_whose_code_holds_an_unknown_opcode_has_the_same_report(
        tmp_path, monkeypatch):
    short, read = _sweep(tmp_path)
    without(monkeypatch, "STORE_FAST")  # in most of the agent's and the SDK's functions
    long, fewer = _sweep(tmp_path)
    assert fewer < read
    assert comparable(long) == comparable(short) and long.ok
