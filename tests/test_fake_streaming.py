"""The fake Claude as faithful as the API: streaming (SDK helpers, raw SSE on the loopback
endpoint), async clients, the API's own rules (merged turns, tool_choice, count_tokens,
cache usage), stream faults, and kill points inside a stream, on agents written the way
users write them."""
from __future__ import annotations

import asyncio
import json
import os
import re

import anthropic
import httpx2
import pytest

from faultsim import load_scenario
from helpers import scenario_from
from faultsim.inprocess.explore import explore
from faultsim.model import ApiFault, FakeClaude, Script, ToolCall, Turn
from faultsim.model import sdk, sse
from faultsim.model.endpoint import serve

TASK = "Refund order ORD-7."
MODEL = "claude-sonnet-5-5"
TOOLS = [{"name": "refund", "description": "Refund an order.",
          "input_schema": {"type": "object", "properties": {"order_id": {"type": "string"}}}}]


def script(faults=()):
    return Script(task=TASK, faults=tuple(faults), turns=(
        Turn(text="Refunding it now.", tool_calls=(
            ToolCall("refund", {"order_id": "ORD-7", "reason": "arrived broken, customer "
                                                              "asked twice"}),)),
        Turn(final="Refunded ORD-7."),
    ))


def first(**extra):
    return {"model": MODEL, "max_tokens": 256, "tools": TOOLS,
            "messages": [{"role": "user", "content": TASK}], **extra}


# -- streaming -----------------------------------------------------------------------------

def test_the_event_sequence_is_the_apis():
    message = {"id": "msg_1", "type": "message", "role": "assistant", "model": MODEL,
               "content": [{"type": "thinking", "thinking": "t" * 30, "signature": "sig"},
                           {"type": "text", "text": "hello"},
                           {"type": "tool_use", "id": "toolu_1", "name": "refund",
                            "input": {"order_id": "ORD-7"}}],
               "stop_reason": "tool_use", "stop_sequence": None,
               "usage": {"input_tokens": 10, "output_tokens": 20}}
    steps = list(sse.events(message))
    kinds = [s.event for s in steps]
    assert kinds[:2] == ["message_start", "ping"]
    assert kinds[-2:] == ["message_delta", "message_stop"]
    deltas = [s.data["delta"]["type"] for s in steps if s.event == "content_block_delta"]
    assert deltas == ["thinking_delta", "thinking_delta", "signature_delta", "text_delta",
                      "input_json_delta", "input_json_delta"]
    start = steps[0].data["message"]
    assert start["content"] == [] and start["stop_reason"] is None
    assert steps[-2].data["delta"]["stop_reason"] == "tool_use"
    assert steps[-2].data["usage"] == {"output_tokens": 20}
    tool_json = "".join(s.data["delta"]["partial_json"] for s in steps
                        if s.event == "content_block_delta"
                        and s.data["delta"]["type"] == "input_json_delta")
    assert json.loads(tool_json) == {"order_id": "ORD-7"}
    assert all(s.encode().startswith(f"event: {s.event}\ndata: ".encode()) for s in steps)


def test_stream_true_and_the_stream_helper_give_the_same_message_as_create():
    plain = FakeClaude(script()).client().messages.create(**first())
    client = FakeClaude(script()).client()
    with client.messages.stream(**first()) as stream:
        seen = [event.type for event in stream]
        helper = stream.get_final_message()
    raw = FakeClaude(script()).client().messages.create(**first(), stream=True)
    raw_types = [event.type for event in raw]
    assert helper.model_dump(exclude={"content"}) == plain.model_dump(exclude={"content"})
    assert [b.model_dump(exclude={"parsed_output"}) for b in helper.content] == \
        [b.model_dump() for b in plain.content]
    assert raw_types[0] == "message_start" and raw_types[-1] == "message_stop"
    assert "input_json" in seen and "text" in seen  # the helper's derived events


def test_async_clients_stream_and_create():
    async def go(client):
        created = await client.messages.create(**first())
        async with client.messages.stream(**first()) as stream:
            streamed = await stream.get_final_message()
        return created, streamed

    created, streamed = asyncio.run(go(FakeClaude(script()).async_client()))
    assert created.content[1].input == streamed.content[1].input
    assert created.id == "msg_s_01" and streamed.id == "msg_s_01_r2"


def test_an_async_client_the_agent_builds_itself_is_served():
    fake = FakeClaude(script())
    with fake.serving_new_clients():
        client = anthropic.AsyncAnthropic()
        reply = asyncio.run(client.messages.create(**first()))
    assert reply.stop_reason == "tool_use" and len(fake.requests) == 1


def test_the_loopback_endpoint_streams_server_sent_events():
    fake = FakeClaude(script())
    with serve(fake) as endpoint:
        raw = httpx2.post(endpoint.base_url + "/v1/messages", json=first(stream=True),
                          headers={"x-api-key": endpoint.api_key,
                                   "anthropic-version": "2023-06-01"})
        assert raw.headers["content-type"] == "text/event-stream"
        events = [line[7:] for line in raw.text.splitlines() if line.startswith("event: ")]
        assert events[:2] == ["message_start", "ping"] and events[-1] == "message_stop"
        client = anthropic.Anthropic(base_url=endpoint.base_url, api_key=endpoint.api_key)
        with client.messages.stream(**first()) as stream:
            assert stream.get_final_message().content[1].name == "refund"

        async def via_async():
            async_client = anthropic.AsyncAnthropic(base_url=endpoint.base_url,
                                                    api_key=endpoint.api_key)
            stream = await async_client.messages.create(**first(), stream=True)
            return [event.type async for event in stream]

        assert asyncio.run(via_async())[-1] == "message_stop"


# -- stream faults ---------------------------------------------------------------------------

def test_a_stream_cut_raises_mid_stream_and_a_retry_gets_the_same_turn():
    fake = FakeClaude(script(faults=[ApiFault(0, "stream_cut")]))
    client = fake.client()
    seen = []
    # anthropic <= 2.16 lets the transport's error through (httpx's before 1.0, httpx2's
    # after); 2.17 wraps a failed body read in APIConnectionError, as it does for a real
    # connection cut mid-stream.
    http = sdk.http()
    with pytest.raises((http.RemoteProtocolError, anthropic.APIConnectionError)) as cut:
        with client.messages.stream(**first()) as stream:
            for event in stream:
                seen.append(event.type)
    assert isinstance(cut.value, http.RemoteProtocolError) or \
        isinstance(cut.value.__cause__, http.RemoteProtocolError)
    assert "message_stop" not in seen and "content_block_start" in seen
    again = client.messages.create(**first())
    assert again.id == "msg_s_01"  # a cut answer was never received: same turn, same ids
    assert [(r.status, r.error) for r in fake.requests] == [(200, "stream_cut"), (200, None)]
    assert fake.repeated_requests() == []


def test_a_cut_non_streaming_answer_is_retried_by_the_sdk():
    fake = FakeClaude(script(faults=[ApiFault(0, "stream_cut")]))
    reply = fake.client(max_retries=2).messages.create(**first())
    assert reply.id == "msg_s_01"
    assert [r.error for r in fake.requests] == ["stream_cut", None]


def test_a_stream_cut_on_the_loopback_endpoint_fails_the_clients_read():
    fake = FakeClaude(script(faults=[ApiFault(0, "stream_cut")]))
    with serve(fake) as endpoint:
        client = anthropic.Anthropic(base_url=endpoint.base_url, api_key=endpoint.api_key,
                                     max_retries=0)
        with pytest.raises((sdk.http().RemoteProtocolError, anthropic.APIConnectionError)):
            with client.messages.stream(**first()) as stream:
                stream.get_final_message()


# -- the API's own rules ---------------------------------------------------------------------

def script_error(fake, **body):
    with pytest.raises(anthropic.BadRequestError) as info:
        fake.client().messages.create(**body)
    assert info.value.body["error"]["type"] == "faultsim_script_error"
    return info.value.body["error"]["message"]


def test_a_scripted_tool_call_the_request_does_not_allow_is_a_script_error():
    fake = FakeClaude(script())
    message = script_error(fake, **first(tool_choice={"type": "none"}))
    assert "turn 1" in message and "refund" in message and '"none"' in message
    message = script_error(fake, **{**first(), "tools": [{**TOOLS[0], "name": "other"}]})
    assert "'refund', a tool the request does not offer (it offers: other)" in message
    message = script_error(fake, **first(tool_choice={"type": "tool", "name": "x"},
                                         tools=TOOLS + [{**TOOLS[0], "name": "x"}]))
    assert "forces 'x'" in message
    ok = fake.client().messages.create(**first(tool_choice={"type": "any"}))
    assert ok.stop_reason == "tool_use"


def test_a_scripted_input_that_breaks_the_offered_schema_is_a_script_error():
    fake = FakeClaude(script())
    strict = {"type": "object", "properties": {"order_id": {"type": "integer"}},
              "required": ["order_id"]}
    message = script_error(fake, **first(tools=[{**TOOLS[0], "input_schema": strict}]))
    assert "turn 1" in message and "'refund'" in message
    assert 'input.order_id is "ORD-7", not integer' in message
    closed = {"type": "object", "properties": {"order_id": {"type": "string"}},
              "required": ["order_id", "amount"], "additionalProperties": True}
    message = script_error(fake, **first(tools=[{**TOOLS[0], "input_schema": closed}]))
    assert "input lacks the required 'amount'" in message
    closed = {"type": "object", "properties": {"order_id": {"type": "string"}},
              "additionalProperties": False}
    message = script_error(fake, **first(tools=[{**TOOLS[0], "input_schema": closed}]))
    assert "input has 'reason', which the schema does not allow" in message
    # the schema the tests' tools offer (an open object) takes the scripted input
    assert fake.client().messages.create(**first()).stop_reason == "tool_use"


def test_count_tokens_is_served_and_matches_the_billed_input():
    fake = FakeClaude(script())
    client = fake.client()
    body = first()
    counted = client.messages.count_tokens(model=MODEL, messages=body["messages"],
                                           tools=TOOLS)
    billed = client.messages.create(**body).usage.input_tokens
    assert counted.input_tokens == billed > 0
    assert len(fake.requests) == 1  # counting is not a turn


def test_cache_control_reports_cache_writes_then_reads():
    fake = FakeClaude(script())
    client = fake.client()
    system = [{"type": "text", "text": "You refund orders. " * 40,
               "cache_control": {"type": "ephemeral"}}]
    one = client.messages.create(**first(), system=system).usage
    two = client.messages.create(**first(), system=system).usage
    assert one.cache_creation_input_tokens > 0 and one.cache_read_input_tokens == 0
    assert two.cache_read_input_tokens == one.cache_creation_input_tokens
    assert two.cache_creation_input_tokens == 0
    plain = client.messages.create(**first()).usage
    assert plain.cache_creation_input_tokens is None  # no breakpoint, no cache fields


# -- agents that stream, async, under crashes -----------------------------------------------

STREAM_SCENARIO = """
id = "streamed_refund"
task = "Refund order ORD-7."
expected_final_answer = "Refunded ORD-7."
[services.payments]
kind = "keyed"
[[turns]]
text = "Refunding it now."
tool_calls = [{ name = "refund", input = { order_id = "ORD-7", reason = "arrived broken, the customer asked twice" } }]
[[turns]]
final = "Refunded ORD-7."
"""


class StreamingAgent:
    """An async agent loop as users write it: AsyncAnthropic, `messages.stream`, the
    conversation saved to state.json (atomically) after each model answer and each tool
    result. `partial=True` is the planted mistake: it saves the assistant message as the
    blocks stream in, so a crash mid-stream leaves half an answer that the resume trusts."""

    def __init__(self, env, *, partial: bool = False, own_client: bool = False) -> None:
        self.env, self.partial, self.own_client = env, partial, own_client
        self.path = os.path.join(str(env.workdir), "state.json")

    def save(self, messages):
        os.makedirs(self.env.workdir, exist_ok=True)
        tmp = self.path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(messages, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)
        fd = os.open(str(self.env.workdir), os.O_RDONLY)  # the new name, durable too
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    async def run(self):
        client = anthropic.AsyncAnthropic() if self.own_client else self.env.async_client
        messages = json.load(open(self.path)) if os.path.exists(self.path) else \
            [{"role": "user", "content": self.env.task}]
        while True:
            last = messages[-1]
            if last["role"] == "assistant":
                calls = [b for b in last["content"] if b["type"] == "tool_use"]
                if not calls:
                    return "".join(b["text"] for b in last["content"] if b["type"] == "text")
                results = []
                for call in calls:
                    done = self.env.services["payments"].submit(
                        call["input"], key=f"{self.env.task_id}:{call['input']['order_id']}")
                    results.append({"type": "tool_result", "tool_use_id": call["id"],
                                    "content": json.dumps(done)})
                messages.append({"role": "user", "content": results})
                self.save(messages)
                continue
            async with client.messages.stream(model=self.env.model, max_tokens=512,
                                              tools=TOOLS, messages=messages) as stream:
                if self.partial:
                    blocks = []
                    async for event in stream:
                        if event.type == "content_block_stop":
                            blocks.append(event.content_block.model_dump(
                                exclude_none=True, exclude={"parsed_output"}))
                            self.save(messages + [{"role": "assistant", "content": blocks}])
                    reply = await stream.get_final_message()
                else:
                    reply = await stream.get_final_message()
            messages.append({"role": "assistant", "content": [
                b.model_dump(exclude_none=True, exclude={"parsed_output"})
                for b in reply.content]})
            self.save(messages)


@pytest.fixture(scope="module")
def stream_scenario(tmp_path_factory):
    return scenario_from(tmp_path_factory, STREAM_SCENARIO)


def test_an_async_streaming_agent_is_explored_with_kill_points_inside_its_streams(
        stream_scenario):
    report = explore(lambda env: StreamingAgent(env, own_client=True), stream_scenario,
                     crash_model="all", crashes=2)
    for run in report.runs:
        assert run.ok, report.counterexamples()
        mid = [p for p in run.explored if p.category == "mid-stream"]
        # two streamed answers: after message_start, after each block, mid tool input
        assert len(mid) >= 5, [p.id for p in mid]


def test_saving_a_half_streamed_answer_is_caught(stream_scenario):
    report = explore(lambda env: StreamingAgent(env, partial=True), stream_scenario,
                     crash_model="process", crashes=1)
    [run] = report.runs
    bad = [v for v in run.failures if v.kill_point.category == "mid-stream"]
    assert bad, "a crash between the streamed blocks must leave a half answer that is caught"
    assert not run.ok


def streaming_agent(env):
    return StreamingAgent(env, own_client=True)


def test_an_async_streaming_agent_in_subprocess_mode(stream_scenario):
    from faultsim.real.explore import explore_subprocess

    stats: dict = {}
    report = explore_subprocess("test_fake_streaming:streaming_agent", stream_scenario,
                                stats=stats)
    [run] = report.runs
    assert run.ok, report.counterexamples()
    assert stats["kills_landed"] == len(run.explored)
    assert sum(p.category == "mid-stream" for p in run.explored) >= 5


# -- extended thinking -----------------------------------------------------------------------

THINKING_SCENARIO = """
id = "thinking_refund"
task = "Refund order ORD-7."
expected_final_answer = "Refunded ORD-7."
[services.payments]
kind = "keyed"
[[turns]]
thinking = "The order arrived broken; a refund is due. Refund first, then confirm."
tool_calls = [{ name = "refund", input = { order_id = "ORD-7" } }]
[[turns]]
thinking = "The refund went through."
final = "Refunded ORD-7."
"""

THINK = {"type": "enabled", "budget_tokens": 1024}


class ThinkingAgent:
    """Thinking enabled; the conversation saved to state.json after each step.
    `drop_thinking=True` is the planted mistake: it strips thinking blocks when it saves
    ("they are large"), so a resume sends the tool call without its thinking."""

    def __init__(self, env, *, drop_thinking=False):
        self.env, self.drop = env, drop_thinking
        self.path = os.path.join(str(env.workdir), "state.json")

    def save(self, messages):
        os.makedirs(self.env.workdir, exist_ok=True)
        if self.drop:
            messages = [{**m, "content": [b for b in m["content"] if b["type"] != "thinking"]}
                        if m["role"] == "assistant" else m for m in messages]
        with open(self.path + ".tmp", "w") as f:
            json.dump(messages, f)
        os.replace(self.path + ".tmp", self.path)

    def run(self):
        messages = json.load(open(self.path)) if os.path.exists(self.path) else \
            [{"role": "user", "content": self.env.task}]
        while True:
            last = messages[-1]
            if last["role"] == "assistant":
                calls = [b for b in last["content"] if b["type"] == "tool_use"]
                if not calls:
                    return "".join(b["text"] for b in last["content"] if b["type"] == "text")
                done = [self.env.services["payments"].submit(c["input"], key=c["input"]["order_id"])
                        for c in calls]
                messages.append({"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": c["id"], "content": json.dumps(d)}
                    for c, d in zip(calls, done)]})
            else:
                reply = self.env.client.messages.create(
                    model=self.env.model, max_tokens=4096, thinking=THINK, tools=TOOLS,
                    messages=messages)
                messages.append({"role": "assistant", "content": [
                    b.model_dump(exclude_none=True) for b in reply.content]})
            self.save(messages)


def test_thinking_blocks_are_sent_signed_and_checked_on_the_way_back():
    fake = FakeClaude(Script(task=TASK, turns=(
        Turn(thinking="Refund first.", tool_calls=(ToolCall("refund", {"order_id": "O"}),)),
        Turn(final="done"))))
    client = fake.client()
    body = first(thinking=THINK, max_tokens=2048)
    reply = client.messages.create(**body)
    think, call = reply.content
    assert think.type == "thinking" and think.thinking == "Refund first." and think.signature
    assert client.messages.create(**first()).content[0].type == "tool_use"  # not enabled
    # a turn the scenario gives no thinking still starts with thinking, as the API's do
    plain = FakeClaude(script()).client().messages.create(**body)
    assert [b.type for b in plain.content] == ["thinking", "text", "tool_use"]
    result = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id,
                                           "content": "ok"}]}
    kept = {"role": "assistant", "content": [b.model_dump(exclude_none=True)
                                             for b in reply.content]}
    assert client.messages.create(**{**body, "messages": body["messages"] + [kept, result]}
                                  ).content[-1].text == "done"
    dropped = {"role": "assistant", "content": [call.model_dump(exclude_none=True)]}
    edited = {"role": "assistant", "content": [{**kept["content"][0], "thinking": "Other."},
                                               kept["content"][1]]}
    for wrong, says in ((dropped, "Expected `thinking` or `redacted_thinking`, but found "
                                  "`tool_use`"),
                        (edited, "Invalid `signature` in `thinking` block")):
        with pytest.raises(anthropic.BadRequestError) as info:
            client.messages.create(**{**body, "messages": body["messages"] + [wrong, result]})
        assert says in info.value.body["error"]["message"]
    with pytest.raises(anthropic.BadRequestError, match="budget_tokens"):
        client.messages.create(**first(thinking={"type": "enabled", "budget_tokens": 100}))


@pytest.fixture(scope="module")
def thinking_scenario(tmp_path_factory):
    return scenario_from(tmp_path_factory, THINKING_SCENARIO)


def test_a_thinking_agent_that_keeps_its_blocks_is_clean(thinking_scenario):
    report = explore(ThinkingAgent, thinking_scenario, crash_model="process", crashes=2)
    assert report.ok, report.counterexamples()


def test_dropping_thinking_blocks_on_resume_is_caught_by_api_valid(thinking_scenario):
    report = explore(lambda env: ThinkingAgent(env, drop_thinking=True), thinking_scenario,
                     crash_model="process", crashes=1)
    [run] = report.runs
    broken = {v.invariant for f in run.failures for v in f.violations}
    assert "api_valid" in broken, broken


# -- answers that stop early, and prefill ------------------------------------------------------

def test_max_tokens_truncates_the_tool_call_and_the_retry_gets_the_whole_turn():
    fake = FakeClaude(script(faults=[ApiFault(0, "max_tokens")]))
    client = fake.client()
    cut = client.messages.create(**first())
    assert cut.stop_reason == "max_tokens"
    assert cut.content[-1].type == "tool_use" and cut.content[-1].input == {}
    whole = client.messages.create(**first(max_tokens=4096))
    assert whole.stop_reason == "tool_use" and whole.content[-1].input["order_id"] == "ORD-7"
    assert whole.content[-1].id == cut.content[-1].id  # the same turn, not a repeat
    assert fake.repeated_requests() == []
    with client.messages.stream(**first()) as stream:  # streamed, the same stop
        assert stream.get_final_message().stop_reason == "tool_use"


def test_refusal_and_pause_turn():
    fake = FakeClaude(script(faults=[ApiFault(0, "refusal")]))
    refused = fake.client().messages.create(**first())
    assert refused.stop_reason == "refusal"
    assert [b.type for b in refused.content] == ["text"]  # what came before the refusal
    fake = FakeClaude(script(faults=[ApiFault(0, "pause_turn")]))
    client = fake.client()
    paused = client.messages.create(**first())
    assert paused.stop_reason == "pause_turn" and [b.type for b in paused.content] == ["text"]
    # the client sends the paused turn back as it is, to continue it (no prefill needed)
    again = client.messages.create(**{**first(), "messages": first()["messages"] + [
        {"role": "assistant", "content": [b.model_dump(exclude_none=True)
                                          for b in paused.content]}]})
    assert again.stop_reason == "tool_use"


@pytest.mark.filterwarnings("ignore:The model .* is deprecated:DeprecationWarning")
def test_prefill_is_refused_on_models_that_refuse_it():
    body = {**first(), "messages": first()["messages"] + [
        {"role": "assistant", "content": "Refunding"}]}
    for model, accepted in (("claude-sonnet-5-5", False), ("claude-opus-4-6", False),
                            ("claude-sonnet-4-5", True), ("claude-3-7-sonnet-latest", True)):
        client = FakeClaude(script()).client()
        if accepted:
            assert client.messages.create(**{**body, "model": model}).content
        else:
            with pytest.raises(anthropic.BadRequestError,
                               match="does not support assistant message prefill"):
                client.messages.create(**{**body, "model": model})
    # a scenario (or FakeClaude) can name the models that accept it
    client = FakeClaude(script(), prefill_models=("claude-sonnet-5",)).client()
    assert client.messages.create(**body).content


def test_prefill_models_is_a_scenario_key(tmp_path):
    path = tmp_path / "s.toml"
    path.write_text('task = "t"\nexpected_final_answer = "x"\n'
                    'prefill_models = ["claude-sonnet-4-5"]\n[[turns]]\nfinal = "x"\n')
    sc = load_scenario(path)
    assert sc.prefill_models == ("claude-sonnet-4-5",)
    assert sc.build_world().model.prefill_models == ("claude-sonnet-4-5",)
    path.write_text('task = "t"\nexpected_final_answer = "x"\nprefill_models = [1]\n'
                    '[[turns]]\nfinal = "x"\n')
    with pytest.raises(Exception, match=r"prefill_models\[0\]"):
        load_scenario(path)


def test_redacted_thinking_blocks_come_back_unmodified_or_are_refused():
    fake = FakeClaude(Script(task=TASK, turns=(
        Turn(thinking="Plan.", redacted_thinking="hidden reasoning",
             tool_calls=(ToolCall("refund", {"order_id": "O"}),)),
        Turn(final="done"))))
    client = fake.client()
    body = first(thinking=THINK, max_tokens=2048)
    reply = client.messages.create(**body)
    assert [b.type for b in reply.content] == ["thinking", "redacted_thinking", "tool_use"]
    blocks = [b.model_dump(exclude_none=True) for b in reply.content]
    result = {"role": "user", "content": [{"type": "tool_result",
                                           "tool_use_id": reply.content[-1].id,
                                           "content": "ok"}]}
    ok = client.messages.create(**{**body, "messages": body["messages"] + [
        {"role": "assistant", "content": blocks}, result]})
    assert ok.content[-1].text == "done"
    forged = [blocks[0], {**blocks[1], "data": blocks[1]["data"][:-4] + "AAAA"}, blocks[2]]
    with pytest.raises(anthropic.BadRequestError, match="Invalid `data` in `redacted_thinking`"):
        client.messages.create(**{**body, "messages": body["messages"] + [
            {"role": "assistant", "content": forged}, result]})


class OwnLoop:
    """A sync agent that runs its own event loop per request, with its own AsyncAnthropic
    (the SDK resolves its platform in a worker thread: a forked crash run must not wait for
    a thread it does not have)."""

    def __init__(self, env):
        self.env = env

    def run(self):
        async def go():
            client = anthropic.AsyncAnthropic()
            try:
                return await client.messages.create(model=self.env.model, max_tokens=64,
                                                    tools=TOOLS, messages=messages)
            finally:
                await client.close()

        messages = [{"role": "user", "content": self.env.task}]
        while True:
            reply = asyncio.run(go())
            messages.append({"role": "assistant", "content": [
                b.model_dump(exclude_none=True) for b in reply.content]})
            calls = [b for b in reply.content if b.type == "tool_use"]
            self.save(messages)  # a run that saves nothing is refused as untestable
            if not calls:
                return reply.content[-1].text
            messages.append({"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": c.id, "content": json.dumps(
                    self.env.services["payments"].submit(c.input, key=c.id))} for c in calls]})

    def save(self, messages):
        import os

        os.makedirs(str(self.env.workdir), exist_ok=True)
        with open(os.path.join(str(self.env.workdir), "log.json"), "w") as f:
            json.dump(messages, f)


def test_an_agent_running_its_own_event_loop_is_explored_without_hanging(stream_scenario):
    # the SDK internal this relies on: the platform is looked up lazily, in a thread
    assert anthropic.AsyncAnthropic(api_key="k")._platform is None
    report = explore(OwnLoop, stream_scenario, crash_model="process", crashes=1, timeout=20)
    [run] = report.runs
    assert len(run.explored) == len(run.kill_points) == len(run.verdicts) > 2
    assert not any("hung" in (v.explanation or "") or "timed out" in (v.explanation or "")
                   for f in run.failures for v in f.violations), report.counterexamples()


def test_the_pytest_fixture_checks_an_async_streaming_agent(pytester):
    """The plugin's fixture, on an agent whose `run` is a coroutine that streams."""
    pytester.makeini("[pytest]\n")
    (pytester.path / "streamed_refund.toml").write_text(STREAM_SCENARIO)
    pytester.makepyfile(test_async_agent="""
        import json, os
        import pytest

        TOOLS = [{"name": "refund", "input_schema": {"type": "object"}}]

        class Agent:
            def __init__(self, env):
                self.env = env
                self.path = os.path.join(str(env.workdir), "state.json")

            def save(self, messages):
                os.makedirs(self.env.workdir, exist_ok=True)
                with open(self.path + ".tmp", "w") as f:
                    json.dump(messages, f)
                os.replace(self.path + ".tmp", self.path)

            async def run(self):
                messages = json.load(open(self.path)) if os.path.exists(self.path) else \\
                    [{"role": "user", "content": self.env.task}]
                while True:
                    if messages[-1]["role"] == "user":
                        async with self.env.async_client.messages.stream(
                                model=self.env.model, max_tokens=512, tools=TOOLS,
                                messages=messages) as stream:
                            reply = await stream.get_final_message()
                        messages.append({"role": "assistant", "content": [
                            b.model_dump(exclude_none=True, exclude={"parsed_output"})
                            for b in reply.content]})
                    else:
                        calls = [b for b in messages[-1]["content"] if b["type"] == "tool_use"]
                        if not calls:
                            return messages[-1]["content"][-1]["text"]
                        messages.append({"role": "user", "content": [
                            {"type": "tool_result", "tool_use_id": c["id"], "content": json.dumps(
                                self.env.services["payments"].submit(c["input"], key=c["id"]))}
                            for c in calls]})
                    self.save(messages)

        def make_agent(env):
            return Agent(env)

        @pytest.mark.faultsim("streamed_refund.toml", agent=make_agent, crashes=1)
        def test_async(crash_safety):
            report = crash_safety.check()
            print("MIDSTREAM", sum(p.category == "mid-stream" for p in report.runs[0].explored))
        """)
    result = pytester.runpytest_subprocess("-s", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    assert int(re.search(r"MIDSTREAM (\d+)", result.stdout.str())[1]) >= 5
