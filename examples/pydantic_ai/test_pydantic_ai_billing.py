"""The pydantic-ai billing agent under faultsim, as its team's CI would run it: the agent
holds every invariant at every kill point; each planted mistake is caught as the invariant
it breaks."""
from pathlib import Path

import pytest

pytest.importorskip("pydantic_ai", reason="pydantic-ai is not installed "
                    "(pip install 'faultsim[pydantic-ai]')")

import faultsim  # noqa: E402

import billing_agent  # noqa: E402

SCENARIO = Path(__file__).with_name("scenario.toml")


def _explore(name: str):
    report = faultsim.explore(getattr(billing_agent, name), faultsim.load_scenario(SCENARIO),
                              agent_name=f"billing_agent:{name}")
    return report.runs[0]


@pytest.mark.faultsim(SCENARIO.name, agent=billing_agent.make_agent)
def test_the_agent_survives_every_crash(crash_safety):
    report = crash_safety.check()  # fails with a replayable counterexample otherwise
    verdicts = [v for run in report.runs for v in run.verdicts]
    assert len(verdicts) > 100
    landed = {v.kill_point.category for v in verdicts}
    # history.json and intents.json are declared: their saves are checkpoint kill points
    assert {"after-model-response", "in-tool", "after-effect", "after-tool-before-B",
            "checkpoint-mid-write", "checkpoint-rename", "mid-stream"} <= landed
    # a crash between the email's intent record and its send: a person decides
    assert sum(run.escalated for run in report.runs) > 0


# Subprocess mode: every incarnation a real process on a real directory, killed by SIGKILL
# (a kill that does not land is an error there, never a pass). The marker names the factory
# the test holds; the fork servers import it by the attribute it is kept in.
@pytest.mark.faultsim(SCENARIO.name, agent=billing_agent.make_agent, mode="subprocess")
def test_the_agent_survives_every_real_kill(crash_safety):
    [run] = crash_safety.check().runs
    assert run.mode == "subprocess" and run.agent == "billing_agent"
    assert len(run.verdicts) == len(run.explored) == len(run.kill_points) > 100
    landed = {v.kill_point.category for v in run.verdicts}
    assert {"after-model-response", "in-tool", "after-effect", "after-tool-before-B",
            "checkpoint-mid-write", "checkpoint-rename", "mid-stream"} <= landed
    assert run.escalated > 0


@pytest.mark.faultsim(SCENARIO.name, agent=billing_agent.make_agent_blind_email,
                      mode="subprocess", categories=("after-effect", "after-tool-before-B"))
def test_the_blind_email_is_caught_with_real_kills(crash_safety):
    [run] = crash_safety.explore().runs
    assert run.mode == "subprocess" and run.agent == "billing_agent:make_agent_blind_email"
    assert len(run.verdicts) == len(run.explored) > 0
    caught = [v for f in run.failures for v in f.violations
              if v.invariant == "effects_exactly_once"]
    assert caught and "applied 2 times" in caught[0].explanation


@pytest.mark.parametrize("name, invariant, why", [
    ("make_agent_blind_email", "effects_exactly_once", "applied 2 times"),
    ("make_agent_saves_at_end", "effects_exactly_once", "applied 2 times"),
    ("make_agent_saves_per_node", "one_step_repeated_per_crash", "2 steps were repeated"),
    ("make_agent_reprompts", "completes_or_escalates",
     "Cannot provide a new user prompt when the message history contains unprocessed"),
])
def test_each_planted_mistake_is_caught(name, invariant, why):
    run = _explore(name)
    caught = [v for f in run.failures for v in f.violations if v.invariant == invariant]
    assert caught and why in caught[0].explanation, [v.explanation for f in run.failures
                                                     for v in f.violations][:3]
