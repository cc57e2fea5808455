"""The conformance kit every backend of `faultsim.backends.BACKENDS` is tested against
(hypothesis's provider kit): each answers every call of the `Backend` Protocol, and for
every job either does it or refuses it in one line, before any run; a refused job's method
raises exactly that line as a usage error. A backend added to the table is tested here
without a line of its own."""
from __future__ import annotations

import inspect

import pytest

from conftest import DATA
from faultsim import backends
from faultsim.errors import UsageError
from faultsim.schedule import Crash
from faultsim.scenario import load_scenario
from faultsim.settings.options import ExploreOptions

# an agent each backend can be asked about, named as its users name it (nothing runs)
AGENTS = {"in-process": "reference_agent", "subprocess": "reference_agent",
          "command": "cmd:python3 agent.py",
          "claude-agent-sdk": "claude-agent-sdk:agent.py:agent"}
PROTOCOL = {name for name, value in vars(backends.Backend).items()
            if callable(value) and not name.startswith("_")}


@pytest.fixture(scope="module")
def tiny():
    return load_scenario(DATA / "tiny.toml")


def test_the_kit_knows_every_backend_of_the_table_and_every_job():
    assert set(AGENTS) == set(backends.BACKENDS)
    assert PROTOCOL == {"refuses", "explore", "survey", "replay", "items", "session",
                        "formats"}
    assert set(backends.JOBS) == PROTOCOL - {"refuses"}
    assert set(backends.FACTORY_JOBS) == {"items", "session", "formats"}


@pytest.mark.parametrize("name", sorted(backends.BACKENDS))
def test_a_backend_answers_every_call_of_the_protocol(name):
    backend = backends.backend(name)
    assert backend.name == name
    for call in PROTOCOL:
        ours = inspect.signature(getattr(backend, call))
        theirs = inspect.signature(getattr(backends.Backend, call))
        wanted = [p for p in list(theirs.parameters)[1:]
                  if theirs.parameters[p].default is inspect.Parameter.empty]
        takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD
                        for p in ours.parameters.values())
        missing = [p for p in wanted if p not in ours.parameters and not (
            takes_any and theirs.parameters[p].kind is inspect.Parameter.KEYWORD_ONLY)]
        assert missing == [], f"{name}.{call} lacks {missing}"


@pytest.mark.parametrize("job", backends.JOBS)
@pytest.mark.parametrize("name", sorted(backends.BACKENDS))
def test_every_job_is_done_or_refused_in_one_line(name, job, tiny):
    backend = backends.backend(name)
    why = backend.refuses(backends.Agent(AGENTS[name]), tiny, ExploreOptions(), job)
    assert why is None or (isinstance(why, str) and why.strip() and "\n" not in why), why


def _settings(job: str) -> dict:
    """The keywords of a factory job's call (`Backend.items`, `.session`, `.formats`)."""
    settings = dict(seed="0", timeout=5.0)
    if job != "formats":
        settings["crash_model"] = "process"
    if job == "items":
        settings["crashes"] = 1
    return settings


@pytest.mark.parametrize("job", sorted(backends.FACTORY_JOBS))
@pytest.mark.parametrize("name", sorted(backends.BACKENDS))
def test_a_refused_job_raises_its_one_line(name, job, tiny):
    backend = backends.backend(name)
    agent = backends.Agent(AGENTS[name])
    why = backend.refuses(agent, tiny, ExploreOptions(), job)
    settings = _settings(job)
    if why is None:
        assert name == "in-process"  # the only backend that runs a factory in this process
        return
    with pytest.raises(UsageError) as raised:
        getattr(backend, job)(agent, tiny, **settings)
    assert str(raised.value) == why


def test_items_and_sessions_of_a_python_factory_run_in_this_process(tiny):
    from reference_agent import make_agent

    items = backends.items(make_agent, tiny, crash_model="process", crashes=1, seed="0",
                           timeout=5.0)
    assert type(items).__module__ == "faultsim.inprocess.pointwise"
    with backends.session(make_agent, str(tiny.path), crash_model="process", seed="0",
                          timeout=5.0) as session:
        middle = session.kill_points[len(session.kill_points) // 2]
        result = session.run([Crash(middle)])
    assert result.verdict.kill_point == middle and result.verdict.ok


def test_the_formats_sandbox_of_a_python_factory_runs_in_this_process(tiny):
    from reference_agent import make_agent

    sandbox = backends.formats(make_agent, tiny, seed="0", timeout=5.0, name="ref")
    assert type(sandbox).__module__ == "faultsim.inprocess.formats_job"
    with sandbox:
        golden = sandbox.golden()
        taken = []
        assert sandbox.record(None, lambda point, files, world: taken.append(point)) is None
    # the recording run handed over the state at every kill point of the clean run
    assert [p.index for p in taken] == [p.index for p in golden.kill_points() if p.index > 0]


@pytest.mark.parametrize("spec", ["cmd:python3 agent.py", "claude-agent-sdk:agent.py:agent"])
def test_a_prefixed_agent_is_refused_the_factory_jobs_by_its_own_backend(spec, tiny):
    for job in sorted(backends.FACTORY_JOBS):
        with pytest.raises(UsageError, match="in-process"):
            getattr(backends, job)(spec, tiny, **_settings(job))
