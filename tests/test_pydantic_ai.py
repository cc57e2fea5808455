"""The pydantic-ai adapter: the user's Agent explored unchanged, its message history on disk.

Each guard is shown to be able to fail: the bundled billing agent (examples/pydantic_ai)
holds every invariant, and each planted mistake breaks the invariant it names there; here,
the internals the adapter relies on, its determinism, and where pydantic-ai#7977's state is
reached.
"""
from __future__ import annotations

import asyncio
import random
import sys
import threading
from pathlib import Path

import pytest

pytest.importorskip("pydantic_ai", reason="pydantic-ai is not installed "
                    "(pip install 'faultsim[pydantic-ai]')")

import pydantic_ai  # noqa: E402
from pydantic_ai import Agent  # noqa: E402
from pydantic_ai.messages import ModelMessagesTypeAdapter  # noqa: E402

import faultsim  # noqa: E402
from faultsim.adapters.pydantic_ai import agent_factory, anthropic_model  # noqa: E402
from faultsim.adapters.pydantic_ai.adapter import _deterministic  # noqa: E402
from faultsim.inprocess.sandbox import Explorer  # noqa: E402
from faultsim.killpoints import categories, kill_points  # noqa: E402
from faultsim.pipeline.runner import ScenarioRun  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "pydantic_ai"
SCENARIO = faultsim.load_scenario(EXAMPLE / "scenario.toml")
sys.path.insert(0, str(EXAMPLE))
import billing_agent  # noqa: E402


# -- the internals the adapter relies on (pydantic-ai-slim 2.68.x) -----------------------
def test_the_pydantic_ai_internals_the_adapter_uses_are_where_it_expects():
    """Fails loudly when an upgrade moves them: pin the new minor version only after
    adapting faultsim/adapters/pydantic_ai to it."""
    from pydantic_ai import _agent_graph, _utils
    from pydantic_ai import _uuid as pa_uuid

    version = pydantic_ai.__version__
    assert version.startswith("2.68."), f"pydantic-ai {version}: the adapter is pinned to 2.68"
    # run ids come from _uuid.uuid7, imported by name where runs are made
    assert _agent_graph.uuid7 is pa_uuid.uuid7
    # disable_threads() makes run_in_executor call a sync function inline, on this thread
    seen = []

    async def call() -> None:
        with _utils.disable_threads():
            await _utils.run_in_executor(lambda: seen.append(threading.current_thread()))
    asyncio.run(call())
    assert seen == [threading.main_thread()]
    # a capability given to one run wraps every tool's execution
    import inspect

    from pydantic_ai.capabilities import AbstractCapability
    assert "capabilities" in inspect.signature(Agent.iter).parameters
    assert list(inspect.signature(AbstractCapability.wrap_tool_execute).parameters) == [
        "self", "ctx", "call", "tool_def", "args", "handler"]
    # a ModelRequestNode carries the request it is about to send (a tool's results)
    fields = _agent_graph.ModelRequestNode.__dataclass_fields__
    assert "request" in fields
    assert Agent.is_model_request_node(_agent_graph.ModelRequestNode(
        request=pydantic_ai.messages.ModelRequest(parts=[])))


def test_the_state_of_pydantic_ai_7977_is_still_refused():
    """A history whose last response calls a tool, resumed with the task as a new prompt."""
    world = SCENARIO.build_world()
    env = faultsim.AgentEnv(workdir=Path("."), client=world.model.client(),
                            services=world.services, clock=world.clock, task=SCENARIO.task,
                            task_id=SCENARIO.id, model=SCENARIO.model, incarnation=1,
                            async_factory=world.model.async_client)
    agent = Agent(anthropic_model(env))

    @agent.tool_plain
    def pay_invoice(invoice: str, amount_cents: int) -> str:
        """Pay."""
        return "{}"

    async def go() -> None:
        async with agent.iter(SCENARIO.task) as run:
            async for node in run:
                if Agent.is_call_tools_node(node):
                    break
        history = run.all_messages()
        await agent.run(SCENARIO.task, message_history=history)
    with pytest.raises(pydantic_ai.exceptions.UserError,
                       match="Cannot provide a new user prompt when the message history "
                             "contains unprocessed tool calls"):
        asyncio.run(go())


# -- the factory ---------------------------------------------------------------------------
@pytest.mark.parametrize("options, field", [
    ({"save": "always"}, "save 'always'"), ({"resume": "restart"}, "resume 'restart'"),
    ({"history": "/abs/history.json"}, "history '/abs/history.json'"),
    ({"history": "../up.json"}, "history '../up.json'")])
def test_a_wrong_option_is_one_line_naming_it(options, field):
    with pytest.raises(ValueError) as caught:
        agent_factory(billing_agent.build_agent, **options)
    assert str(caught.value).startswith(field) and "\n" not in str(caught.value)


def test_a_history_file_that_is_not_one_says_which_file(tmp_path):
    with ScenarioRun(SCENARIO, billing_agent.make_agent, workdir=tmp_path) as run:
        (tmp_path / "history.json").write_text('{"not": "a history"}')
        with pytest.raises(ValueError) as caught:
            run.incarnation()
    assert str(caught.value).startswith("history.json: not a pydantic-ai message history")
    assert "\n" not in str(caught.value)


def test_a_clean_run_saves_the_history_pydantic_ai_reads_back(tmp_path):
    with ScenarioRun(SCENARIO, billing_agent.make_agent, workdir=tmp_path) as run:
        outcome = run.incarnation()
        again = run.incarnation()  # a restart after the run finished: nothing to redo
    assert outcome.final_answer == SCENARIO.expected_final_answer == again.final_answer
    history = ModelMessagesTypeAdapter.validate_json((tmp_path / "history.json").read_bytes())
    assert [m.kind for m in history] == ["request", "response"] * 3
    assert len(run.world.model.requests) == 3  # the restart asked the model nothing
    assert {n: len(run.world.ledger.applied(n)) for n in ("payments", "email")} == \
        {"payments": 1, "email": 1}


# -- names: what another process imports ------------------------------------------------
def test_the_marker_names_a_factory_by_the_attribute_it_is_kept_in():
    """`agent_factory` returns a closure; the pytest marker's name for it is what the
    subprocess mode's fork servers and replays import. Named after its module alone, every
    factory of billing_agent.py would import `make_agent`: the planted mistake explored in
    subprocess mode as the clean agent, passing."""
    from faultsim.pytest.settings import factory_and_name

    assert factory_and_name(billing_agent.make_agent)[1] == "billing_agent"
    assert factory_and_name(billing_agent.make_agent_blind_email)[1] == \
        "billing_agent:make_agent_blind_email"
    unbound = agent_factory(billing_agent.build_agent, save="end")  # kept in no module name
    assert factory_and_name(unbound)[1] == \
        "billing_agent:<pydantic_ai build_agent save=end resume=continue>"


def test_subprocess_mode_refuses_a_factory_no_name_imports(pytester):
    """An adapter's factory made inside a test cannot be imported by a fork server: the
    marker refuses subprocess mode in one line instead of running another agent."""
    pytester.makeini("[pytest]\n")
    (pytester.path / "scenario.toml").write_text((EXAMPLE / "scenario.toml").read_text())
    pytester.makepyfile(test_unbound=f"""
        import sys
        import pytest
        sys.path.insert(0, {str(EXAMPLE)!r})
        import billing_agent
        from faultsim.adapters.pydantic_ai import agent_factory

        @pytest.mark.faultsim("scenario.toml", mode="subprocess")
        def test_unbound(crash_safety):
            crash_safety.check(agent_factory(billing_agent.build_agent, save="end"))
        """)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    assert "subprocess mode imports the agent by name" in result.stdout.str()


# -- determinism ---------------------------------------------------------------------------
def test_run_ids_come_from_the_seeded_random_source_inside_the_adapter():
    import freezegun
    from pydantic_ai import _uuid as pa_uuid

    def ids(adapter: bool) -> list[str]:
        random.seed(7)
        with freezegun.freeze_time("2026-11-02T09:00:00"):
            if not adapter:
                return [str(pa_uuid.uuid7())]
            with _deterministic():
                return [str(pa_uuid.uuid7()), str(sys.modules["pydantic_ai._agent_graph"].uuid7())]
    assert ids(True) == ids(True)
    assert ids(False) != ids(False)  # pydantic-ai's own: os.urandom


def test_sync_tools_run_on_the_calling_thread():
    seen = []

    def build(model) -> Agent:
        agent = Agent(model)

        @agent.tool_plain
        def pay_invoice(invoice: str, amount_cents: int) -> str:
            seen.append(threading.current_thread())
            return "{}"

        @agent.tool_plain
        def send_email(to: str, body: str) -> str:
            seen.append(threading.current_thread())
            return "{}"
        return agent

    with ScenarioRun(SCENARIO, agent_factory(build)) as run:
        assert run.incarnation().final_answer == SCENARIO.expected_final_answer
    assert seen == [threading.main_thread()] * 2
    # pydantic-ai left to itself runs them on worker threads
    seen.clear()
    world = SCENARIO.build_world()
    env = faultsim.AgentEnv(workdir=Path("."), client=world.model.client(),
                            services=world.services, clock=world.clock, task=SCENARIO.task,
                            task_id=SCENARIO.id, model=SCENARIO.model, incarnation=1,
                            async_factory=world.model.async_client)
    asyncio.run(build(anthropic_model(env)).run(SCENARIO.task))
    assert len(seen) == 2 and threading.main_thread() not in seen


def test_the_same_seed_gives_the_same_report():
    def verdicts():
        report = faultsim.explore(billing_agent.make_agent_saves_per_node, SCENARIO,
                                  agent_name="billing_agent:make_agent_saves_per_node")
        return [(v.kill_point.id, sorted(x.explanation for x in v.violations))
                for v in report.runs[0].verdicts]
    first = verdicts()
    assert any(violations for _, violations in first)
    assert verdicts() == first


# -- kill points ---------------------------------------------------------------------------
def test_kill_points_land_at_model_answers_tools_effects_and_every_history_write():
    with Explorer(billing_agent.make_agent, SCENARIO) as ex:
        golden = ex.golden()  # two clean runs, compared event by event
    points = kill_points(golden.trace)
    counts = categories(points)
    assert counts["after-model-response"] >= 3 and counts["mid-stream"] >= 3
    assert counts["after-effect"] == 2  # payment, email
    at_tools = [(p.category, p.id.split("-", 1)[1]) for p in points
                if "-pa.tool." in p.id]  # every tool's start and end
    assert at_tools == [("in-tool", "in-tool-pa.tool.start-pay_invoice#1"),
                        ("after-tool", "after-tool-pa.tool.end-pay_invoice#1"),
                        ("in-tool", "in-tool-pa.tool.start-send_email#1"),
                        ("after-tool", "after-tool-pa.tool.end-send_email#1")]
    writes = [e for e in golden.trace if e.kind == "fs.rename" and e.subject.endswith(
        "history.json")]
    assert len(writes) == 6  # the prompt, then each answer and each tool result
    assert counts["mid-write"] > 0  # torn points inside every write
    effects = [e.subject for e in golden.trace if e.kind == "mark.tool.start"]
    assert effects == ["pay", "deliver"]  # faultsim.effect's marks
    tools = [e.subject for e in golden.trace if e.kind == "mark.pa.tool.start"]
    assert tools == ["pay_invoice", "send_email"]  # the adapter's, through pydantic-ai's hook


def test_pydantic_ai_7977_is_reached_by_a_crash_and_reported():
    """A restart that sends the task again, after a crash that left a tool call in the
    saved history: the first such kill point is the rename that saved the payment call."""
    report = faultsim.explore(billing_agent.make_agent_reprompts, SCENARIO,
                              agent_name="billing_agent:make_agent_reprompts")
    failures = report.runs[0].failures
    first = failures[0]
    assert first.kill_point.id == "k14-after-model-response-history.json#2"
    [violation] = first.violations
    assert violation.invariant == "completes_or_escalates"
    assert "UserError: Cannot provide a new user prompt when the message history contains " \
           "unprocessed tool calls" in violation.explanation


# -- several user turns (the scenario's follow_up) ---------------------------------------------
FOLLOW_UP = faultsim.load_scenario(ROOT / "tests" / "data" / "pydantic_followup.toml")
sys.path.insert(0, str(ROOT / "tests"))
import pydantic_followup_agent  # noqa: E402


def _prompts(path: Path) -> list[str]:
    from pydantic_ai.messages import UserPromptPart
    return [p.content for m in ModelMessagesTypeAdapter.validate_json(path.read_bytes())
            for p in m.parts if isinstance(p, UserPromptPart)]


def _documented(factory: str) -> tuple[int, int]:
    """The crash states and failing states docs/how-to/pydantic-ai.md shows for a factory
    of tests/pydantic_followup_agent.py."""
    page = (ROOT / "docs" / "how-to" / "pydantic-ai.md").read_text()
    section = page.split("## Several user turns", 1)[1].split("What it finds on", 1)[0]
    [row] = [line for line in section.splitlines() if line.startswith(f"| {factory} |")]
    cells = [c.strip() for c in row.strip("|").split("|")]
    return int(cells[2]), int(cells[3])


def test_a_follow_up_goes_into_the_same_history_and_a_restart_redoes_nothing(tmp_path):
    with ScenarioRun(FOLLOW_UP, pydantic_followup_agent.make_agent, workdir=tmp_path) as run:
        first = run.incarnation()
        asked = len(run.world.model.requests)
        again = run.incarnation()  # after the last answer: nothing to send, nothing to ask
    assert first.final_answer == again.final_answer == FOLLOW_UP.expected_final_answer
    assert asked == len(run.world.model.requests) == 4  # two model turns per user turn
    [said] = FOLLOW_UP.script.follow_ups
    last = run.world.model.requests[-1]
    assert (last.position, last.repeat) == (3, 0)
    assert sum(said[:20] in m for m in last.sent) == 1  # sent once, after the first answer
    answered = [n for n, m in enumerate(last.sent) if "Paid INV-7." in m]
    asking = [n for n, m in enumerate(last.sent) if said[:20] in m]
    assert answered and answered[0] < asking[0]  # ... into the conversation that holds it
    assert _prompts(tmp_path / "history.json") == [FOLLOW_UP.task, said]
    assert {n: len(run.world.ledger.applied(n)) for n in ("payments", "receipts")} == \
        {"payments": 1, "receipts": 1}


def test_a_crash_in_either_user_turn_resumes_to_the_last_answer():
    """Killed at every kill point of both user turns (torn writes too), resumed from the
    history file: every crash state completes with the follow-up's answer, the follow-up
    sent once, each effect applied once."""
    report = faultsim.explore(pydantic_followup_agent.make_agent, FOLLOW_UP,
                              agent_name="pydantic_followup_agent:make_agent")
    [run] = report.runs
    assert len(run.verdicts) == len(run.explored) >= 100  # every kill landed
    from faultsim.reports.text import states
    turns = {ident.split(" turn ")[1].split()[0] for ident, *_ in states(run)
             if " turn " in ident}
    assert {"0", "1", "2", "3"} <= turns  # the payment's turns and the follow-up's
    assert run.failures == []
    assert _documented("make_agent") == (len(run.verdicts), 0)


def test_a_service_that_sends_its_follow_ups_again_on_a_restart_is_caught():
    """The planted mistake (pydantic_followup_agent.make_agent_replays_follow_ups): the
    chat loop sends every follow-up after the first answer on each start. Its clean run is
    right; a crash before the follow-up is in the history is harmless (sending it is what
    is left to do); from the write that saved the follow-up's request on, every crash state
    re-asks the model a finished turn."""
    with ScenarioRun(FOLLOW_UP, pydantic_followup_agent.make_agent_replays_follow_ups) as run:
        assert run.incarnation().final_answer == FOLLOW_UP.expected_final_answer
    report = faultsim.explore(pydantic_followup_agent.make_agent_replays_follow_ups,
                              FOLLOW_UP,
                              agent_name="pydantic_followup_agent:make_agent_replays_follow_ups")
    [run] = report.runs
    assert len(run.verdicts) == len(run.explored)
    ids = [p.id for p in run.explored]
    failed = [f.kill_point.id for f in run.failures]
    # history.json#5: the rename of the history whose last request is the follow-up
    start = ids.index("k37-after-model-response-history.json#5")
    assert failed == ids[start:]
    assert {v.invariant for f in run.failures for v in f.violations} <= {
        "counters_continue", "one_step_repeated_per_crash"}
    assert _documented("make_agent_replays_follow_ups") == (len(run.verdicts), len(failed))


@pytest.mark.parametrize("options, invariant", [
    ({"save": "node"}, "one_step_repeated_per_crash"),
    ({"save": "end"}, "one_step_repeated_per_crash"),
    ({"resume": "reprompt"}, "completes_or_escalates")])
def test_the_other_saves_and_resumes_of_two_turns_are_as_documented(options, invariant):
    """The weaker choices fail in both user turns as they do in one, and as the how-to's
    table says."""
    name = ", ".join(f'{k}="{v}"' for k, v in options.items())
    report = faultsim.explore(agent_factory(pydantic_followup_agent.build_agent, **options),
                              FOLLOW_UP, agent_name=f"pydantic_followup_agent:{name}")
    [run] = report.runs
    assert {v.invariant for f in run.failures for v in f.violations} == {invariant}
    assert _documented(f"agent_factory(build_agent, {name})") == (
        len(run.verdicts), len(run.failures))
