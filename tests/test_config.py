"""A user's project: `faultsim run` with no arguments runs the scenarios and agent its
pyproject.toml names ([tool.faultsim]); FAULTSIM_* variables override it; the current
directory is importable; no bundled agent is assumed outside this repository."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.test_effects import SCENARIO

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def project(tmp_path):
    shutil.copy(ROOT / "tests" / "effect_agent.py", tmp_path / "billing_agent.py")
    (tmp_path / "checks").mkdir()
    (tmp_path / "checks" / "billing.toml").write_text(SCENARIO)
    (tmp_path / "pyproject.toml").write_text(
        '[project]\nname = "billing"\n\n[tool.faultsim]\nagent = "billing_agent"\n'
        'scenarios = ["checks"]\ncrashes = 1\n')
    return tmp_path


def faultsim(cwd, *args, env=None):
    environ = {k: v for k, v in os.environ.items() if not k.startswith("FAULTSIM_")}
    environ.update(env or {}, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "faultsim", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=600, env=environ)


def test_run_with_no_arguments_runs_the_projects_scenarios_with_its_agent(project):
    r = faultsim(project, "run", "--json", "out.json", "--workers", "1")
    assert r.returncode == 0, r.stderr[-1500:]
    data = json.loads((project / "out.json").read_text())
    [run] = data["runs"]
    assert run["agent"] == "billing_agent" and run["scenario"] == "billing_effects"
    assert run["crashes"] == 1  # [tool.faultsim] crashes = 1, over the scenario's profile


def test_the_environment_overrides_the_project(project):
    (project / "other_agent.py").write_text(
        "from billing_agent import make_agent_new_key_each_run as make_agent\n")
    r = faultsim(project, "run", "--workers", "1", env={"FAULTSIM_AGENT": "other_agent"})
    assert r.returncode == 1, r.stderr[-1500:]  # the planted mistake, caught
    assert "effects_exactly_once" in r.stdout
    # the printed rerun command works verbatim from the same folder
    rerun = next(line.strip()[len("or: "):] for line in r.stdout.splitlines()
                 if line.strip().startswith("or: faultsim run"))
    again = subprocess.run(rerun.replace("faultsim run", f"{sys.executable} -m faultsim run",
                                         1), shell=True, cwd=project, capture_output=True,
                           text=True, timeout=600,
                           env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert again.returncode == 1, again.stderr[-1500:]
    # and so does the replay token, though [tool.faultsim] names another agent
    token = next(line.split("faultsim replay ", 1)[1].strip() for line in r.stdout.splitlines()
                 if "faultsim replay " in line)
    replayed = faultsim(project, "replay", token)
    assert replayed.returncode == 1, replayed.stdout[-800:] + replayed.stderr[-800:]


def test_settings_that_cannot_work_name_file_and_key(project):
    (project / "pyproject.toml").write_text('[tool.faultsim]\nagent = "billing_agent"\n'
                                            'crashez = 2\n')
    r = faultsim(project, "list")
    assert r.returncode == 2
    assert "pyproject.toml: [tool.faultsim] crashez: unknown setting" in r.stderr
    (project / "pyproject.toml").write_text('[tool.faultsim]\nagent = "billing_agent"\n')
    r = faultsim(project, "list", env={"FAULTSIM_TIMEOUT": "soon"})
    assert r.returncode == 2 and "FAULTSIM_TIMEOUT='soon': expected a number" in r.stderr


def test_outside_this_repository_there_is_no_default_agent(tmp_path):
    (tmp_path / "billing.toml").write_text(SCENARIO)
    r = faultsim(tmp_path, "list", "billing.toml")
    assert r.returncode == 2
    assert r.stderr.strip() == ("faultsim: error: no agent to run: give --agent "
                                "MODULE[:ATTR] (or FILE.py[:ATTR]), set FAULTSIM_AGENT, or "
                                "agent = \"...\" under [tool.faultsim] in pyproject.toml")
    shutil.copy(ROOT / "tests" / "effect_agent.py", tmp_path / "billing_agent.py")
    r = faultsim(tmp_path, "list", "billing.toml", "--agent", "billing_agent")
    assert r.returncode == 0, r.stderr  # a module in the current directory is importable


def test_version_and_python_dash_m(tmp_path):
    from faultsim import __version__

    r = faultsim(tmp_path, "--version")
    assert r.returncode == 0 and r.stdout.strip() == f"faultsim {__version__}"


BROKEN = '''
import json


def read_config(path):
    print("loading settings from", path)
    with open(path) as f:
        return json.load(f)


class Agent:
    def __init__(self, env):
        self.env = env

    def run(self):
        settings = read_config("agent-settings.json")
        return settings["answer"]


def make_agent(env):
    return Agent(env)
'''


@pytest.mark.parametrize("mode", ["in-process", "subprocess"])
def test_an_agent_that_fails_shows_its_own_traceback_and_output(tmp_path, mode):
    (tmp_path / "broken_agent.py").write_text(BROKEN)
    (tmp_path / "billing.toml").write_text(SCENARIO)
    r = faultsim(tmp_path, "run", "billing.toml", "--agent", "broken_agent", "--mode", mode,
                 "--workers", "1")
    assert r.returncode == 1, r.stderr
    # a slow clean run (a loaded machine: subprocess mode's starts) may be preceded by the
    # run's heartbeat ("still working: clean runs, 10s in"); the error is the first line else
    lines = [line for line in r.stderr.splitlines() if ": still working: " not in line]
    assert lines[0].endswith("the agent fails without any crash: FileNotFoundError: "
                             "[Errno 2] No such file or directory: 'agent-settings.json'")
    text = r.stderr
    assert "Traceback (most recent call last)" in text
    assert "broken_agent.py\", line 16, in run" in text  # the agent's frames
    assert "in read_config" in text
    assert "faultsim/inprocess" not in text and "faultsim/real" not in text  # not ours
    assert "----- the agent's output -----\nloading settings from agent-settings.json" in text


def test_a_scripted_tool_the_agent_does_not_offer_stops_the_run_naming_it(project):
    # a lenient agent would answer the unknown tool with an error result and pass
    text = SCENARIO.replace('name = "note_customer"', 'name = "refund_card"')
    (project / "checks" / "billing.toml").write_text(text)
    r = faultsim(project, "run", "--workers", "1")
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip().startswith("faultsim: error: checks/billing.toml: script 's', "
                                       "turn 2: the scripted turn calls 'refund_card', a tool "
                                       "the request does not offer")


def test_a_replay_token_refuses_a_changed_scenario(project):
    r = faultsim(project, "run", "--workers", "1", env={"FAULTSIM_AGENT":
                                                        "billing_agent:make_agent_new_key_each_run"})
    assert r.returncode == 1
    token = next(line.split("faultsim replay ", 1)[1].strip() for line in r.stdout.splitlines()
                 if "faultsim replay " in line)
    from faultsim import __version__
    from faultsim.token import ReplayToken
    decoded = ReplayToken.decode(token)
    assert decoded.version == __version__ and len(decoded.fingerprint) == 12
    path = project / "checks" / "billing.toml"
    path.write_text(path.read_text().replace("charge 700", "charge 800"))  # the task edited
    again = faultsim(project, "replay", token)
    assert again.returncode == 2
    assert again.stderr.strip() == (
        f"faultsim: error: checks/billing.toml: the scenario changed since this token was "
        f"made (by faultsim {__version__}): it would replay other kill points; rerun "
        "faultsim run for fresh tokens")


def test_the_projects_agent_is_found_from_any_subfolder(project):
    """An agent module [tool.faultsim] names is looked up from that pyproject.toml's
    folder (as its scenarios are), not only from the current directory: `faultsim list`
    in examples/openai_agents/ of this repository said "no module named
    'reference_agent'"."""
    (project / "examples").mkdir()
    r = faultsim(project / "examples", "list")
    assert r.returncode == 0, r.stderr[-1500:]
    assert "billing_effects" in r.stdout and "no module named" not in r.stderr


def test_the_projects_agent_leaves_a_langgraph_scenario_to_its_graph_and_agent_wins(
        tmp_path, monkeypatch):
    """[tool.faultsim] agent (and FAULTSIM_AGENT) is the project's agent for its plain
    scenarios: a scenario with a [langgraph] table still runs its graph under them. An
    --agent typed on the command line wins over the table."""
    from faultsim.cli.args import agents_for, project_defaults
    from faultsim.cli.parser import build_parser
    from faultsim.scenario import load_scenario

    graph = tmp_path / "graph.toml"
    graph.write_text((ROOT / "tests" / "data" / "lg_keyed.toml").read_text().replace(
        "../../scenarios/langgraph/graphs.py", str(ROOT / "scenarios/langgraph/graphs.py")))
    (tmp_path / "pyproject.toml").write_text('[tool.faultsim]\nagent = "billing_agent"\n')
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))  # project_defaults appends the root
    for name in [k for k in os.environ if k.startswith("FAULTSIM_")]:
        monkeypatch.delenv(name)
    sc, modes = load_scenario(graph), ["sync", "async", "exit"]
    graph_runs = [f"langgraph:{m}" for m in modes]

    def agents(*argv):
        ns = build_parser().parse_args(["run", str(graph), *argv])
        project_defaults(ns)
        return agents_for(sc, ns, modes)

    assert agents() == graph_runs  # [tool.faultsim] agent: the graph's scenario runs the graph
    assert agents("--agent", "other_agent") == ["other_agent"]
    assert agents("--agent", "langgraph:async") == ["langgraph:async"]
    monkeypatch.setenv("FAULTSIM_AGENT", "env_agent")
    assert agents() == graph_runs
    assert agents("--agent", "other_agent") == ["other_agent"]
