"""The fake Claude, driven through the real `anthropic.Anthropic` client."""
from __future__ import annotations

import socket

import anthropic
import pytest
from anthropic._exceptions import OverloadedError  # exported as anthropic.X from 0.125 on
from anthropic.types import Message, TextBlock, ToolUseBlock

from faultsim.model import sdk
from faultsim.model import (ApiFault, FakeClaude, InvalidRequest, Script, ToolCall, Turn,
                            validate_request)

TASK = "Tidy the tickets."
MODEL = "claude-sonnet-5-5"
TOOLS = [{"name": name, "description": name, "input_schema": {"type": "object"}}
         for name in ("lookup_order", "create_ticket", "send_email")]


def script(faults=(), task=TASK, tag="s") -> Script:
    """Three turns: one tool call, two parallel tool calls, a final answer."""
    return Script(task=task, tag=tag, faults=tuple(faults), turns=(
        Turn(text="Looking it up.", tool_calls=(ToolCall("lookup_order", {"order_id": "O-1"}),)),
        Turn(tool_calls=(ToolCall("create_ticket", {"title": "a"}),
                         ToolCall("send_email", {"to": "x@example.com"}))),
        Turn(final="All tidy."),
    ))


def ask(client, messages, **extra):
    return client.messages.create(model=MODEL, max_tokens=512, messages=messages,
                                  tools=TOOLS, **extra)


def user(text=TASK):
    return {"role": "user", "content": text}


def assistant_of(message: Message) -> dict:
    return {"role": "assistant", "content": [b.model_dump(exclude_none=True)
                                             for b in message.content]}


def results_for(message: Message) -> dict:
    return {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": b.id, "content": "ok"}
        for b in message.content if b.type == "tool_use"]}


def tool_ids(message: Message) -> list[str]:
    return [b.id for b in message.content if b.type == "tool_use"]


def conversation_to(client, position: int) -> list[dict]:
    """The messages an agent would send to ask for turn `position` (0-based)."""
    messages = [user()]
    for _ in range(position):
        reply = ask(client, messages)
        messages += [assistant_of(reply), results_for(reply)]
    return messages


def error_message(exc: anthropic.APIStatusError) -> str:
    return exc.body["error"]["message"]


# -- responses -----------------------------------------------------------------------------

def test_first_turn_is_a_real_message_with_text_and_tool_use():
    reply = ask(FakeClaude(script()).client(), [user()])
    assert isinstance(reply, Message)
    assert reply.id == "msg_s_01"
    assert reply.model == MODEL
    assert reply.stop_reason == "tool_use"
    text, call = reply.content
    assert isinstance(text, TextBlock) and text.text == "Looking it up."
    assert isinstance(call, ToolUseBlock)
    assert (call.id, call.name, call.input) == ("toolu_s_01_1", "lookup_order",
                                                {"order_id": "O-1"})


def test_final_turn_ends_the_turn_with_text_only():
    fake = FakeClaude(script())
    reply = ask(fake.client(), conversation_to(fake.client(), 2))
    assert reply.stop_reason == "end_turn"
    assert [b.type for b in reply.content] == ["text"]
    assert reply.content[0].text == "All tidy."
    assert fake.requests[-1].stop_reason == "end_turn"


def test_usage_is_deterministic_across_fresh_fakes():
    one = ask(FakeClaude(script()).client(), [user()])
    two = ask(FakeClaude(script()).client(), [user()])
    assert one.usage.input_tokens > 0 and one.usage.output_tokens > 0
    assert (one.usage.input_tokens, one.usage.output_tokens) == \
           (two.usage.input_tokens, two.usage.output_tokens)


def test_usage_grows_with_the_conversation():
    fake = FakeClaude(script())
    first = ask(fake.client(), [user()])
    later = ask(fake.client(), [user(), assistant_of(first), results_for(first)])
    assert later.usage.input_tokens > first.usage.input_tokens


def test_parallel_tool_use_returns_several_tool_use_blocks():
    fake = FakeClaude(script())
    reply = ask(fake.client(), conversation_to(fake.client(), 1))
    assert all(isinstance(b, ToolUseBlock) for b in reply.content)
    assert [(b.id, b.name) for b in reply.content] == [
        ("toolu_s_02_1", "create_ticket"), ("toolu_s_02_2", "send_email")]
    assert fake.requests[-1].tool_use_ids == ("toolu_s_02_1", "toolu_s_02_2")


# -- addressing by position ----------------------------------------------------------------

def test_conversation_with_n_tool_results_gets_turn_n():
    fake = FakeClaude(script())
    client = fake.client()
    messages = conversation_to(client, 2)
    reply = ask(client, messages)
    assert reply.id == "msg_s_03"
    assert fake.requests[-1].position == 2


def test_resending_the_same_conversation_is_a_repeat_with_fresh_ids():
    fake = FakeClaude(script())
    client = fake.client()
    messages = conversation_to(client, 1)
    first = ask(client, messages)
    again = ask(client, messages)
    assert tool_ids(first) == ["toolu_s_02_1", "toolu_s_02_2"]
    assert tool_ids(again) == ["toolu_s_02_1_r2", "toolu_s_02_2_r2"]
    assert again.id == "msg_s_02_r2"
    assert [(r.position, r.repeat) for r in fake.requests] == [(0, 0), (1, 0), (1, 1)]
    assert fake.repeated_requests() == [fake.requests[-1]]


def test_third_ask_of_the_same_turn_gets_r3_ids():
    fake = FakeClaude(script())
    client = fake.client()
    for _ in range(3):
        reply = ask(client, [user()])
    assert tool_ids(reply) == ["toolu_s_01_1_r3"]
    assert fake.requests[-1].repeat == 2


def test_first_answer_ids_are_stable_across_fresh_fakes():
    def ids_of_first_two_turns():
        fake = FakeClaude(script())
        client = fake.client()
        first = ask(client, [user()])
        second = ask(client, [user(), assistant_of(first), results_for(first)])
        return tool_ids(first) + tool_ids(second)

    assert ids_of_first_two_turns() == ids_of_first_two_turns() == [
        "toolu_s_01_1", "toolu_s_02_1", "toolu_s_02_2"]


def test_scripts_are_chosen_by_task_text_and_tags_keep_ids_apart():
    fake = FakeClaude([script(), script(task="Sub task.", tag="triage")])
    client = fake.client()
    main = ask(client, [user()])
    sub = ask(client, [user("Sub task.")])
    assert tool_ids(main) == ["toolu_s_01_1"]
    assert tool_ids(sub) == ["toolu_triage_01_1"]
    assert [r.script for r in fake.requests] == ["s", "triage"]
    assert all(r.repeat == 0 for r in fake.requests)


def test_two_scripts_for_the_same_task_are_refused():
    with pytest.raises(ValueError, match="two scripts for the same task"):
        FakeClaude([script(), script(tag="other")])


# -- validation through the SDK ------------------------------------------------------------

def bad_request(fake: FakeClaude, messages, **extra) -> anthropic.BadRequestError:
    with pytest.raises(anthropic.BadRequestError) as info:
        ask(fake.client(), messages, **extra)
    exc = info.value
    assert exc.status_code == 400
    assert exc.body["error"]["type"] == "invalid_request_error"
    return exc


def test_consecutive_same_role_turns_are_merged_as_the_api_does():
    """"Consecutive `user` or `assistant` turns in your request will be combined into a
    single turn" (the SDK's documentation of `messages`): not a 400."""
    fake = FakeClaude(script())
    client = fake.client()
    reply = ask(client, [user(), user("and again")])
    assert reply.id == "msg_s_01" and fake.invalid_requests == []
    # a tool result split over two user turns, and the assistant turn split in two
    text, call = reply.content
    split = [user(), {"role": "assistant", "content": [text.model_dump(exclude_none=True)]},
             {"role": "assistant", "content": [call.model_dump(exclude_none=True)]},
             {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id,
                                           "content": "ok"}]},
             {"role": "user", "content": "Go on."}]
    assert ask(client, split).id == "msg_s_02"
    assert fake.invalid_requests == [] and fake.repeated_requests() == []


def test_orphaned_tool_use_as_last_message_is_a_400_naming_the_id():
    fake = FakeClaude(script())
    first = ask(fake.client(), [user()])
    exc = bad_request(fake, [user(), assistant_of(first)])
    message = error_message(exc)
    assert "toolu_s_01_1" in message
    assert "without `tool_result`" in message
    assert message.startswith("messages.1:")
    assert fake.invalid_requests[-1].message == message


def test_orphaned_tool_use_followed_by_a_user_message_without_result_is_a_400():
    fake = FakeClaude(script())
    client = fake.client()
    first = ask(client, [user()])
    second = ask(client, [user(), assistant_of(first), results_for(first)])
    # A crash after the first of two parallel calls: only one result reached the model.
    partial = {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "toolu_s_02_1", "content": "ok"}]}
    exc = bad_request(fake, [user(), assistant_of(first), results_for(first),
                             assistant_of(second), partial])
    message = error_message(exc)
    assert message.startswith("messages.4:")
    assert "toolu_s_02_2" in message and "toolu_s_02_1" not in message


def test_orphaned_tool_use_followed_by_plain_text_user_message_is_a_400():
    fake = FakeClaude(script())
    first = ask(fake.client(), [user()])
    exc = bad_request(fake, [user(), assistant_of(first), user("I restarted, go on")])
    assert "toolu_s_01_1" in error_message(exc)


def test_tool_result_without_matching_tool_use_is_a_400_naming_the_id():
    fake = FakeClaude(script())
    first = ask(fake.client(), [user()])
    stray = {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "toolu_s_01_1", "content": "ok"},
        {"type": "tool_result", "tool_use_id": "toolu_ghost_9", "content": "ok"}]}
    exc = bad_request(fake, [user(), assistant_of(first), stray])
    message = error_message(exc)
    assert message.startswith("messages.2.content.1:")
    assert "unexpected `tool_use_id`" in message and "toolu_ghost_9" in message


def test_tool_blocks_without_tools_defined_is_a_400():
    fake = FakeClaude(script())
    first = ask(fake.client(), [user()])
    with pytest.raises(anthropic.BadRequestError) as info:
        fake.client().messages.create(model=MODEL, max_tokens=512, messages=[
            user(), assistant_of(first), results_for(first)])
    assert "must define tools" in error_message(info.value)
    assert fake.requests[-1].error == "invalid_request_error"


def test_missing_max_tokens_is_a_400():
    # The SDK refuses to build a request without max_tokens (TypeError), so omit it and
    # pass an explicit timeout (the default timeout is computed from max_tokens).
    fake = FakeClaude(script())
    with pytest.raises(TypeError):
        fake.client().messages.create(model=MODEL, messages=[user()])
    assert fake.requests == []
    with pytest.raises(anthropic.BadRequestError) as info:
        omitted = getattr(anthropic, "omit", anthropic.NOT_GIVEN)  # `omit` from 0.70 on
        fake.client().messages.create(model=MODEL, max_tokens=omitted,
                                      messages=[user()], timeout=5)
    assert error_message(info.value) == "max_tokens: Field required"
    assert len(fake.invalid_requests) == 1


def test_invalid_request_is_not_retried():
    fake = FakeClaude(script())
    bad_request(fake, [{"role": "assistant", "content": "hi"}])
    assert len(fake.requests) == 1


# -- validate_request on plain dicts -------------------------------------------------------

def body(messages, **extra):
    return {"model": MODEL, "max_tokens": 10, "messages": messages, **extra}


USE = {"role": "assistant", "content": [
    {"type": "tool_use", "id": "toolu_a", "name": "t", "input": {}},
    {"type": "tool_use", "id": "toolu_b", "name": "t", "input": {}}]}


def result(*ids):
    return {"role": "user", "content": [{"type": "tool_result", "tool_use_id": i,
                                         "content": "ok"} for i in ids]}


def test_validate_accepts_a_well_formed_tool_conversation():
    assert validate_request(body([user(), USE, result("toolu_a", "toolu_b")], tools=TOOLS)) is None


@pytest.mark.parametrize("missing", ["model", "max_tokens", "messages"])
def test_validate_requires_model_max_tokens_and_messages(missing):
    data = body([user()])
    del data[missing]
    with pytest.raises(InvalidRequest, match=f"^{missing}: Field required$"):
        validate_request(data)


@pytest.mark.parametrize("data, expected", [
    ([], "request body must be a JSON object"),
    (body([user()], model=""), "model: Input should be a valid string"),
    (body([user()], max_tokens=0), "max_tokens: Input should be greater than or equal to 1"),
    (body([user()], max_tokens="10"), "max_tokens: Input should be greater"),
    (body([]), "messages: at least one message is required"),
    (body([{"role": "system", "content": "x"}]), "messages.0.role: Input should be"),
    (body([{"role": "user"}]), "messages.0.content: Field required"),
    (body([{"role": "user", "content": []}]), "messages.0: all messages must have non-empty"),
    (body([{"role": "assistant", "content": "hi"}]), 'first message must use the "user" role'),
    (body([user()], tool_choice={"type": "sometimes"}, tools=TOOLS),
     "tool_choice: Input tag does not match"),
    (body([user()], tool_choice={"type": "tool"}, tools=TOOLS), "tool_choice.tool.name"),
    (body([user()], tool_choice={"type": "any"}),
     "tool_choice may only be specified while providing tools."),
])
def test_validate_rejects_malformed_bodies(data, expected):
    with pytest.raises(InvalidRequest) as info:
        validate_request(data)
    assert expected in info.value.message


def test_validate_names_every_unanswered_tool_use_id():
    with pytest.raises(InvalidRequest) as info:
        validate_request(body([user(), USE], tools=TOOLS))
    assert info.value.message.startswith("messages.1:")
    assert "toolu_a, toolu_b" in info.value.message


def test_validate_names_the_one_unanswered_id_of_a_parallel_turn():
    with pytest.raises(InvalidRequest) as info:
        validate_request(body([user(), USE, result("toolu_b")], tools=TOOLS))
    assert info.value.message.startswith("messages.2:")
    assert "toolu_a" in info.value.message and "toolu_b" not in info.value.message


def test_validate_rejects_tool_result_in_first_message():
    with pytest.raises(InvalidRequest, match="unexpected `tool_use_id`.*toolu_x"):
        validate_request(body([result("toolu_x")], tools=TOOLS))


def test_validate_requires_tools_when_tool_blocks_are_present():
    with pytest.raises(InvalidRequest, match="must define tools"):
        validate_request(body([user(), USE, result("toolu_a", "toolu_b")]))
    validate_request(body([user(), {"role": "assistant", "content": "plain"}, user("x")]))


# -- API faults ----------------------------------------------------------------------------

FAULTS = [("429", 429, "rate_limit_error"), ("529", 529, "overloaded_error"),
          ("500", 500, "api_error")]


@pytest.mark.parametrize("kind, status, error", FAULTS)
def test_sdk_retries_a_transient_fault_and_succeeds(kind, status, error):
    fake = FakeClaude(script([ApiFault(at=0, kind=kind, times=1)]))
    reply = ask(fake.client(), [user()])
    assert reply.id == "msg_s_01"
    assert [(r.status, r.error) for r in fake.requests] == [(status, error), (200, None)]
    assert fake.requests[0].position == 0 and fake.requests[1].repeat == 0


def test_fault_later_in_the_script_hits_only_its_position():
    fake = FakeClaude(script([ApiFault(at=1, kind="429", times=2)]))
    client = fake.client()
    reply = ask(client, conversation_to(client, 1))
    assert tool_ids(reply) == ["toolu_s_02_1", "toolu_s_02_2"]
    assert [(r.position, r.status) for r in fake.requests] == [
        (0, 200), (1, 429), (1, 429), (1, 200)]


def test_fault_more_times_than_retries_surfaces_to_the_caller():
    fake = FakeClaude(script([ApiFault(at=0, kind="529", times=3)]))
    with pytest.raises(OverloadedError):
        ask(fake.client(max_retries=2), [user()])
    assert [r.status for r in fake.requests] == [529, 529, 529]
    reply = ask(fake.client(max_retries=0), [user()])  # the fault is spent
    assert reply.id == "msg_s_01"


@pytest.mark.parametrize("kind, exc_type", [
    ("429", anthropic.RateLimitError),
    ("529", OverloadedError),
    ("500", anthropic.InternalServerError),
])
def test_without_retries_the_fault_raises_the_sdk_error(kind, exc_type):
    fake = FakeClaude(script([ApiFault(at=0, kind=kind)]), retry_after_ms=1)
    with pytest.raises(exc_type) as info:
        ask(fake.client(max_retries=0), [user()])
    exc = info.value
    assert exc.status_code == int(kind)
    assert exc.response.headers["retry-after"] == "1"
    assert exc.response.headers["retry-after-ms"] == "1"
    assert len(fake.requests) == 1


def test_overloaded_is_the_sdks_own_class_and_500_is_not_overloaded():
    # the SDK maps the status, not the fake: from 2.5 a 529 is an InternalServerError,
    # before it an APIStatusError beside it, as the agent meets it in production
    assert issubclass(OverloadedError, anthropic.InternalServerError) == \
        (sdk.version() >= (2, 5))
    fake = FakeClaude(script([ApiFault(at=0, kind="500")]))
    with pytest.raises(anthropic.InternalServerError) as info:
        ask(fake.client(max_retries=0), [user()])
    assert not isinstance(info.value, OverloadedError)


def test_timeout_without_retries_raises_api_timeout_error():
    fake = FakeClaude(script([ApiFault(at=0, kind="timeout")]))
    with pytest.raises(anthropic.APITimeoutError):
        ask(fake.client(max_retries=0), [user()])
    (record,) = fake.requests
    assert (record.status, record.error, record.position) == (0, "timeout", 0)
    assert not record.ok


def test_unknown_fault_kind_is_refused():
    with pytest.raises(ValueError, match="unknown API fault"):
        ApiFault(at=0, kind="503")


# -- script errors -------------------------------------------------------------------------

def script_error(fake, messages) -> anthropic.BadRequestError:
    with pytest.raises(anthropic.BadRequestError) as info:
        ask(fake.client(max_retries=2), messages)
    assert info.value.body["error"]["type"] == "faultsim_script_error"
    assert info.value.response.headers["x-should-retry"] == "false"
    return info.value


def test_script_running_out_of_turns_is_a_non_retried_faultsim_error():
    short = Script(task=TASK, turns=(
        Turn(tool_calls=(ToolCall("lookup_order", {}),)), Turn(tool_calls=(
            ToolCall("lookup_order", {}),))))  # no final turn: built by hand
    fake = FakeClaude(short)
    client = fake.client()
    messages = conversation_to(client, 2)
    before = len(fake.requests)
    exc = script_error(fake, messages)
    message = error_message(exc)
    assert message.startswith("faultsim:")
    assert "ran out" in message and "asks for turn 3" in message
    assert len(fake.requests) == before + 1  # not retried
    assert fake.script_errors == [fake.requests[-1]]
    assert fake.invalid_requests == []
    assert fake.requests[-1].position == 2


def test_task_without_script_is_a_non_retried_faultsim_error():
    fake = FakeClaude(script())
    exc = script_error(fake, [user("Something nobody scripted.")])
    message = error_message(exc)
    assert message.startswith("faultsim: no script for the task")
    assert "Something nobody scripted." in message and TASK in message
    assert len(fake.requests) == 1
    assert len(fake.script_errors) == 1 and fake.invalid_requests == []
    assert fake.requests[0].script is None


def test_fake_with_no_scripts_says_so():
    fake = FakeClaude([])
    assert "scripts exist for: none" in error_message(script_error(fake, [user()]))


# -- the request log -----------------------------------------------------------------------

def test_request_log_records_position_repeat_tokens_ids_and_incarnation():
    fake = FakeClaude(script(), incarnation=lambda: 7)
    client = fake.client()
    first = ask(client, [user()])
    ask(client, [user()])
    one, two = fake.requests
    assert (one.index, one.incarnation, one.script, one.position, one.repeat) == \
           (1, 7, "s", 0, 0)
    assert (two.index, two.incarnation, two.position, two.repeat) == (2, 7, 0, 1)
    assert one.status == 200 and one.ok and one.error is None
    assert (one.input_tokens, one.output_tokens) == (first.usage.input_tokens,
                                                     first.usage.output_tokens)
    assert one.tool_use_ids == ("toolu_s_01_1",)
    assert two.tool_use_ids == ("toolu_s_01_1_r2",)
    assert one.stop_reason == "tool_use"


def test_incarnation_is_read_at_request_time():
    current = {"n": 1}
    fake = FakeClaude(script(), incarnation=lambda: current["n"])
    ask(fake.client(), [user()])
    current["n"] = 2
    ask(fake.client(), [user()])
    assert [r.incarnation for r in fake.requests] == [1, 2]


def test_events_are_reported_to_on_event():
    events = []
    fake = FakeClaude(script(), on_event=lambda kind, **info: events.append((kind, info)))
    ask(fake.client(), [user()])
    kinds = [k for k, _ in events]
    assert kinds == ["model.response"]
    assert events[0][1]["record"] is fake.requests[0]
    assert events[0][1]["record"].tool_use_ids == ("toolu_s_01_1",)


def test_only_post_messages_is_served():
    fake = FakeClaude(script())
    with pytest.raises(anthropic.NotFoundError):
        fake.client(max_retries=0).models.list()
    assert fake.requests[0].status == 404


# -- no network ----------------------------------------------------------------------------

def test_no_socket_is_opened(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("faultsim's fake opened a socket")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    fake = FakeClaude(script([ApiFault(at=0, kind="429")]))
    client = fake.client()
    messages = conversation_to(client, 2)
    reply = ask(client, messages)
    assert reply.content[0].text == "All tidy."
    assert [r.status for r in fake.requests] == [429, 200, 200, 200]


def test_a_client_the_agent_builds_itself_is_served_whatever_its_base_url(monkeypatch):
    """An `anthropic.Anthropic` built inside an incarnation, with no http_client of its own,
    reaches the fake (a proxy base_url too); one with its own http_client is left alone."""
    import dataclasses

    import anthropic

    import faultsim
    import reference_agent
    from conftest import DATA

    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    seen = {}

    def make_agent(env):
        client = anthropic.Anthropic(base_url="https://llm-proxy.example/anthropic")
        seen["transport"] = type(client._client._transport).__name__
        untouched = anthropic.Anthropic(api_key="k", http_client=sdk.http().Client())
        seen["own"] = type(untouched._client._transport).__name__
        return reference_agent.make_agent(dataclasses.replace(env, client=client))

    original = anthropic.Anthropic.__init__
    scenario = faultsim.load_scenario(DATA / "tiny.toml")
    record = faultsim.run_once(scenario, make_agent)
    assert record.outcome.final_answer == scenario.expected_final_answer
    assert [r.status for r in record.world.model.requests].count(200) >= 5
    assert seen == {"transport": "MockTransport", "own": "HTTPTransport"}
    assert anthropic.Anthropic.__init__ is original
