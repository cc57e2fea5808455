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


# -- in scenarios, end to end ---------------------------------------------------------------
SCENARIO = '''
task = "Pay INV-1."
expected_final_answer = "Paid INV-2 as well."
[checkpoint]
files = ["session.json"]
[fault_profile]
crashes = 1
[services.payments]
kind = "keyed"
[[turns]]
tool_calls = [{ name = "pay", input = { invoice = "INV-1" } }]
%s
[[turns]]
final = "Paid INV-1."
follow_up = "Now pay INV-2 too."
[[turns]]
tool_calls = [{ name = "pay", input = { invoice = "INV-2" } }]
%s
[[turns]]
final = "Paid INV-2 as well."
'''


def _scenario(tmp_path, on_error=""):
    import tomllib

    from faultsim.scenario import parse_scenario

    text = SCENARIO % (on_error, on_error)
    return parse_scenario(tomllib.loads(text), tmp_path / "pay_twice.toml")


def test_a_scenario_of_two_user_turns_loads_and_hands_the_agent_its_follow_up(tmp_path):
    sc = _scenario(tmp_path)
    assert sc.script.follow_ups == ("Now pay INV-2 too.",)
    assert [t.is_final for t in sc.script.turns] == [False, True, False, True]


def test_an_interrupted_call_is_retried_so_a_session_agent_resumes_cleanly(tmp_path):
    """Strands #859's fix writes "Tool was interrupted." for a call a crash cut short: the
    real model calls it again, and so does the fake (a keyed payment pays once). Told to
    read the error and go on (`on_error = "continue"`, the fake before), the same agent
    "completes" without ever paying: the false finding the scripted model used to give."""
    import faultsim
    import followup_agent

    report = faultsim.explore(followup_agent.make_agent, _scenario(tmp_path), crashes=1,
                              crash_model="process")
    run = report.runs[0]
    assert len(run.verdicts) == len(run.kill_points)  # one landed kill per point
    assert {p.category for p in run.kill_points} >= {"in-tool", "after-effect"}
    assert run.ok, [v.violations for v in run.failures][:2]
    naive = faultsim.explore(followup_agent.make_agent,
                             _scenario(tmp_path, 'on_error = "continue"'), crashes=1,
                             crash_model="process").runs[0]
    found = {v.invariant for f in naive.failures for v in f.violations}
    assert "effects_exactly_once" in found, found
    assert any("never applied" in v.explanation for f in naive.failures for v in f.violations)


@pytest.mark.parametrize("table, key, message", [
    ('final = "a"\nfollow_up = "b"', "turns[1].follow_up", "a follow_up only before the last"),
    ('tool_calls = [{ name = "pay" }]\nfollow_up = "b"', "turns[1].follow_up",
     "a follow_up only on a final turn"),
    ('final = "a"\non_error = "retry"', "turns[1].on_error", "on_error only on a turn of tool"),
    ('tool_calls = [{ name = "pay" }]\non_error = "give_up"', "turns[1].on_error_final",
     'on_error = "give_up" with on_error_final'),
    ('tool_calls = [{ name = "pay" }]\non_error = "panic"', "turns[1].on_error",
     "one of retry, continue, give_up"),
])
def test_the_loader_and_validate_name_the_same_mistake(tmp_path, table, key, message):
    from faultsim.scenario import ScenarioError, load_scenario
    from faultsim.scenario.validate import validate_file

    path = tmp_path / "bad.toml"
    path.write_text('task = "t"\nexpected_final_answer = "a"\n[[turns]]\n'
                    'tool_calls = [{ name = "pay" }]\n[[turns]]\n' + table +
                    ('\n[[turns]]\nfinal = "a"\n' if "tool_calls" in table else "\n"))
    with pytest.raises(ScenarioError) as err:
        load_scenario(path)
    assert f": {key}: expected " in str(err.value) and message in str(err.value)
    found = [str(p) for p in validate_file(path)]
    assert any(f": {key}: expected " in p and message in p for p in found), found


def test_the_one_step_rule_counts_only_the_re_asks_beyond_the_clean_runs_own():
    """A clean run that asks a turn twice by design (here turn 2) repeats it in every crash
    run: only what a crash adds counts against it."""
    from faultsim.judge.oracle import Golden, reasked_turns

    fake = FakeClaude(two_part())
    client = fake.client()
    first = ask(client, [user()])
    messages = [user(), assistant_of(first), result(first)]
    ask(client, messages)
    ask(client, messages)  # the clean run's own repeat of turn 2
    clean = list(fake.requests)
    golden = Golden(None, None, {}, 0, [], answered={("s", 1): 1})
    assert reasked_turns(golden, clean) == 0
    assert sum(1 for q in clean if q.repeat) == 1  # what the rule used to count
    ask(client, [user()])  # a crash made it ask turn 1 again: that one counts
    assert reasked_turns(golden, fake.requests) == 1
    # against a clean run that re-asks nothing, the rule as it always was
    assert reasked_turns(Golden(None, None, {}, 0, []), fake.requests) == \
        sum(1 for q in fake.requests if q.ok and q.repeat) == 2
