"""The OpenAI Agents SDK adapter: the user's Agent explored unchanged, its conversation in a
Session or its pause in a RunState file.

Each guard is shown to be able to fail: the bundled agents (examples/openai_agents) hold
every invariant and each planted mistake breaks the invariant it names there; here, the
internals the adapter relies on, its model route, its determinism, that the SDK reaches no
network, and whether openai-agents-python#1704's state is reached.
"""
from __future__ import annotations

import asyncio
import inspect
import json
import random
import socket
import sys
import threading
from pathlib import Path

import pytest

pytest.importorskip("agents", reason="openai-agents is not installed "
                    "(pip install 'faultsim[openai-agents]')")

import agents  # noqa: E402
from agents import Agent, Runner, function_tool  # noqa: E402

import faultsim  # noqa: E402
from faultsim.adapters.openai_agents import FakeClaudeModel, agent_factory, sqlite_session  # noqa: E402
from faultsim.adapters.openai_agents.adapter import _Inline, _seeded_ids  # noqa: E402
from faultsim.inprocess.sandbox import Explorer  # noqa: E402
from faultsim.killpoints import categories, kill_points  # noqa: E402
from faultsim.reports.text import states  # noqa: E402
from faultsim.pipeline.runner import ScenarioRun  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "openai_agents"
BILLING = faultsim.load_scenario(EXAMPLE / "scenario.toml")
APPROVAL = faultsim.load_scenario(EXAMPLE / "approval.toml")
sys.path.insert(0, str(EXAMPLE))
import approval_agent  # noqa: E402
import session_agent  # noqa: E402


def _env(scenario, world) -> faultsim.AgentEnv:
    return faultsim.AgentEnv(workdir=Path("."), client=world.model.client(),
                             services=world.services, clock=world.clock, task=scenario.task,
                             task_id=scenario.id, model=scenario.model, incarnation=1,
                             async_factory=world.model.async_client)


# -- the internals the adapter relies on (openai-agents 0.24.x) ---------------------------
def test_the_openai_agents_internals_the_adapter_uses_are_where_it_expects():
    """Fails loudly when an upgrade moves them: pin the new minor version only after
    adapting faultsim/adapters/openai_agents to it."""
    from agents import RunHooks, RunState, SQLiteSession
    from agents.models.chatcmpl_converter import Converter
    from agents.models.interface import Model

    version = agents.__version__
    assert version.startswith("0.24."), f"openai-agents {version}: the adapter is pinned to 0.24"
    # the model interface FakeClaudeModel implements
    assert list(inspect.signature(Model.get_response).parameters) == [
        "self", "system_instructions", "input", "model_settings", "tools", "output_schema",
        "handoffs", "tracing", "previous_response_id", "conversation_id", "prompt"]
    # the converter LitellmModel uses, both ways, thinking blocks included
    params = inspect.signature(Converter.items_to_messages).parameters
    assert {"preserve_thinking_blocks", "preserve_tool_output_all_content", "model"} <= set(params)
    assert "provider_data" in inspect.signature(Converter.message_to_output_items).parameters
    assert 'reasoning_provider_data["thinking_blocks"]' in inspect.getsource(
        Converter.message_to_output_items)
    # sync tools and SQLiteSession's database work go through asyncio.to_thread: the inline
    # executor is what keeps them on the loop's thread
    import agents.memory.sqlite_session as sqlite_mod
    import agents.tool as tool_mod
    assert "asyncio.to_thread(the_func" in inspect.getsource(tool_mod)
    assert "asyncio.to_thread(_add_items_sync)" in inspect.getsource(sqlite_mod)
    assert "sqlite3.connect(" in inspect.getsource(SQLiteSession)
    # ids drawn from uuid4 imported by name; the RunState and approval API
    import uuid

    import agents.run_state as run_state_mod
    assert run_state_mod.uuid4 is uuid.uuid4 or run_state_mod.uuid4.__name__ == "uuid4"
    for name in ("to_json", "from_string", "approve", "reject", "get_interruptions"):
        assert callable(getattr(RunState, name)), name
    assert list(inspect.signature(RunHooks.on_tool_start).parameters) == [
        "self", "context", "agent", "tool"]
    assert list(inspect.signature(RunHooks.on_tool_end).parameters) == [
        "self", "context", "agent", "tool", "result"]


# -- the factory ---------------------------------------------------------------------------
@pytest.mark.parametrize("options, field", [
    ({"state": "s.json", "resume": "restart"}, "resume 'restart'"),
    ({"state": "/abs/state.json"}, "state '/abs/state.json'"),
    ({"state": "../up.json"}, "state '../up.json'"),
    ({}, "session and state both None"),
    ({"session": sqlite_session("x"), "approve": bool}, "approve given without state"),
    ({"state": "s.json", "run_config": {"model": "gpt-4.1"}}, "run_config model")])
def test_a_wrong_option_is_one_line_naming_it(options, field):
    with pytest.raises(ValueError) as caught:
        agent_factory(approval_agent.build_agent, **options)
    assert str(caught.value).startswith(field) and "\n" not in str(caught.value)


def test_a_state_file_that_is_not_one_says_which_file(tmp_path):
    with ScenarioRun(APPROVAL, approval_agent.make_agent, workdir=tmp_path) as run:
        (tmp_path / "state.json").write_text('{"not": "a run state"}')
        with pytest.raises(ValueError) as caught:
            run.incarnation()
    assert str(caught.value).startswith("state.json: not an openai-agents RunState")
    assert "\n" not in str(caught.value)


def test_a_session_in_process_is_refused_in_one_line():
    """SQLite writes from C, below the in-process mode's fake file system: explored in
    process it would write to the real disk. Only a [store] kind = "sqlite" scenario
    (subprocess mode) may give an agent a database session."""
    plain = faultsim.load_scenario(EXAMPLE / "approval.toml")
    make = agent_factory(approval_agent.build_agent, session=sqlite_session("x"),
                         state="state.json", approve=approval_agent.person)
    with Explorer(make, plain) as ex, pytest.raises(Exception) as caught:
        ex.golden()
    assert "session: a database session needs the scenario's [store] kind = \"sqlite\"" in \
        str(caught.value)


def test_the_approval_pause_saves_a_run_state_the_sdk_reads_back(tmp_path):
    with ScenarioRun(APPROVAL, approval_agent.make_agent, workdir=tmp_path) as run:
        outcome = run.incarnation()
        again = run.incarnation()  # a restart after the run finished: nothing to redo
    assert outcome.final_answer == APPROVAL.expected_final_answer == again.final_answer
    assert len(run.world.model.requests) == 2  # the restart asked the model nothing
    assert len(run.world.ledger.applied("refunds")) == 1
    saved = json.loads((tmp_path / "state.json").read_text())
    assert saved["faultsim_final_output"] == APPROVAL.expected_final_answer
    del saved["faultsim_final_output"]
    state = asyncio.run(agents.RunState.from_string(approval_agent.build_agent(),
                                                    json.dumps(saved)))
    assert state.get_interruptions() == []


def test_unattended_the_pause_is_an_escalation_and_stays_one(tmp_path):
    with ScenarioRun(APPROVAL, approval_agent.make_agent_unattended, workdir=tmp_path) as run:
        first, second = run.incarnation(), run.incarnation()
    assert first.status == second.status == "escalated"
    assert "waiting for a person on refund_order" in first.escalation
    assert len(run.world.model.requests) == 1 and not run.world.ledger.applied("refunds")


# -- the model route -----------------------------------------------------------------------
def test_the_model_serves_the_script_through_the_sdk_converter_and_the_fake_checks_it():
    """FakeClaudeModel turns the SDK's items into a Messages request the fake accepts; a
    history whose thinking blocks were lost (the shape of openai-agents-python#1704) is
    refused by the fake as the API refuses it."""
    from agents import ModelSettings
    from agents.models.interface import ModelTracing
    from openai.types.shared import Reasoning

    world = BILLING.build_world()
    model = FakeClaudeModel(_env(BILLING, world))
    thinking = ModelSettings(reasoning=Reasoning(effort="low"))
    tools = session_agent.build_agent().tools

    async def ask(items, settings):
        return await model.get_response(None, items, settings, tools, None, [],
                                        ModelTracing.DISABLED, previous_response_id=None,
                                        conversation_id=None, prompt=None)
    task = [{"role": "user", "content": BILLING.task}]
    first = asyncio.run(ask(task, thinking))
    kinds = [item.type for item in first.output]
    assert kinds == ["reasoning", "message", "function_call"]
    call = first.output[-1]
    assert (call.name, json.loads(call.arguments)) == ("pay_invoice",
                                                       {"invoice": "INV-7", "amount_cents": 12000})
    history = task + [i.model_dump(exclude_unset=True) for i in first.output] + [
        {"type": "function_call_output", "call_id": call.call_id, "output": "{}"}]
    second = asyncio.run(ask(history, thinking))  # thinking blocks replayed: accepted
    assert second.output[-1].name == "send_email"
    lost = [i for i in history if i.get("type") != "reasoning"]
    import anthropic
    with pytest.raises(anthropic.BadRequestError, match="Expected `thinking` or "
                       "`redacted_thinking`, but found `text`"):
        asyncio.run(ask(lost, thinking))


def test_the_sdk_reaches_no_network_and_the_guard_would_see_it_if_it_did(tmp_path,
                                                                          monkeypatch):
    """Tracing is off and the model is faultsim's: a clean run of each example connects
    nowhere. The control: an Agent run on the SDK's default OpenAI model, under the same
    guard, is refused and reported."""
    connects: list = []
    original = socket.socket.connect

    def spy(sock, address):
        connects.append(address)
        return original(sock, address)
    monkeypatch.setattr(socket.socket, "connect", spy)
    from agents.tracing import get_trace_provider
    assert get_trace_provider()._disabled  # type: ignore[attr-defined]
    for scenario, make in ((APPROVAL, approval_agent.make_agent),
                           (BILLING, session_agent.make_agent)):
        with ScenarioRun(scenario, make, workdir=tmp_path / scenario.id) as run:
            assert run.incarnation().final_answer == scenario.expected_final_answer
        assert run.world.unrouted == []
    assert connects == []

    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")

    class OnOpenAI:
        def __init__(self, env):
            pass

        async def run(self):
            agent = Agent(name="plain", instructions="Say hi.")
            try:
                await Runner.run(agent, "hi", run_config=agents.RunConfig(
                    tracing_disabled=True, model_settings=agents.ModelSettings(
                        retry=None)), max_turns=1)
            except Exception as exc:  # the SDK gives up after its retries
                return f"refused: {type(exc).__name__}"
            return "reached"
    with ScenarioRun(APPROVAL, OnOpenAI, workdir=tmp_path / "control") as run:
        assert run.incarnation().final_answer.startswith("refused")
    assert any("api.openai.com" in u for u in run.world.unrouted), run.world.unrouted


# -- determinism ---------------------------------------------------------------------------
def test_sync_tools_and_session_work_run_on_the_loop_thread(tmp_path):
    seen: list = []

    def build() -> Agent:
        @function_tool
        def pay_invoice(invoice: str, amount_cents: int) -> str:
            """Pay."""
            seen.append(threading.current_thread())
            return "{}"

        @function_tool
        def send_email(to: str, body: str) -> str:
            """Send."""
            seen.append(threading.current_thread())
            return "{}"
        return Agent(name="billing", tools=[pay_invoice, send_email])

    import agents.memory.sqlite_session as sqlite_mod
    connected: list = []
    real = sqlite_mod.sqlite3.connect

    def connect(*args, **kwargs):
        connected.append(threading.current_thread())
        return real(*args, **kwargs)
    sqlite_mod.sqlite3.connect = connect
    try:
        with ScenarioRun(BILLING, agent_factory(build, session=sqlite_session("t")),
                         workdir=tmp_path) as run:
            assert run.incarnation().final_answer == BILLING.expected_final_answer
    finally:
        sqlite_mod.sqlite3.connect = real
    assert seen == [threading.main_thread()] * 2
    assert connected and set(connected) == {threading.main_thread()}
    # the SDK left to itself runs them on worker threads
    seen.clear()

    async def plain() -> None:
        await asyncio.to_thread(lambda: seen.append(threading.current_thread()))
    asyncio.run(plain())
    assert threading.main_thread() not in seen

    async def inline() -> None:
        asyncio.get_running_loop().set_default_executor(_Inline())
        await asyncio.to_thread(lambda: seen.append(threading.current_thread()))
    seen.clear()
    asyncio.run(inline())
    assert seen == [threading.main_thread()]


def test_sdk_ids_come_from_the_seeded_uuid4_inside_the_adapter():
    import agents.run_state as run_state_mod

    from faultsim.interpose.determinism import seeded

    def ids(adapter: bool) -> str:
        with seeded("7"):
            if not adapter:
                return str(run_state_mod.uuid4())
            with _seeded_ids():
                return str(run_state_mod.uuid4())
    assert ids(True) == ids(True)
    # the SDK's own name too: faultsim seeds the uuid4 function object itself, which a
    # `from uuid import uuid4` holds (faultsim.interpose.determinism)
    assert ids(False) == ids(False) == ids(True)
    assert run_state_mod.uuid4() != run_state_mod.uuid4()  # outside an incarnation: random


def test_the_same_seed_gives_the_same_report():
    def verdicts():
        report = faultsim.explore(approval_agent.make_agent_without_lookup, APPROVAL,
                                  agent_name="approval_agent:make_agent_without_lookup")
        return [(v.kill_point.id, sorted(x.explanation for x in v.violations))
                for v in report.runs[0].verdicts]
    random.seed(1)
    first = verdicts()
    assert any(violations for _, violations in first)
    random.seed(2)
    assert verdicts() == first


# -- kill points ---------------------------------------------------------------------------
def test_kill_points_land_at_model_answers_tools_effects_and_every_state_write():
    with Explorer(approval_agent.make_agent, APPROVAL) as ex:
        golden = ex.golden()  # two clean runs, compared event by event
    points = kill_points(golden.trace)
    counts = categories(points)
    assert counts["after-model-response"] >= 2 and counts["after-effect"] == 1
    at_tools = [p.id.split("-oa.", 1)[1] for p in points if "-oa.tool." in p.id]
    assert at_tools == ["tool.start-refund_order#1", "tool.end-refund_order#1"]
    # the adapter declares its marks' phases (killpoints.register_phases), as pydantic-ai's:
    # a kill after the SDK started a tool is inside it, after it ended is after the tool
    at = {p.id.split("-oa.", 1)[1]: p.category for p in points if "-oa.tool." in p.id}
    assert at == {"tool.start-refund_order#1": "in-tool",
                  "tool.end-refund_order#1": "after-tool"}
    writes = [e for e in golden.trace if e.kind == "fs.rename" and
              e.subject.endswith("state.json")]
    assert len(writes) == 3  # the pause, the person's decision, the end
    assert counts["mid-write"] > 0  # torn points inside every write (checkpoint-* once judged)
    effects = [e.subject for e in golden.trace if e.kind == "mark.tool.start"]
    assert effects == ["refund"]  # faultsim.effect's mark
    tools = [e.subject for e in golden.trace if e.kind == "mark.oa.tool.start"]
    assert tools == ["refund_order"]  # the adapter's, through the SDK's RunHooks


def test_a_mark_keeps_the_phase_its_adapter_declared():
    from faultsim.killpoints import register_phases, registered_phases

    assert registered_phases()["mark.oa.tool.end"] == "after-tool"
    register_phases({"mark.oa.tool.end": "after-tool"})  # the same again: fine
    with pytest.raises(ValueError, match="already the start of phase 'after-tool'"):
        register_phases({"mark.oa.tool.end": "in-tool"})
    with pytest.raises(ValueError, match="not a kill-point category"):
        register_phases({"mark.elsewhere.x": "nowhere"})
    assert "mark.elsewhere.x" not in registered_phases()


# -- openai-agents-python#1704 -----------------------------------------------------------------
@pytest.mark.parametrize("name, reached", [("make_agent_thinking", False),
                                           ("make_agent_thinking_trimmed", True)])
def test_1704_is_reached_only_when_the_history_loses_its_reasoning_items(name, reached):
    """Claude's thinking with an SQLiteSession, killed after each commit of the session and
    resumed from the database. With 0.24's converter the resumed request still starts its
    last assistant turn with the signed thinking block: #1704's 400 is not reached (all 49
    kill points of this agent pass: examples/openai_agents/findings.py). A
    `session_input_callback` that keeps only messages and tool calls drops the reasoning
    items that carry those blocks: the clean run is unaffected (its history starts empty),
    and every resume after a commit meets #1704's error, reported as the run failing."""
    from faultsim.real.explore import explore_subprocess

    report = explore_subprocess(f"{EXAMPLE / 'session_agent.py'}:{name}", BILLING,
                                agent_name=f"session_agent:{name}", workers=1,
                                only=lambda p: p.category == "checkpoint-commit")
    [run] = report.runs
    assert len(run.verdicts) == 4  # the task, then each turn's items with their results
    failed = [v for f in run.failures for v in f.violations
              if v.invariant == "completes_or_escalates"]
    if not reached:
        assert run.failures == []
        return
    # the commits of the two tool turns (after the task's a fresh run; after the final
    # answer's nothing is left to ask)
    assert len(failed) == 2
    assert "Expected `thinking` or `redacted_thinking`, but found `text`" in \
        failed[0].explanation


# -- Runner.run_streamed -------------------------------------------------------------------
def test_a_streamed_run_is_killed_mid_stream_and_survives():
    """`stream=True` drives `Runner.run_streamed` over the fake's server-sent events: kill
    points land inside each stream, and the approval example holds there too."""
    report = faultsim.explore(approval_agent.make_agent_streamed, APPROVAL,
                              agent_name="approval_agent:make_agent_streamed")
    [run] = report.runs
    assert run.failures == []
    mid = [v for v in run.verdicts if v.kill_point.category == "mid-stream"]
    assert len(mid) >= 2  # inside each of the two answers
    with ScenarioRun(APPROVAL, approval_agent.make_agent_streamed) as clean:
        assert clean.incarnation().final_answer == APPROVAL.expected_final_answer
    assert [q.stream for q in clean.world.model.requests] == [True, True]


# -- several user turns (the scenario's follow_up) ---------------------------------------------
FOLLOW_UP = faultsim.load_scenario(ROOT / "tests" / "data" / "openai_followup.toml")
sys.path.insert(0, str(ROOT / "tests"))
import openai_followup_agent  # noqa: E402


def test_a_follow_up_goes_into_the_same_session_and_a_restart_redoes_nothing(tmp_path):
    with ScenarioRun(FOLLOW_UP, openai_followup_agent.make_agent, workdir=tmp_path) as run:
        first = run.incarnation()
        asked = len(run.world.model.requests)
        again = run.incarnation()  # after the last answer: nothing to send, nothing to ask
    assert first.final_answer == again.final_answer == FOLLOW_UP.expected_final_answer
    assert asked == len(run.world.model.requests) == 3  # the pause, the refund, the follow-up
    [said] = FOLLOW_UP.script.follow_ups
    last = run.world.model.requests[-1]
    assert (last.position, last.repeat) == (2, 0)  # the turn the follow-up opens, once
    assert [m.split(":")[0] for m in last.sent] == [
        "user", "assistant", "user", "assistant", "user"]
    assert said[:20] in last.sent[-1]  # sent once, after the first answer
    assert len(run.world.ledger.applied("refunds")) == 1


def test_follow_ups_without_a_session_are_refused_in_one_line(tmp_path):
    with ScenarioRun(FOLLOW_UP, openai_followup_agent.make_agent_state_only,
                     workdir=tmp_path) as run, pytest.raises(ValueError) as caught:
        run.incarnation()
    assert str(caught.value).startswith("follow-up turns (the scenario's follow_up) need "
                                        "session=") and "\n" not in str(caught.value)


def test_a_crash_in_either_user_turn_resumes_to_the_last_answer():
    """Killed at every kill point of both user turns but inside a write (the session's
    statements and commits, the RunState's writes and renames, the model's answers, the
    tool), resumed from the database and the state file: every crash state completes with
    the last turn's answer, the follow-up sent once. A saved final state of the first
    turn is not the end of the conversation: a restart after the second turn's answer was
    committed, before its final state was written, answers with the second turn's."""
    from faultsim.real.explore import explore_subprocess

    agent = f"{ROOT / 'tests' / 'openai_followup_agent.py'}:make_agent"
    report = explore_subprocess(agent, FOLLOW_UP, agent_name="openai_followup_agent:make_agent",
                                workers=1, only=lambda p: not p.torn)
    [run] = report.runs
    assert len(run.verdicts) == len(run.explored) >= 30  # every kill landed
    turns = {ident.split(" turn ")[1].split()[0] for ident, *_ in states(run)
             if " turn " in ident}
    assert {"1", "2", "3"} <= turns  # the pause, the refund's answer, the follow-up's
    assert run.failures == []


def test_continuing_a_session_whose_pause_was_not_saved_asks_with_a_dangling_answer():
    """`resume="continue"` (the same agent, openai_followup_agent.make_agent_continues):
    killed after the SDK committed the paused turn (its text and the call awaiting approval)
    to the session and before the RunState file was renamed into place, the restart finds
    no state and carries on from the session: the SDK drops the call that has no output
    and sends a conversation that ends with the assistant's text, which a model without
    prefill refuses. Every later state file's rename passes (the state is there)."""
    from faultsim.real.explore import explore_subprocess

    agent = f"{ROOT / 'tests' / 'openai_followup_agent.py'}:make_agent_continues"
    report = explore_subprocess(agent, FOLLOW_UP, workers=1,
                                agent_name="openai_followup_agent:make_agent_continues",
                                only=lambda p: p.category == "checkpoint-rename")
    [run] = report.runs
    assert len(run.verdicts) == 4  # the pause's state, the decision's, each turn's end
    [failed] = run.failures
    assert failed.kill_point == run.explored[0]
    assert "assistant message prefill" in failed.violations[0].explanation


def test_a_history_that_loses_its_tool_calls_is_caught_at_the_follow_up(tmp_path):
    """The planted mistake (openai_followup_agent.make_agent_calls_dropped) leaves the
    first turn alone: without its follow-up the scenario passes. The follow-up's request
    carries a tool result without its call, which the fake refuses as the API does."""
    single = faultsim.load_scenario(ROOT / "tests" / "data" / "openai_followup.toml")
    from dataclasses import replace

    from faultsim.model.script import Script

    turns = single.script.turns[:2]
    one = replace(single, script=Script(single.script.task, (
        *turns[:1], replace(turns[1], follow_up=None)), single.script.tag),
        expected_final_answer=turns[1].final)
    for scenario, fails in ((one, False), (FOLLOW_UP, True)):
        with ScenarioRun(scenario, openai_followup_agent.make_agent_calls_dropped,
                         workdir=tmp_path / str(fails)) as run:
            if not fails:
                assert run.incarnation().final_answer == turns[1].final
                continue
            with pytest.raises(Exception, match="unexpected `tool_use_id` found in "
                                                "`tool_result` blocks"):
                run.incarnation()
