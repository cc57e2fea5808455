"""faultsim's own hypothesis draws follow the seed alone, not the literals of whatever local
code the process has loaded (hypothesis's "local constants": faultsim.core.draws)."""
from __future__ import annotations

import importlib.util
import sys

import faultsim.formats.hostile as hostile
import reference_agent
from conftest import DATA
from faultsim import load_scenario


def _cases(monkeypatch, drawn: int = 40) -> list[bytes]:
    seen: list[bytes] = []
    call = hostile.Attack.__call__

    def record(self, case):
        seen.append(case.data)
        return call(self, case)

    monkeypatch.setattr(hostile.Attack, "__call__", record)
    tiny = load_scenario(DATA / "tiny.toml")
    report = hostile.attack_all(reference_agent.make_agent, tiny, drawn=drawn)
    monkeypatch.setattr(hostile.Attack, "__call__", call)
    return seen[len(seen) - report.drawn:]


def _load_literals(tmp_path) -> None:
    """A local module (outside any tests/ folder) full of literals a draw could take:
    every offset into the checkpoint, junk bytes, short strings."""
    path = tmp_path / "literal_heavy_module.py"
    path.write_text("VALUES = [" + ", ".join(str(n) for n in range(3, 900, 7)) + "]\n"
                    "JUNK = [" + ", ".join(repr(bytes([n, n + 1])) for n in range(1, 60)) + "]\n"
                    "WORDS = [" + ", ".join(repr(f"w{n}") for n in range(60)) + "]\n")
    spec = importlib.util.spec_from_file_location("literal_heavy_module", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["literal_heavy_module"] = module
    spec.loader.exec_module(module)


def test_drawn_hostile_cases_do_not_depend_on_the_code_loaded(monkeypatch, tmp_path):
    before = _cases(monkeypatch)
    _load_literals(tmp_path)
    try:
        assert _cases(monkeypatch) == before
        # and the pin is what holds them: without it, the new literals reach the draws
        from contextlib import nullcontext

        monkeypatch.setattr(hostile, "seed_only", nullcontext)
        assert _cases(monkeypatch) != before
    finally:
        sys.modules.pop("literal_heavy_module", None)
