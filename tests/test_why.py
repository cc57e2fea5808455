"""A duplicated effect that is the at-least-once window LangGraph documents, told apart from
one a finished task should not have had (faultsim.why), on hand-made traces."""
from __future__ import annotations

from faultsim.oracle import Violation
from faultsim.trace import Event
from faultsim.why import classify

DUP = [Violation.of("effects_exactly_once", "email twice", extra={'email.send({"to":"a"})': 1},
                    missing={})]


def trace(*kinds: tuple[str, str]) -> list[Event]:
    return [Event(n, kind, subject) for n, (kind, subject) in enumerate(kinds, 1)]


LANGGRAPH = trace(("mark.lg.put", "step 5"), ("mark.tool.start", "send_email"),
                  ("effect.applied", "email.send"), ("mark.lg.writes", "messages"),
                  ("mark.lg.tool.end", "send_email"), ("mark.lg.put", "step 6"))


def test_a_kill_while_the_tool_still_runs_is_the_documented_window():
    for kill in (3, 4):  # after the effect; after an unrelated save inside the tool
        kind, text = classify(LANGGRAPH, kill, DUP)
        assert kind == "by-design" and "#7417" in text and 'effect("email", key=' in text


def test_a_kill_after_the_tool_finished_and_before_the_next_save_is_an_ordering_bug():
    kind, text = classify(LANGGRAPH, 5, DUP)
    assert kind == "ordering" and "#8039" in text and "send_email had finished" in text


def test_no_reason_is_made_up():
    assert classify(LANGGRAPH, 6, DUP) is None  # saved after the tool: another story
    assert classify(LANGGRAPH, 3, [Violation.of("api_valid", "400")]) is None
    plain = trace(("mark.tool.start", "send_email"), ("effect.applied", "email.send"))
    assert classify(plain, 2, DUP) is None  # not a LangGraph run: nothing documented
    other = [Violation.of("effects_exactly_once", "x", extra={"pay.submit({})": 1}, missing={})]
    assert classify(LANGGRAPH, 3, other) is None  # the tool in flight applied another effect
