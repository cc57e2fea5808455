"""Several user turns with the Claude Agent SDK adapter (issue 35 item 2): the scenario's
follow-ups are given to the agent's coroutine as a third parameter, each to be sent once
into the same session; a restarted service learns from what is on disk (the session, read
through the SDK) which turn it is at. Proven on the bundled CLI, both ways, in the two
crash states a follow-up has: killed when the fake had answered the follow-up's request
(the session holds the follow-up, not its answer: "as written"), and the same kill with
the transcript's last batch lost (the session ends at the first turn's answer, the
follow-up not in it). The correct service passes both; one that replays its follow-ups
fails the first (and the second: it re-asks the answered turn), one that loses them fails
the second."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

pytest.importorskip("claude_agent_sdk")

from faultsim import load_scenario  # noqa: E402
from faultsim.adapters import claude_agent_sdk as cs  # noqa: E402
from faultsim.adapters.claude_agent_sdk.states import is_transcript  # noqa: E402
from faultsim.errors import UsageError  # noqa: E402

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import claude_followup_agent as agents  # noqa: E402

SCENARIO = load_scenario(HERE / "data" / "cs_followup.toml")
FOLLOW_UP = SCENARIO.script.follow_ups[0]
TARGET = ("model-request", "turn3", 1)  # the fake answered the follow-up's request


def _said(files: dict) -> tuple[str, str]:
    """The transcript's last conversation entry: (its type, its text)."""
    last = ("none", "")
    for path, data in files.items():
        if not is_transcript(path) or data is None:
            continue
        for line in data.split(b"\n")[:-1]:
            entry = json.loads(line)
            if entry.get("type") not in ("user", "assistant"):
                continue
            content = (entry.get("message") or {}).get("content")
            text = content if isinstance(content, str) else " ".join(
                str(b.get("text", "")) for b in content or [] if isinstance(b, dict))
            last = (entry["type"], text)
    return last


def _two_states(run, root: Path) -> dict:
    """`run`'s clean run, its crash at TARGET (the kill proven landed) and its verdicts in
    the follow-up's two crash states."""
    golden, points, clean = cs.golden_run(run, SCENARIO, root)
    assert golden.outcome.final_answer == SCENARIO.expected_final_answer, clean.error
    target = next(kp for kp in points if kp.key == TARGET)
    world = SCENARIO.build_world()
    cs.restore(root, {})
    crash = cs.incarnation(run, SCENARIO, world, root, target=target)
    assert crash.landed and crash.files is not None, crash.error  # the kill landed
    states = dict(cs.crash_states(crash.files))
    sent = states["as written"]
    assert _said(sent) == ("user", FOLLOW_UP)  # the follow-up in the session, unanswered
    answered = [n for n, files in states.items()
                if _said(files) == ("assistant", "Paid INV-7.")]
    assert answered, list(states)  # the session ending at the first turn's answer
    return {name: cs.resume(run, SCENARIO, golden, world, root, target, name, states[name])
            for name in ("as written", answered[0])} | {"answered": answered[0]}


@pytest.fixture(scope="module")
def verdicts(tmp_path_factory):
    why = cs.cli_unavailable()
    if why:
        pytest.skip(why)
    base = tmp_path_factory.mktemp("claude-follow-ups")
    return {name: _two_states(getattr(agents, name), base / name / "sandbox")
            for name in ("run_billing_turns", "run_replays_follow_ups",
                         "run_loses_follow_ups")}


def _rules(verdict) -> set[str]:
    return {v.invariant for v in verdict.violations}


def test_the_service_that_reads_its_session_passes_both_follow_up_states(verdicts):
    found = verdicts["run_billing_turns"]
    for name in ("as written", found["answered"]):
        assert found[name].ok, (name, found[name].violations)


def test_a_service_that_replays_its_follow_ups_fails_once_the_follow_up_was_sent(verdicts):
    """The follow-up goes in a second time after the resumed turn's answer. (Before it was
    sent this service fails too: it re-asks the turn the session had answered.)"""
    found = verdicts["run_replays_follow_ups"]
    for name in ("as written", found["answered"]):
        assert "one_step_repeated_per_crash" in _rules(found[name]), found[name].violations


def test_a_service_that_loses_its_follow_ups_fails_before_the_follow_up_was_sent(verdicts):
    found = verdicts["run_loses_follow_ups"]
    lost = found[found["answered"]]
    assert "effects lost" in cs.classify(lost), lost.violations
    assert found["as written"].ok, found["as written"].violations


def test_a_coroutine_that_cannot_take_follow_ups_is_refused_in_one_line(tmp_path):
    with pytest.raises(UsageError) as refused:
        cs.golden_run(agents.run_without_follow_ups, SCENARIO, tmp_path / "sandbox")
    said = str(refused.value)
    assert "\n" not in said and "cs_followup.toml" in said and "follow_ups" in said
