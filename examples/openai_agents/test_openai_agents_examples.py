"""The OpenAI Agents SDK examples under faultsim, as their team's CI would run them: each
agent holds every invariant at every kill point; each planted mistake is caught as the
invariant it breaks."""
from pathlib import Path

import pytest

pytest.importorskip("agents", reason="openai-agents is not installed "
                    "(pip install 'faultsim[openai-agents]')")

import faultsim  # noqa: E402

import approval_agent  # noqa: E402

HERE = Path(__file__).resolve().parent


@pytest.mark.faultsim("scenario.toml", agent="session_agent:make_agent")
def test_the_session_agent_survives_every_crash(crash_safety):
    report = crash_safety.check()  # fails with a replayable counterexample otherwise
    [run] = report.runs
    assert run.mode == "subprocess" and len(run.verdicts) > 40
    landed = {v.kill_point.category for v in run.verdicts}
    # SQLite's statements and commits (store.db), the model's answers, the tools, the effects
    assert {"after-model-response", "in-tool", "after-effect", "after-tool-before-B",
            "checkpoint-commit", "checkpoint-mid-write", "checkpoint-rename"} <= landed
    # a crash between the email's intent record and its send: a person decides
    assert run.escalated > 0


# the planted mistakes: the kill points around the effects are enough to show each caught
AROUND_EFFECTS = ("after-effect", "after-tool-before-B")


@pytest.mark.faultsim("scenario.toml", agent="session_agent:make_agent_blind_email",
                      categories=AROUND_EFFECTS)
def test_the_blind_email_is_caught(crash_safety):
    broken = _broken(crash_safety.explore())
    assert "effects_exactly_once" in broken, broken  # the email, sent twice


@pytest.mark.faultsim("scenario.toml", agent="session_agent:make_agent_without_lookup",
                      categories=AROUND_EFFECTS)
def test_the_payment_without_lookup_repeats_only_the_step_in_flight(crash_safety):
    # the SDK saves a turn after its tools: the re-asked turn pays again, and the provider
    # recognises the key: one repeated step, the turn in flight with its re-submission
    # (docs/reference/invariants.md, "What counts as repeated"); the approval agent's
    # resume, which re-runs the tool without re-asking, is still caught (below)
    report = crash_safety.explore()
    assert _broken(report) == set()
    assert any(v.kill_point.category == "after-effect" for run in report.runs
               for v in run.verdicts)  # the kills right after the payment landed


def _broken(report) -> set:
    return {v.invariant for run in report.runs for f in run.failures for v in f.violations}


@pytest.mark.faultsim("approval.toml", agent=approval_agent.make_agent)
def test_the_approval_pause_survives_every_crash(crash_safety):
    report = crash_safety.check()
    verdicts = [v for run in report.runs for v in run.verdicts]
    landed = {v.kill_point.category for v in verdicts}
    # state.json's writes (the pause, the decision, the end), the refund, the model
    assert {"checkpoint-mid-write", "checkpoint-rename", "in-tool", "after-effect",
            "after-model-response"} <= landed
    # crashes after the approved refund ran, resumed from the approved state
    assert sum(1 for v in verdicts if v.kill_point.category == "after-effect") >= 1


@pytest.mark.parametrize("name, invariant, why", [
    ("make_agent_fresh_key", "effects_exactly_once", "applied 2 times"),
    ("make_agent_without_lookup", "one_step_repeated_per_crash", "2 steps were repeated"),
])
def test_each_planted_approval_mistake_is_caught(name, invariant, why):
    report = faultsim.explore(getattr(approval_agent, name),
                              faultsim.load_scenario(HERE / "approval.toml"),
                              agent_name=f"approval_agent:{name}")
    caught = [v for f in report.runs[0].failures for v in f.violations
              if v.invariant == invariant]
    assert caught and why in caught[0].explanation
