"""The scripted model beyond one request and one answer: follow-up user turns, and what
it does when a tool's result comes back as an error (retry, go on, give up)."""
from __future__ import annotations

import pytest

from faultsim.model import FakeClaude, Script, ToolCall, Turn
from faultsim.model.script import ERROR_RETRIES
from test_fake_model import MODEL, TOOLS, TASK, assistant_of, ask, user

PAY = ToolCall("create_ticket", {"title": "a"})


def two_part(**on_error) -> Script:
    """A tool turn, a final answer the user follows up on, another tool turn, a final."""
    return Script(task=TASK, turns=(
        Turn(tool_calls=(PAY,), **on_error),
        Turn(final="Ticket made.", follow_up="Now email the customer."),
        Turn(tool_calls=(ToolCall("send_email", {"to": "x@example.com"}),)),
        Turn(final="Emailed."),
    ))


def result(message, text="ok", **extra) -> dict:
    return {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": b.id, "content": text, **extra}
        for b in message.content if b.type == "tool_use"]}


def test_a_follow_up_opens_the_next_part_of_the_script_and_a_repeat_of_it_is_a_repeat():
    fake = FakeClaude(two_part())
    client = fake.client()
    messages = [user()]
    first = ask(client, messages)
    messages += [assistant_of(first), result(first)]
    done = ask(client, messages)
    assert done.content[0].text == "Ticket made."
    messages += [assistant_of(done), user("Now email the customer.")]
    email = ask(client, messages)
    assert [b.name for b in email.content if b.type == "tool_use"] == ["send_email"]
    messages += [assistant_of(email), result(email)]
    assert ask(client, messages).content[0].text == "Emailed."
    # the same follow-up conversation again is a re-asked turn, with fresh ids
    again = ask(client, messages[:-2])
    assert [b.id for b in again.content if b.type == "tool_use"] == ["toolu_s_03_1_r2"]
    assert [(q.position, q.repeat) for q in fake.requests] == [(0, 0), (1, 0), (2, 0),
                                                                (3, 0), (2, 1)]


def test_a_user_message_that_is_not_the_follow_up_gets_the_final_answer_again():
    fake = FakeClaude(two_part())
    client = fake.client()
    first = ask(client, [user()])
    messages = [user(), assistant_of(first), result(first)]
    done = ask(client, messages)
    messages += [assistant_of(done), user("Something nobody scripted.")]
    # the fake places it at the final turn again: a repeat, not the next part
    assert ask(client, messages).content[0].text == "Ticket made."
    assert fake.requests[-1].repeat == 1


@pytest.mark.parametrize("text, is_error", [("Tool was interrupted.", True),
                                            ("Tool was interrupted.", False)])
def test_an_interrupted_call_is_called_again_as_a_real_model_would(text, is_error):
    fake = FakeClaude(two_part())
    client = fake.client()
    first = ask(client, [user()])
    messages = [user(), assistant_of(first),
                result(first, text, **({"is_error": True} if is_error else {}))]
    retry = ask(client, messages)
    assert [(b.name, b.id) for b in retry.content] == [("create_ticket", "toolu_s_01_1_r2")]
    assert retry.stop_reason == "tool_use" and fake.requests[-1].reaction == "retry"
    assert fake.requests[-1].repeat == 0  # a new turn of the model's, not a re-ask
    messages += [assistant_of(retry), result(retry)]
    assert ask(client, messages).content[0].text == "Ticket made."


def test_other_errors_are_read_and_the_script_goes_on_unless_the_turn_says_retry():
    for on_error, expected in ((None, "Ticket made."), ("retry", "create_ticket")):
        fake = FakeClaude(two_part(**({"on_error": on_error} if on_error else {})))
        first = ask(fake.client(), [user()])
        answer = ask(fake.client(), [user(), assistant_of(first),
                                     result(first, "no such queue", is_error=True)])
        got = answer.content[0].text if answer.stop_reason == "end_turn" else \
            answer.content[0].name
        assert got == expected


def test_retries_stop_after_the_limit_and_the_script_goes_on():
    fake = FakeClaude(two_part())
    client = fake.client()
    reply = ask(client, [user()])
    messages = [user()]
    for _ in range(ERROR_RETRIES):
        messages += [assistant_of(reply), result(reply, "Tool was interrupted.")]
        reply = ask(client, messages)
        assert reply.stop_reason == "tool_use"
    messages += [assistant_of(reply), result(reply, "Tool was interrupted.")]
    assert ask(client, messages).content[0].text == "Ticket made."
    assert [q.reaction for q in fake.requests] == [None, "retry", "retry", None]


def test_give_up_ends_the_conversation_with_the_turns_text_and_continue_never_retries():
    fake = FakeClaude(two_part(on_error="give_up", on_error_final="I could not do it."))
    first = ask(fake.client(), [user()])
    bad = [user(), assistant_of(first), result(first, "Tool was interrupted.")]
    assert ask(fake.client(), bad).content[0].text == "I could not do it."
    assert fake.requests[-1].reaction == "give_up"
    fake = FakeClaude(two_part(on_error="continue"))
    first = ask(fake.client(), [user()])
    bad = [user(), assistant_of(first), result(first, "Tool was interrupted.")]
    assert ask(fake.client(), bad).content[0].text == "Ticket made."


def test_the_reaction_streams_like_any_answer():
    fake = FakeClaude(two_part())
    client = fake.client()
    first = ask(client, [user()])
    messages = [user(), assistant_of(first), result(first, "Tool was interrupted.")]
    with client.messages.stream(model=MODEL, max_tokens=512, messages=messages,
                                tools=TOOLS) as stream:
        retry = stream.get_final_message()
    assert [b.id for b in retry.content if b.type == "tool_use"] == ["toolu_s_01_1_r2"]


def test_bad_reaction_settings_are_refused():
    with pytest.raises(ValueError, match="give_up"):
        Turn(tool_calls=(PAY,), on_error="give_up")
    with pytest.raises(ValueError, match="unknown on_error"):
        Turn(tool_calls=(PAY,), on_error="panic")
    with pytest.raises(ValueError, match="only a final turn"):
        Turn(tool_calls=(PAY,), follow_up="more")
