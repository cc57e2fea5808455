"""Every example under examples/ in both modes: the subprocess mode (real processes, real
SIGKILL) gives the same verdict as the in-process mode at every crash state of the process
model, for the example's agent and, where one crash shows it, its planted mistake.

Both modes find the same kill points on these agents (the test checks it: the same ids,
in the same order), so verdicts are compared kill point by kill point. An append-only log
(`jsonl_transcript`, and a user's thinking agent in tests/thinking_jsonl_agent.py) is the
case that once failed: subprocess mode refused the agent as non-deterministic, its crash
driver's course parting from the clean run at the first append after a torn write.

The examples that cannot be compared say why (a skip with its reason); a scenario file
added under examples/ and listed nowhere here fails `test_every_example_is_listed`.
Sharded where the example is long: the verdicts compared are those of one shard in both
modes (CI time), the two append-only logs whole.
"""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

import faultsim
from faultsim.settings.loading import load_factory
from faultsim.real.explore import explore_subprocess

from conftest import ROOT
from helpers import by_point, part_of, same_points

EXAMPLES = ROOT / "examples"
TESTS = Path(__file__).resolve().parent

# scenario -> what runs it: [(agent spec, shard, planted mistake caught by one crash?)]
COMPARED = {
    "jsonl_transcript/scenario.toml": [("jsonl_transcript/agent.py:make_agent", None, False)],
    "receipts/scenario.toml": [("receipts/receipts_agent.py:make_agent", (1, 4), False),
                               ("receipts/receipts_agent.py:make_agent_without_intents",
                                (2, 4), True)],
    "pydantic_ai/scenario.toml": [("pydantic_ai/billing_agent.py:make_agent", (1, 5), False),
                                  ("pydantic_ai/billing_agent.py:make_agent_blind_email",
                                   (2, 5), True)],
    "openai_agents/approval.toml": [("openai_agents/approval_agent.py:make_agent", (1, 5),
                                     False)],
}
NEEDS = {"pydantic_ai/scenario.toml": "pydantic_ai", "openai_agents/approval.toml": "agents"}
NOT_COMPARED = {
    "sqlite_notes/scenario.toml": "its store is SQLite: the in-process mode cannot see "
    "C-level I/O, so there is no in-process verdict to compare (its own test runs it in "
    "subprocess mode)",
    "openai_agents/scenario.toml": "its SQLiteSession keeps the conversation in SQLite: "
    "subprocess mode only, nothing in-process to compare (its own test runs it there)",
    "any_language/scenario.toml": "its agent is a script run as a command (the command "
    "backend): no Python factory for either mode (its own test sweeps it)",
    "javascript_agent/scenario.toml": "its agent is a Node program run as a command: there "
    "is no Python factory for either mode (its own test runs it against the wire services)",
    "claude_agent_sdk/scenario.toml": "its agent drives the bundled Claude Code CLI, a "
    "process of its own, through the adapter's own explore (minutes per sweep; "
    "tests/test_claude_agent_sdk.py)",
}
THINKING = TESTS / "data" / "thinking_jsonl.toml"
FOLLOW_UP = TESTS / "data" / "pydantic_followup.toml"


def _both_modes(spec: str, scenario_path: Path, shard) -> tuple[dict, dict, dict]:
    scenario = faultsim.load_scenario(scenario_path)
    stats: dict = {}
    real = explore_subprocess(spec, scenario, workers=2, stats=stats,
                              only=part_of(*shard) if shard else None)
    model = faultsim.explore(load_factory(spec), scenario, crash_model="process",
                             crashes=1, workers=2, only=same_points(real))
    (run,) = real.runs
    # every kill landed, as a SIGKILL the server saw, before any verdict counts
    assert stats["kills_landed"] == len(run.explored) == len(run.verdicts) > 10
    assert [p.id for p in run.kill_points] == [p.id for p in model.runs[0].kill_points]
    return by_point(real), by_point(model), stats


def test_every_example_is_listed():
    found = {str(p.relative_to(EXAMPLES)) for p in EXAMPLES.glob("*/*.toml")}
    assert found == set(COMPARED) | set(NOT_COMPARED)


def _cases():
    for name, agents in COMPARED.items():
        for spec, shard, caught in agents:
            yield pytest.param(name, spec, shard, caught, id=spec.split("/")[-1])
    for name, why in NOT_COMPARED.items():
        yield pytest.param(name, None, None, False, id=name,
                           marks=pytest.mark.skip(reason=f"{name}: {why}"))


@pytest.mark.parametrize("name, spec, shard, caught", list(_cases()))
def test_the_example_gets_the_same_verdicts_in_both_modes(name, spec, shard, caught):
    if name in NEEDS and importlib.util.find_spec(NEEDS[name]) is None:
        pytest.skip(f"{name}: {NEEDS[name]} is not installed")
    real, model, _ = _both_modes(str(EXAMPLES / spec), EXAMPLES / name, shard)
    assert real == model
    assert any(real.values()) == caught  # the mistake caught in both, the agent clean


@pytest.mark.parametrize("factory, caught", [("make_agent", False),
                                             ("make_agent_os_write", False),
                                             ("make_agent_drops_thinking", True)])
def test_a_thinking_agents_jsonl_conversation_in_both_modes(factory, caught):
    """A user's agent: each message (thinking blocks included) appended as a JSON line and
    fsynced, read back on restart, a torn last line cut off. Correct, it passes both modes
    at every kill point, torn appends included (and appending with os.write on an O_APPEND
    descriptor, on a shard); logging the replies without their thinking is caught in both
    at the same crash states."""
    real, model, stats = _both_modes(f"{TESTS / 'thinking_jsonl_agent.py'}:{factory}",
                                     THINKING, None if factory == "make_agent" else (1, 3))
    assert real == model
    torn = [k for k in real if "conversation.jsonl" in k and "@" in k]
    assert torn  # kills inside the appends landed, in both modes
    assert any(real.values()) == caught


@pytest.mark.parametrize("factory, failing", [("make_agent", 0),
                                              ("make_agent_replays_follow_ups", 65)])
def test_a_pydantic_ai_service_of_two_user_turns_in_both_modes(factory, failing):
    """tests/pydantic_followup_agent.py: an invoice paid, then the user's follow-up (send
    the receipt) in the same message history, every kill point of both user turns. The
    adapter finds the turn a restarted process is at from the history file it left on the
    real disk, as it does from the fake one: the same verdict at every crash state, the
    follow-up sent once; a chat loop that sends it again on each start is caught in both
    modes from the write that saved it on (docs/how-to/pydantic-ai.md's table)."""
    if importlib.util.find_spec("pydantic_ai") is None:
        pytest.skip("pydantic-ai is not installed")
    real, model, stats = _both_modes(f"{TESTS / 'pydantic_followup_agent.py'}:{factory}",
                                     FOLLOW_UP, None)
    assert real == model
    assert stats["kills_landed"] == len(real) >= 100  # the whole sweep, every kill landed
    assert sum(1 for broken in real.values() if broken) == failing
