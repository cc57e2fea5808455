"""One report for every outcome: a write outside the workdir is refused (PermissionError)
and reported the same way in both modes, on the clean run (SandboxEscape: the run stops
with one line, and --json/--junit/--summary-md still say why) and on resumed runs
(no_sandbox_escape); call sites are paths as the user wrote them; what an agent only
reads (site-packages: a framework imported inside run()) stays readable in-process. The
agents are tests/user_agents.py's, on tests/data/one_charge.toml."""
from __future__ import annotations

import importlib
import json
import os
import sys
import xml.etree.ElementTree as ET

import pytest

import faultsim
import user_agents
from conftest import DATA, ROOT
from faultsim.cli import main
from faultsim.errors import SandboxEscape
from faultsim.settings.loading import load_factory
from faultsim.real.explore import explore_subprocess

SCENARIO = faultsim.load_scenario(DATA / "one_charge.toml")
LOG = user_agents.ESCAPE_LOG
# resumed with the tool call in flight, and with its result saved
RESUMES = ("k9-after-model-response-state.json#2", "k16-after-tool-before-B-state.json#3")


def _explore(mode: str, name: str, **kw):
    if mode == "in-process":
        return faultsim.explore(getattr(user_agents, name), SCENARIO, crashes=1, **kw)
    return explore_subprocess(f"user_agents:{name}", SCENARIO, **kw)


@pytest.fixture(autouse=True)
def _no_real_log():
    assert not os.path.exists(LOG)
    yield
    assert not os.path.exists(LOG)  # refused in both modes: never on the real disk


@pytest.mark.parametrize("mode", ["in-process", "subprocess"])
def test_an_escape_on_the_clean_run_is_one_finding_the_same_in_both_modes(mode):
    with pytest.raises(SandboxEscape) as caught:
        _explore(mode, "logs_outside")
    line = next(n for n, text in enumerate(open(user_agents.__file__), 1)
                if "with open(ESCAPE_LOG" in text and "workdir" in text)
    assert str(caught.value) == (
        f"{SCENARIO.path}: the clean run wrote outside its workdir: open for writing {LOG} "
        f"(at tests/user_agents.py:{line}); faultsim refused it (no_sandbox_escape). Keep "
        "every file the agent writes under env.workdir (temporary files too: "
        "tempfile.mkstemp(dir=env.workdir))")


@pytest.mark.parametrize("mode", ["in-process", "subprocess"])
def test_an_escape_on_resumed_runs_is_no_sandbox_escape_the_same_in_both_modes(mode):
    only = lambda p: p.id in RESUMES  # noqa: E731
    report = _explore(mode, "crash_report_outside", only=only)
    (run,) = report.runs
    assert sorted(p.id for p in run.explored) == sorted(RESUMES)  # both kills landed
    found = {v.kill_point.id: [(x.invariant, x.explanation) for x in v.violations]
             for v in run.verdicts}
    line = next(n for n, text in enumerate(open(user_agents.__file__), 1)
                if "with open(ESCAPE_LOG" in text and "best-effort" not in text
                and "workdir" not in text)
    escape = ("no_sandbox_escape", f"the agent wrote outside its workdir (refused): open "
              f"for writing {LOG} (at tests/user_agents.py:{line})")
    assert found == {p: [escape] for p in RESUMES}
    # the correct twin keeps the same crash report under env.workdir: clean
    assert _explore(mode, "crash_report_inside", only=only).ok


def test_a_call_site_outside_the_current_directory_keeps_its_leading_slash(tmp_path):
    agent = tmp_path / "far_agent.py"
    agent.write_text(
        "import user_agents\n\n\n"
        "class Far(user_agents.Agent):\n"
        "    def run(self):\n"
        f"        open({LOG!r}, 'w').close()\n"
        "        return super().run()\n\n\n"
        "def make_agent(env):\n"
        "    return Far(env)\n")
    with pytest.raises(SandboxEscape, match=f"\\(at {tmp_path}/far_agent.py:6\\)"):
        faultsim.explore(load_factory(str(agent)), SCENARIO, crashes=1)
    assert str(tmp_path).startswith("/") and not str(tmp_path).startswith(os.getcwd())


def test_site_packages_stay_readable_in_process_and_never_writable(tmp_path):
    """A framework imported inside run() reads its own data files (jsonschema lists its
    bundled schemas): the real files, passed through. Writing next to them is refused."""
    assert faultsim.explore(user_agents.imports_in_run, SCENARIO, crashes=1,
                            only=lambda p: p.id in RESUMES).ok
    import jsonschema

    target = os.path.join(os.path.dirname(jsonschema.__file__), "faultsim-cache.json")

    class Caches(user_agents.Agent):
        def run(self):
            import jsonschema  # noqa: F401

            with open(target, "w") as f:
                f.write("{}")
            return super().run()

    with pytest.raises(SandboxEscape, match="open for writing .*jsonschema/faultsim-cache"):
        faultsim.explore(Caches, SCENARIO, crashes=1)
    assert not os.path.exists(target)


@pytest.mark.parametrize("mode", ["in-process", "subprocess"])
def test_a_best_effort_byte_code_cache_outside_is_refused_but_no_escape(mode):
    assert _explore(mode, "caches_byte_code", only=lambda p: p.id in RESUMES).ok
    assert not os.path.exists(user_agents.BYTECODE_PROBE)


def test_a_module_first_imported_inside_run_under_pytest_is_no_escape(tmp_path, monkeypatch):
    """pytest rewrites the asserts of faultsim's own modules (a plugin's) and of modules
    registered for it, and writes that byte-code cache through `os`, which the fake file
    system patches: a faultsim module first imported inside run() (and so any run under
    pytest with byte-code caching on, the default) was refused as a sandbox escape."""
    name = f"faultsim_pyc_probe_{os.getpid()}"
    (tmp_path / f"{name}.py").write_text("def answer():\n    assert 41 < 42\n    return 42\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(sys, "dont_write_bytecode", False)  # the default, not the suite's
    monkeypatch.delitem(sys.modules, name, raising=False)
    pytest.register_assert_rewrite(name)

    class ImportsLazily(user_agents.Agent):
        def run(self):
            assert importlib.import_module(name).answer() == 42
            return super().run()

    assert faultsim.explore(ImportsLazily, SCENARIO, crashes=1,
                            only=lambda p: p.id in RESUMES).ok
    assert not (tmp_path / "__pycache__").exists()  # its cache was refused in the fake one


def test_imports_inside_run_work_in_subprocess_mode_too():
    assert explore_subprocess("user_agents:imports_in_run", SCENARIO,
                              only=lambda p: p.id in RESUMES).ok


def test_a_refused_clean_run_still_writes_every_report(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(ROOT)
    out = {k: tmp_path / f"report.{k}" for k in ("json", "xml", "md")}
    code = main(["run", str(DATA / "one_charge.toml"), "--agent", "user_agents:logs_outside",
                 "--json", str(out["json"]), "--junit", str(out["xml"]),
                 "--summary-md", str(out["md"])])
    line = capsys.readouterr().err.strip().splitlines()[0]
    assert code == 1 and line.startswith("faultsim: ") and "wrote outside its workdir" in line
    report = json.loads(out["json"].read_text())
    (refusal,) = report["refused"]
    assert report["ok"] is False and report["runs"] == []
    assert refusal["kind"] == "SandboxEscape" and refusal["category"] == "finding"
    assert line == "faultsim: " + refusal["message"]
    (case,) = ET.parse(out["xml"]).getroot().iter("testcase")
    assert case.get("name") == "clean run" and case.find("failure").get("type") == \
        "SandboxEscape"
    assert "## faultsim: refused (SandboxEscape)" in out["md"].read_text()
    # a scenario that passes writes no "refused"
    code = main(["run", str(DATA / "one_charge.toml"), "--agent", "user_agents:make_agent",
                 "--kill-point", RESUMES[0], "--json", str(out["json"])])
    assert code == 0 and "refused" not in json.loads(out["json"].read_text())
