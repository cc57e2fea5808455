"""Scenarios recorded, not hand-written: `faultsim scenario record` through the loopback
recording proxy (the upstream is always faultsim's own fake on 127.0.0.1, started here),
and `faultsim scenario from-messages`. A recorded scenario must replay to the same clean
run: the same tool calls, the same effects, the same final answer, on a user-style agent
(tests/recording_agent.py), streaming or not."""
from __future__ import annotations

import copy
import dataclasses
import json
import os
import tomllib
from pathlib import Path

import httpx2
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import faultsim
import recording_agent
from faultsim.cli import main
from faultsim.errors import UsageError
from faultsim.model import serve
from faultsim.recorder.messages import MessagesError, scenario_from_messages
from faultsim.recorder.proxy import RecordingProxy
from faultsim.recorder.record import RecordingFailed, record
from faultsim.recorder.toml_text import Unwritable, check, dumps, write
from faultsim.pipeline.runner import ScenarioRun
from faultsim.scenario import SECTIONS
from faultsim.scenario.validate import validate_file

AGENT_FILE = Path(recording_agent.__file__)

UPSTREAM = """
task = "Refund order ORD-7 in full and tell the customer."
expected_final_answer = "Refunded 12.00 for ORD-7 and emailed ada@example.com."

[fault_profile]
api_faults = [{ at = 1, kind = "529" }]   # the SDK retries through the proxy

[services.orders]
kind = "readonly"
records."ORD-7" = { customer = "ada@example.com", cents = 1200 }
[services.payments]
kind = "keyed"
[services.mailer]
kind = "blind"

[[turns]]
text = "Looking the order up."
tool_calls = [{ name = "lookup_order", input = { order_id = "ORD-7" } }]
[[turns]]
tool_calls = [
  { name = "refund", input = { order_id = "ORD-7", cents = 1200 } },
  { name = "email_customer", input = { to = "ada@example.com", text = "Paid.\\n\\"The desk\\"" } },
]
[[turns]]
final = "Refunded 12.00 for ORD-7 and emailed ada@example.com."
"""
ORDERS = {"orders": {"kind": "readonly",
                     "records": {"ORD-7": {"customer": "ada@example.com", "cents": 1200}}}}


@pytest.fixture
def upstream(tmp_path):
    path = tmp_path / "upstream.toml"
    path.write_text(UPSTREAM)
    return faultsim.load_scenario(path)


@pytest.fixture(autouse=True)
def fake_key(monkeypatch):
    # a client the agent builds itself reads its key from the environment; the fake's
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-faultsim-fake")
    monkeypatch.delenv("ANTHROPIC_BASE_URL", raising=False)


def effects(entries):
    """What an effect did, without the idempotency key (it carries the scenario's id)."""
    return [(e.service, e.op, json.dumps(e.params, sort_keys=True), e.outcome)
            for e in entries]


def script_of(scenario):
    return [([(c.name, c.input) for c in t.tool_calls], t.text, t.final)
            for t in scenario.script.turns]


# -- record: the round trip ------------------------------------------------------------------
@pytest.mark.parametrize("factory", ["make_agent", "make_streaming_agent"])
def test_a_recorded_scenario_replays_to_the_same_clean_run(upstream, tmp_path, factory):
    make = getattr(recording_agent, factory)
    world = upstream.build_world()
    with serve(world.model) as endpoint:
        rec = record(make, upstream.task, upstream=endpoint.base_url,
                     scenario_id="refunds_recorded", services=ORDERS)
    # every request went through the proxy, one 529 retried, the answers as asked
    assert [e.status for e in rec.exchanges] == [200, 529, 200, 200]
    assert all(e.stream == (factory == "make_streaming_agent") for e in rec.exchanges
               if e.status == 200)
    assert [r.status for r in world.model.requests] == [200, 529, 200, 200]
    # services: the given one, the others inferred from their faultsim.effect
    assert rec.document["services"] == {**ORDERS, "payments": {"kind": "keyed"},
                                        "mailer": {"kind": "blind"}}
    assert rec.services["payments"].startswith("inferred") and \
        rec.services["mailer"].startswith("inferred")

    out = tmp_path / "refunds_recorded.toml"
    write(rec.document, str(out))
    assert validate_file(out) == []
    recorded = faultsim.load_scenario(out)
    assert recorded.id == "refunds_recorded" and recorded.task == upstream.task
    assert script_of(recorded) == script_of(upstream)
    assert recorded.expected_final_answer == upstream.expected_final_answer

    replay = faultsim.run_once(recorded, make)
    assert replay.outcome.status == "completed"
    assert replay.outcome.final_answer == rec.final_answer == recorded.expected_final_answer
    assert effects(replay.world.ledger.entries) == effects(rec.effects)
    assert len(effects(rec.effects)) == 3
    fake = replay.world.model
    assert fake.script_errors == [] and fake.invalid_requests == [] and \
        fake.repeated_requests() == []
    # the replay was served turn by turn: the same calls in the same order
    assert [r.position for r in fake.requests] == [0, 1, 2]
    # and the hand-written scenario it was recorded from does the same
    assert effects(faultsim.run_once(upstream, make).world.ledger.entries) == \
        effects(rec.effects)
    # `faultsim run` takes it: its golden run's guard (two clean runs alike, the expected
    # answer, every service reached, durable state) passes; no kill point explored here
    report = faultsim.explore(make, recorded, only=lambda point: False, crashes=1,
                              crash_model="process", workers=0)
    assert report.ok and len(report.runs[0].kill_points) > 20


def test_record_from_the_command_line(upstream, tmp_path, capsys, monkeypatch):
    """As the reference page shows it: its command (the upstream aside), its output."""
    monkeypatch.chdir(tmp_path)
    Path("services.toml").write_text(  # the readonly data the lookups find
        '[services.orders]\nkind = "readonly"\n'
        'records."ORD-7" = { customer = "ada@example.com", cents = 1200 }\n')
    command = next(b for b in _blocks("") if "--agent recording_agent:" in b)
    argv = command.replace("\\\n", " ").split()
    at = argv.index("--upstream")
    world = upstream.build_world()
    with serve(world.model) as endpoint:
        argv[at + 1] = endpoint.base_url
        code = main([a.strip('"') for a in _quoted(argv)][1:])
    err = capsys.readouterr().err
    assert code == 0, err
    assert err == next(b for b in _blocks("") if b.startswith("faultsim: wrote refunds.toml"))
    text = Path("refunds.toml").read_text()
    assert text.startswith("# Recorded by `faultsim scenario record` from agent "
                           "recording_agent:make_streaming_agent: 4 model requests, effects: "
                           "orders read x1, payments submit x1, mailer send x1.\n")
    assert main(["validate", "refunds.toml"]) == 0
    assert script_of(faultsim.load_scenario("refunds.toml")) == script_of(upstream)


def _quoted(argv):
    """Words of a shell line with "quoted words" joined back together."""
    out, open_ = [], None
    for word in argv:
        if open_ is not None:
            open_.append(word)
            if word.endswith('"'):
                out.append(" ".join(open_))
                open_ = None
        elif word.startswith('"') and not (word.endswith('"') and len(word) > 1):
            open_ = [word]
        else:
            out.append(word)
    return out


def test_the_upstream_defaults_to_anthropic_base_url(upstream, monkeypatch, capsys):
    world = upstream.build_world()
    with serve(world.model) as endpoint:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", endpoint.base_url)
        code = main(["scenario", "record", "--agent", f"{AGENT_FILE}:make_agent",
                     "--task", upstream.task, "--service", "orders=readonly",
                     "--service", "ledger=queryable"])
    out = capsys.readouterr()
    assert code == 0, out.err
    assert tomllib.loads(out.out)["services"]["orders"] == {"kind": "readonly"}
    assert "ledger" not in tomllib.loads(out.out)["services"]
    assert "  service ledger: given, never reached: left out\n" in out.err
    assert len(world.model.requests) == 4  # it went to the endpoint named there
    assert os.environ["ANTHROPIC_BASE_URL"] == endpoint.base_url  # restored


class _Says:
    def __init__(self, env, answer):
        self.env, self.answer = env, answer

    def run(self):
        if self.answer is None:
            raise RuntimeError("the database is gone")
        return self.answer


@pytest.mark.parametrize("answer, expected", [
    ("done", "never got a model answer through the recording proxy"),
    (None, "the agent failed while recording: RuntimeError: the database is gone"),
    (faultsim.Outcome("escalated", None, escalation="a person decides"),
     "ended escalated without a final answer (a person decides)"),
])
def test_a_run_that_cannot_be_a_scenario_is_refused(upstream, answer, expected):
    world = upstream.build_world()
    with serve(world.model) as endpoint:
        with pytest.raises(RecordingFailed) as info:
            record(lambda env: _Says(env, answer), upstream.task, upstream=endpoint.base_url)
    assert expected in str(info.value)


def test_a_task_the_agent_does_not_send_is_refused(upstream):
    world = upstream.build_world()
    with serve(world.model) as endpoint:
        with pytest.raises(RecordingFailed, match="no request's first user message carries "
                                                  "the task 'Refund ORD-7, please.'"):
            # the upstream's script still matches: the agent's prompt carries its task
            record(lambda env: recording_agent.make_agent(
                       dataclasses.replace(env, task=upstream.task)), "Refund ORD-7, please.",
                   upstream=endpoint.base_url, services=ORDERS)


def test_no_api_key_is_a_one_line_error(upstream, monkeypatch, capsys):
    monkeypatch.delenv("ANTHROPIC_API_KEY")
    monkeypatch.delenv("ANTHROPIC_AUTH_TOKEN", raising=False)
    with serve(upstream.build_world().model) as endpoint:
        code = main(["scenario", "record", "--agent", f"{AGENT_FILE}:make_agent",
                     "--task", upstream.task, "--upstream", endpoint.base_url])
    err = capsys.readouterr().err
    # the SDK says so when the client is made (older releases: a usage error, exit 2) or
    # at its first request (the agent's run fails, exit 1); one line either way
    assert code in (1, 2) and len(err.strip().splitlines()) == 1, err
    assert "api_key" in err, err


def test_bad_service_flags_and_upstreams_are_one_line_errors(tmp_path, capsys):
    for argv, expected in [
        (["--service", "billing"], "--service 'billing': expected NAME=KIND"),
        (["--service", "billing=paid"], "KIND one of keyed, queryable, blind, readonly"),
        (["--upstream", "ftp://example.com"], "upstream 'ftp://example.com': expected an "
                                              "http:// or https:// URL"),
        (["--services-from", str(tmp_path / "none.toml")], "none.toml: (file): no such services"),
    ]:
        code = main(["scenario", "record", "--agent", f"{AGENT_FILE}:make_agent",
                     "--task", "x", *argv])
        err = capsys.readouterr().err
        assert code == 2 and expected in err and len(err.strip().splitlines()) == 1, err


# -- the proxy: answers through as they came -------------------------------------------------
def _post(base_url, body):
    with httpx2.Client() as client:
        with client.stream("POST", base_url + "/v1/messages", json=body,
                           headers={"x-api-key": "sk-ant-faultsim-fake",
                                    "anthropic-version": "2023-06-01"}) as response:
            return response.status_code, dict(response.headers), b"".join(
                response.iter_raw())


@pytest.mark.parametrize("stream", [False, True])
def test_the_proxy_passes_answers_through_byte_for_byte(upstream, stream):
    body = {"model": upstream.model, "max_tokens": 256, "stream": stream,
            "tools": recording_agent.TOOLS,
            "messages": [{"role": "user", "content": upstream.task}]}
    direct_world, proxied_world = upstream.build_world(), upstream.build_world()
    with serve(direct_world.model) as direct:
        direct_answer = _post(direct.base_url, body)
    with serve(proxied_world.model) as endpoint, RecordingProxy(endpoint.base_url) as proxy:
        proxied_answer = _post(proxy.base_url, body)
    assert proxied_answer[0] == direct_answer[0] == 200
    assert proxied_answer[2] == direct_answer[2]  # every byte, every event
    for header in ("content-type", "request-id"):
        assert proxied_answer[1][header] == direct_answer[1][header]
    (exchange,) = proxy.exchanges
    assert exchange.stream is stream and exchange.complete and exchange.is_message
    if not stream:
        assert exchange.response == json.loads(direct_answer[2])
    assert [b["name"] for b in exchange.response["content"] if b["type"] == "tool_use"] == \
        ["lookup_order"]
    assert exchange.response["content"][1]["input"] == {"order_id": "ORD-7"}
    assert exchange.response["stop_reason"] == "tool_use"
    assert "x-api-key" not in json.dumps(exchange.request)  # headers are never kept


def test_an_upstream_error_and_a_cut_stream_reach_the_client_as_they_were(tmp_path):
    path = tmp_path / "cut.toml"
    path.write_text(UPSTREAM.replace('{ at = 1, kind = "529" }',
                                     '{ at = 0, kind = "529" }, { at = 1, kind = "stream_cut" }'))
    sc = faultsim.load_scenario(path)
    body = {"model": sc.model, "max_tokens": 256, "tools": recording_agent.TOOLS,
            "messages": [{"role": "user", "content": sc.task}]}
    world = sc.build_world()
    with serve(world.model) as endpoint, RecordingProxy(endpoint.base_url) as proxy:
        status, headers, content = _post(proxy.base_url, body)
        assert status == 529 and headers["retry-after-ms"] == "1"
        assert json.loads(content)["error"]["type"] == "overloaded_error"
        status, _, _ = _post(proxy.base_url, body)  # turn 1, now answered
        calls = [{"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_s_01_1",
                                                    "name": "lookup_order",
                                                    "input": {"order_id": "ORD-7"}}]},
                 {"role": "user", "content": [{"type": "tool_result",
                                               "tool_use_id": "toolu_s_01_1",
                                               "content": "{}"}]}]
        with pytest.raises(httpx2.RemoteProtocolError):
            _post(proxy.base_url, {**body, "stream": True,
                                   "messages": body["messages"] + calls})
    assert [(e.status, e.complete) for e in proxy.exchanges] == \
        [(529, True), (200, True), (200, False)]
    assert not proxy.exchanges[2].is_message and "stream cut" in proxy.exchanges[2].error


def test_the_proxy_stops_its_server_and_threads(upstream):
    import threading

    body = {"model": upstream.model, "max_tokens": 8, "tools": recording_agent.TOOLS,
            "messages": [{"role": "user", "content": upstream.task}]}
    with serve(upstream.build_world().model) as endpoint:
        proxy = RecordingProxy(endpoint.base_url).start()
        client = httpx2.Client()  # keeps its connection open, as the SDK's pool does
        try:
            assert client.post(proxy.base_url + "/v1/messages", json=body).status_code == 200
            serving = proxy.threads
            assert len(serving) == 1 and serving[0].is_alive()
            proxy.close()
            assert not serving[0].is_alive() and proxy.threads == []
            assert not [t for t in threading.enumerate()
                        if t.name == "faultsim-recording-proxy"]
        finally:
            client.close()
    with pytest.raises(httpx2.ConnectError):
        httpx2.post(proxy.base_url + "/v1/messages", json={})


# -- from-messages ---------------------------------------------------------------------------
def test_from_messages_round_trip_through_a_run_of_the_agent(upstream, tmp_path, capsys):
    """The conversation the agent keeps in its workdir, made a scenario, replays to the
    same run as the scenario that produced it."""
    with ScenarioRun(upstream, recording_agent.make_agent, workdir=tmp_path / "work") as run:
        run.incarnation()
        first = run.record
    kept = json.loads((tmp_path / "work" / "conversation.json").read_text())
    messages = tmp_path / "messages.json"
    messages.write_text(json.dumps({"model": upstream.model, "messages": kept["messages"]}))
    out = tmp_path / "from_messages.toml"
    assert main(["scenario", "from-messages", str(messages), "--out", str(out),
                 "--services-from", str(tmp_path / "upstream.toml")]) == 0
    assert "3 turns (3 tool calls)" in capsys.readouterr().err
    assert main(["validate", str(out)]) == 0
    made = faultsim.load_scenario(out)
    # the task is the first message as the agent sent it: its prompt around the task
    assert made.task == recording_agent.PROMPT.format(task=upstream.task)
    assert script_of(made) == script_of(upstream)
    again = faultsim.run_once(made, recording_agent.make_agent)
    assert again.outcome.final_answer == first.outcome.final_answer
    assert effects(again.world.ledger.entries) == effects(first.world.ledger.entries)
    assert again.world.model.script_errors == []


def test_from_messages_keeps_text_thinking_and_parallel_calls(tmp_path, capsys):
    messages = [
        {"role": "user", "content": [{"type": "text", "text": "Tag "},
                                     {"type": "text", "text": "the tickets."}]},
        {"role": "assistant", "content": [
            {"type": "thinking", "thinking": "Two at once.", "signature": "x"},
            {"type": "redacted_thinking", "data": "opaque"},
            {"type": "text", "text": "Tagging both."},
            {"type": "tool_use", "id": "a", "name": "tag",
             "input": {"id": "T-1", "tags": ["bug", "ui"], "weight": 0.5,
                       "meta": {"urgent": True, "odd key": [{"n": 1}]}}},
            {"type": "tool_use", "id": "b", "name": "tag", "input": {"id": "T-2"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "a"}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "b"},
                                     {"type": "text", "text": "(both done)"}]},
        {"role": "assistant", "content": "Both tagged."},
    ]
    path = tmp_path / "m.json"
    path.write_text(json.dumps(messages))
    assert main(["scenario", "from-messages", str(path)]) == 0
    text = capsys.readouterr().out
    assert check(text) == []
    doc = tomllib.loads(text)
    assert doc["task"] == "Tag the tickets."
    assert doc["turns"][0] == {"text": "Tagging both.", "thinking": "Two at once.",
                               "tool_calls": [{"name": "tag",
                                               "input": messages[1]["content"][3]["input"]},
                                              {"name": "tag", "input": {"id": "T-2"}}]}
    assert doc["turns"][1] == {"final": "Both tagged."}


BAD = [
    ("not json", "(syntax) line 1: expected JSON"),
    ("{}", "messages: expected a list of messages (missing"),
    ("[]", "messages: expected a non-empty list of messages, got []"),
    ('"hi"', "(top level): expected a list of messages or an object"),
    ('[3]', "messages[0]: expected an object {role, content}, got 3"),
    ('[{"role": "system", "content": "x"}]', "messages[0].role: expected 'user' or "
                                              "'assistant', got 'system'"),
    ('[{"role": "assistant", "content": "x"}]', "messages[0].role: expected 'user'"),
    ('[{"role": "user", "content": 3}]', "messages[0].content: expected a string or a list"),
    ('[{"role": "user", "content": ["x"]}]', "messages[0].content[0]: expected a content "
                                             "block"),
    ('[{"role": "user", "content": "  "}, {"role": "assistant", "content": "a"}]',
     "messages[0].content: expected the task in words"),
    ('[{"role": "user", "content": "t"}]', "messages[0]: expected a final answer (an "
                                           "assistant message without tool calls) at the "
                                           "end, got a user message"),
    ('[{"role": "user", "content": "t"}, {"role": "assistant", "content": [{"type": '
     '"tool_use", "id": "u", "input": {}}]}]', "messages[1].content[0].name: expected a "
                                               "tool name, got nothing"),
    ('[{"role": "user", "content": "t"}, {"role": "assistant", "content": [{"type": '
     '"tool_use", "id": "u", "name": "n", "input": [1]}]}]',
     "messages[1].content[0].input: expected an object of inputs, got [1]"),
    ('[{"role": "user", "content": "t"}, {"role": "assistant", "content": [{"type": '
     '"tool_use", "id": "u", "name": "n", "input": {"a": {"b": null}}}]}]',
     "messages[1].content[0].input.a.b: expected a value TOML can write, got null"),
    ('[{"role": "user", "content": "t"}, {"role": "assistant", "content": [{"type": '
     '"tool_use", "name": "n", "input": {}}]}]', "messages[1].content[0].id: expected the "
                                                 "tool-use id"),
    ('[{"role": "user", "content": "t"}, {"role": "assistant", "content": [{"type": '
     '"server_tool_use", "id": "u", "name": "web_search", "input": {}}]}]',
     "messages[1].content[0].type: expected one of text, tool_use, thinking, "
     "redacted_thinking"),
    ('[{"role": "user", "content": "t"}, {"role": "assistant", "content": [{"type": '
     '"tool_use", "id": "u", "name": "n", "input": {}}]}, {"role": "user", "content": [{'
     '"type": "tool_result", "tool_use_id": "v"}]}, {"role": "assistant", "content": "d"}]',
     "messages[2]: expected a tool_result for 'u' (messages[1].content[0]), as the API "
     "requires; it has v"),
    ('[{"role": "user", "content": "t"}, {"role": "assistant", "content": [{"type": '
     '"tool_use", "id": "u", "name": "n", "input": {}}]}]',
     "messages[1]: expected a final answer (an assistant message without tool calls) at "
     "the end, got tool calls nobody answered"),
    ('[{"role": "user", "content": "t"}, {"role": "assistant", "content": "a"}, '
     '{"role": "user", "content": "and now?"}, {"role": "assistant", "content": "b"}]',
     "messages[2]: expected the end of the conversation: messages[1] is an answer without "
     "tool calls"),
    ('[{"role": "user", "content": "t"}, {"role": "assistant", "content": [{"type": '
     '"thinking", "thinking": "hm"}]}]', "messages[1]: expected text in an answer without "
                                         "tool calls"),
]


@pytest.mark.parametrize("content, expected", BAD, ids=[e.split(":")[0] for _, e in BAD])
def test_malformed_messages_are_one_line_errors_naming_file_and_place(
        tmp_path, capsys, content, expected):
    path = tmp_path / "m.json"
    path.write_text(content)
    out = tmp_path / "never.toml"
    code = main(["scenario", "from-messages", str(path), "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 2 and not out.exists()
    assert err.count("\n") == 1 and err.startswith(f"faultsim: error: {path}: "), err
    assert expected in err, err


def test_a_missing_messages_file_is_named(tmp_path, capsys):
    assert main(["scenario", "from-messages", str(tmp_path / "none.json")]) == 2
    assert f"{tmp_path / 'none.json'}: (file): no such file" in capsys.readouterr().err


# -- the TOML writer: the format's own table -------------------------------------------------
def test_the_writer_follows_sections_and_refuses_what_it_lists_not():
    doc = {"turns": [{"final": "done", "thinking": "t"}],
           "services": {"a b": {"key_retention_hours": 2, "kind": "keyed"}},
           "expected_final_answer": "done", "model": "m", "task": "go",
           "fault_profile": {"crashes": 1, "api_faults": [{"at": 0, "kind": "529"}]}}
    text = dumps(doc)
    assert tomllib.loads(text) == doc and check(text) == []
    keys = [line.split(" =")[0] for line in text.splitlines() if " = " in line
            and not line.startswith(" ")]
    order = list(SECTIONS["scenario"])
    top = [k for k in keys if k in order][:3]
    assert top == sorted(top, key=order.index) == ["task", "expected_final_answer", "model"]
    assert '[services."a b"]' in text
    assert text.index("kind =") < text.index("key_retention_hours =")  # SECTIONS' order
    with pytest.raises(ValueError, match=r"\['color'\] are not keys of \[turn\]"):
        dumps({**doc, "turns": [{"final": "x", "color": "red"}]})


def test_a_document_the_format_refuses_is_never_written(tmp_path):
    out = tmp_path / "x.toml"
    with pytest.raises(UsageError,
                       match="does not validate: turns: ") as info:
        write({"task": "t", "expected_final_answer": "x", "turns": []}, str(out),
              source="here")
    assert str(info.value).startswith("here: ") and not out.exists()
    with pytest.raises(Unwritable, match=r"turns\[0\].tool_calls\[0\].input.k: null"):
        dumps({"task": "t", "expected_final_answer": "x",
               "turns": [{"tool_calls": [{"name": "n", "input": {"k": None}}]}]})


_text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=12)
_json = st.recursive(st.booleans()
                     | st.integers(-2**63, 2**63 - 1)
                     | st.floats(allow_nan=False) | _text,
                     lambda inner: st.lists(inner, max_size=3)
                     | st.dictionaries(_text, inner, max_size=3), max_leaves=8)


@settings(max_examples=60, deadline=None, database=None)
@given(st.dictionaries(_text, _json, max_size=4), _text.filter(str.strip))
def test_any_tool_input_and_text_survive_the_writer(tool_input, text):
    doc = {"task": text, "expected_final_answer": text,
           "turns": [{"text": text, "tool_calls": [{"name": "n", "input": tool_input}]},
                     {"final": text}]}
    written = dumps(doc)
    assert tomllib.loads(written) == doc
    assert check(written) == []


def test_messages_errors_are_usage_errors():
    with pytest.raises(MessagesError) as info:
        scenario_from_messages([], "f.json")
    assert isinstance(info.value, UsageError)


# -- sub-agents: a conversation of its own, by its first message -----------------------------
DELEGATING = """
task = "Decide on the refund for ORD-9."
expected_final_answer = "ORD-9: full refund, per the policy."

[subagents.policy]
task = "Find the refund policy for damaged goods."
[[subagents.policy.turns]]
final = "Damaged goods: full refund within 30 days."

[[turns]]
tool_calls = [{ name = "delegate", input = { task = "Find the refund policy for damaged goods." } }]
[[turns]]
final = "ORD-9: full refund, per the policy."
"""
DELEGATE = [{"name": "delegate", "description": "Hand a sub-task to a helper.",
             "input_schema": {"type": "object", "properties": {"task": {"type": "string"}},
                              "required": ["task"]}}]


class DelegatingAgent:
    """Runs each delegated sub-task as a conversation of its own (no durable state: the
    recording tests run it once, cleanly)."""

    def __init__(self, env):
        self.env = env

    def converse(self, task, tools):
        messages = [{"role": "user", "content": task}]
        while True:
            reply = self.env.client.messages.create(model=self.env.model, max_tokens=256,
                                                    messages=messages, **tools)
            messages.append({"role": "assistant", "content": [
                b.model_dump(exclude_none=True) for b in reply.content]})
            calls = [b for b in reply.content if b.type == "tool_use"]
            if not calls:
                return "".join(b.text for b in reply.content if b.type == "text")
            messages.append({"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": c.id,
                 "content": self.converse(c.input["task"], {})} for c in calls]})

    def run(self):
        return self.converse(self.env.task, {"tools": DELEGATE})


def test_a_sub_agents_conversation_is_recorded_as_a_sub_agent(tmp_path):
    path = tmp_path / "delegating.toml"
    path.write_text(DELEGATING)
    sc = faultsim.load_scenario(path)
    world = sc.build_world()
    with serve(world.model) as endpoint:
        rec = record(DelegatingAgent, sc.task, upstream=endpoint.base_url)
    assert rec.document["subagents"] == {"sub1": {
        "task": "Find the refund policy for damaged goods.",
        "turns": [{"final": "Damaged goods: full refund within 30 days."}]}}
    out = tmp_path / "delegating_recorded.toml"
    write(rec.document, str(out))
    recorded = faultsim.load_scenario(out)
    assert script_of(recorded) == script_of(sc)
    replay = faultsim.run_once(recorded, DelegatingAgent)
    assert replay.outcome.final_answer == sc.expected_final_answer
    assert [(r.script, r.position) for r in replay.world.model.requests] == \
        [("s", 0), ("sub1", 0), ("s", 1)]


# -- the reference page shows what the commands do ------------------------------------------
PAGE = Path(__file__).resolve().parent.parent / "docs" / "reference" / "scenario-record.md"


def _blocks(lang):
    """The page's fenced blocks of `lang` ("": no language), in order."""
    found, current = [], None
    for line in PAGE.read_text().splitlines(keepends=True):
        if line.startswith("```"):
            if current is None:
                current = [] if line.strip() == "```" + lang else False
            else:
                if current is not False:
                    found.append("".join(current))
                current = None
        elif isinstance(current, list):
            current.append(line)
    return found


def test_the_reference_pages_from_messages_example_is_what_the_command_writes(
        tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (example,), (written,) = _blocks("json"), _blocks("toml")
    Path("messages.json").write_text(example)
    command = _blocks("")[0].replace("\\\n", " ").split()
    assert command[:3] == ["faultsim", "scenario", "from-messages"]
    assert main(command[1:]) == 0
    assert Path("refunds.toml").read_text() == written
    errors = [line for line in _blocks("")[1].splitlines() if line]
    base = json.loads(example)
    mutated = [copy.deepcopy(base) for _ in range(3)]
    mutated[0]["messages"][4]["content"][0]["tool_use_id"] = "toolu_09"
    mutated[1]["messages"][3]["content"][1]["input"]["text"] = None
    mutated[2]["messages"][1]["content"][0]["type"] = "server_tool_use"
    capsys.readouterr()
    for doc, shown in zip(mutated, errors, strict=True):
        Path("messages.json").write_text(json.dumps(doc))
        assert main(["scenario", "from-messages", "messages.json"]) == 2
        assert capsys.readouterr().err.strip() == shown


def test_an_upstream_named_by_host_name_is_reached_at_its_address(upstream, monkeypatch):
    """The network guard checks the proxy's connections by address: the upstream's name
    must let the proxy reach the addresses it resolves to. (Here a made-up name resolves to
    the loopback fake, which faultsim then no longer counts as its own.)"""
    import socket

    from faultsim.interpose import netguard

    real = socket.getaddrinfo

    def resolve(host, port, *args, **kwargs):
        return real("127.0.0.1" if host == "upstream.test" else host, port, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", resolve)
    world = upstream.build_world()
    with serve(world.model) as endpoint:
        port = int(endpoint.base_url.rsplit(":", 1)[1])
        netguard.stopped("127.0.0.1", port)  # as a server faultsim does not run
        try:
            rec = record(recording_agent.make_agent, upstream.task, services=ORDERS,
                         upstream=f"http://upstream.test:{port}")
        finally:
            netguard.serving("127.0.0.1", port)  # as it was, for the endpoint's close()
    assert [e.status for e in rec.exchanges] == [200, 529, 200, 200]
    assert len(world.model.requests) == 4


def test_what_the_writer_writes_conforms_to_the_json_schema():
    """The JSON Schema is made from the same table (faultsim.scenario.schema)."""
    jsonschema = pytest.importorskip("jsonschema")
    from faultsim.scenario.schema import schema

    page = tomllib.loads(_blocks("toml")[0])
    full = {"task": "t", "expected_final_answer": "done", "model": "claude-sonnet-4-5",
            "services": {"orders": {"kind": "readonly", "records": {"O-1": {"n": 1}}},
                         "pay": {"kind": "keyed", "key_retention_hours": 2}},
            "turns": [{"text": "a", "thinking": "b",
                       "tool_calls": [{"name": "n", "input": {"x": [1, {"y": 2.5}]}}]},
                      {"final": "done"}],
            "subagents": {"sub1": {"task": "u", "turns": [{"final": "v"}]}}}
    for doc in (page, full):
        written = tomllib.loads(dumps(doc))
        jsonschema.validate(written, schema())
        assert check(dumps(doc)) == []
    with pytest.raises(jsonschema.ValidationError):  # and the schema does refuse
        jsonschema.validate({**full, "turns": [{"final": "x", "color": 1}]}, schema())
