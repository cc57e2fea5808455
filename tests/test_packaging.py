"""The wheel: what `pip install faultsim` gets. It carries the bundled scenarios and the
reference agent under faultsim's namespace (no top-level `reference_agent` in users'
site-packages), `py.typed`, and installed outside this repository `faultsim run` with no
arguments runs the bundled scenarios on the bundled agent and says so.

Offline: the wheel is built with --no-build-isolation (setuptools >= 70.1, from the `test`
extra) from a copy of the sources, so the repository gets no build/ folder."""
from __future__ import annotations

import email
import os
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    src = tmp_path_factory.mktemp("src")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    for name in ("faultsim", "reference_agent", "scenarios"):
        shutil.copytree(ROOT / name, src / name,
                        ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    out = tmp_path_factory.mktemp("wheel")
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", str(src), "--no-deps",
                        "--no-index", "--no-build-isolation", "-q", "-w", str(out)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, ("building the wheel failed (it needs setuptools >= 70.1: "
                               "pip install -e '.[test]'):\n" + r.stderr[-2000:])
    [built] = out.glob("faultsim-*.whl")
    return built


def test_the_wheel_carries_the_scenarios_and_the_agent_under_faultsim_only(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    tops = {n.split("/")[0] for n in names}
    assert tops == {"faultsim", next(t for t in tops if t.endswith(".dist-info"))}
    assert not any(n.startswith("reference_agent/") for n in names)
    # every scenario of the repository, at the same relative path, and the graphs they name
    scenarios = {str(p.relative_to(ROOT / "scenarios"))
                 for p in (ROOT / "scenarios").rglob("*") if p.suffix in (".toml", ".py")}
    assert "refunds.toml" in scenarios and "langgraph/graphs.py" in scenarios
    shipped = {n[len("faultsim/scenarios/"):] for n in names
               if n.startswith("faultsim/scenarios/")}
    assert shipped == scenarios
    agent = {n[len("faultsim/reference_agent/"):] for n in names
             if n.startswith("faultsim/reference_agent/")}
    assert agent == {str(p.relative_to(ROOT / "reference_agent"))
                     for p in (ROOT / "reference_agent").rglob("*.py")}
    assert "faultsim/py.typed" in names and "faultsim/scenario.schema.json" in names
    assert {"faultsim/reports/html_report.js", "faultsim/reports/html_report.css"} <= set(names)  # inlined
    # pyproject.toml lists faultsim's packages by hand: none may be left out
    for folder in (ROOT / "faultsim").rglob("*"):
        if folder.is_dir() and any(folder.glob("*.py")):
            rel = folder.relative_to(ROOT).as_posix()
            assert any(n.startswith(rel + "/") for n in names), f"{rel} is not in the wheel"


def test_the_wheel_metadata(wheel):
    with zipfile.ZipFile(wheel) as z:
        meta = email.message_from_bytes(
            z.read(next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))))
    assert "Framework :: Pytest" in meta.get_all("Classifier")
    requires = meta.get_all("Requires-Dist")
    # the test extra names the other extras instead of repeating their pins
    assert any(r.startswith("faultsim[") and "langgraph" in r and "redis" in r
               and 'extra == "test"' in r for r in requires), requires
    assert not any(r.startswith("langgraph") and 'extra == "test"' in r for r in requires)


def test_installed_outside_the_repository_run_defaults_to_the_bundled_scenarios(
        wheel, tmp_path):
    target, here = tmp_path / "site", tmp_path / "empty"
    here.mkdir()
    r = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps",
                        "--no-index", "--target", str(target), str(wheel)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    # only the installed copy and this venv's dependencies: not the repository
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAULTSIM_")}
    env["PYTHONPATH"] = str(target)

    def faultsim(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "faultsim", *args], cwd=here, env=env,
                              capture_output=True, text=True, timeout=600)

    bundled = target / "faultsim" / "scenarios"
    said = ("faultsim: no agent or scenarios configured here: {} the bundled scenarios "
            f"{bundled} on the bundled reference agent faultsim.reference_agent")
    listed = faultsim("list")
    assert listed.returncode == 0, listed.stderr[-2000:]
    assert listed.stderr.splitlines()[0] == said.format("listing")
    for toml in sorted(bundled.glob("*.toml")):
        assert f"{toml.stem}  {toml}" in listed.stdout
    # a run, kept small: one crash, process model, a thin shard of each scenario's points
    ran = faultsim("run", "--crashes", "1", "--crash-model", "process", "--shard", "1/100",
                   "--workers", "1", "--json", "report.json")
    assert ran.returncode == 0, ran.stdout[-2000:] + ran.stderr[-2000:]
    assert ran.stderr.splitlines()[0] == said.format("running")
    import json

    runs = json.loads((here / "report.json").read_text())["runs"]
    assert {run["scenario"] for run in runs} == {t.stem for t in bundled.glob("*.toml")}
    assert {run["agent"] for run in runs} == {"faultsim.reference_agent"}
    # the mutants work under faultsim's name too (their imports are relative)
    mutants = subprocess.run(
        [sys.executable, "-c", "import importlib, faultsim.reference_agent.mutants as m\n"
         "for n in m.NAMES + m.DOUBLE_CRASH_NAMES + m.STORE_NAMES + "
         "m.STORE_DOUBLE_CRASH_NAMES:\n"
         "    importlib.import_module('faultsim.reference_agent.mutants.' + n)"],
        cwd=here, env=env, capture_output=True, text=True, timeout=120)
    assert mutants.returncode == 0, mutants.stderr[-2000:]


def test_no_two_importable_test_modules_share_a_name():
    """pytest puts each examples/ folder and tests/ on one sys.path: two agent modules of
    the same name (two examples' billing_agent.py) make one folder's tests import the
    other's. Scripts the tests only run as subprocesses (findings.py) may repeat."""
    from collections import Counter
    root = Path(__file__).resolve().parent.parent
    names = Counter(p.name for d in ("examples", "tests") for p in (root / d).rglob("*.py")
                    if p.name not in ("findings.py", "__init__.py", "conftest.py"))
    assert not [n for n, c in names.items() if c > 1]


def test_the_classifiers_name_the_versions_ci_tests():
    """A version is claimed (classifier, README) exactly when CI tests it: the main suite on
    the oldest Python allowed (`requires-python`), the version-sensitive part on each CPython
    .ci/interpreters builds."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    claimed = {c.rsplit(" :: ", 1)[1] for c in project["classifiers"]
               if re.fullmatch(r"Programming Language :: Python :: 3\.\d+", c)}
    floor = re.fullmatch(r">=(3\.\d+)", project["requires-python"])[1]
    built = re.findall(r"^(3\.\d+) python3\.\d+ \w+", (ROOT / ".ci/interpreters").read_text(),
                       re.MULTILINE)
    assert built and claimed == {floor, *built}
    readme = (ROOT / "README.md").read_text()
    tested = re.search(r"Tested on CPython ((?:3\.\d+(?:, | and )?)+)", readme)
    assert tested and set(re.findall(r"3\.\d+", tested[1])) == claimed
