"""The LangGraph adapter: graphs explored unchanged, per durability mode.

Each measurement is shown to be able to fail: a graph with keyed effects only holds every
invariant under "sync" durability, and the same graph breaks the one-step rule under
"async" and "exit"; a blind email breaks effects_exactly_once in every mode.
"""
from __future__ import annotations

import inspect

import json
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import anthropic
import pytest
from langchain_anthropic import ChatAnthropic
from langchain_core.tools import tool
from langgraph.prebuilt import create_react_agent

import faultsim
from faultsim import load_scenario
from faultsim.adapters.langgraph import (CHECKPOINTER_KEY, DURABILITY_MODES, effect,
                                         graph_agent)
from faultsim.adapters.langgraph.verdicts import classify, rows, table
from faultsim.settings.loading import factory_for, load_callable
from faultsim.inprocess.explore import explore
from faultsim.inprocess.sandbox import Explorer
from faultsim.killpoints import kill_points
from faultsim.model import serve
from faultsim.scenario import ScenarioError, parse_scenario

ROOT = Path(__file__).resolve().parent.parent
BUNDLED = ROOT / "scenarios" / "langgraph"
KEYED = ROOT / "tests" / "data" / "lg_keyed.toml"


def _explore(path: Path, mode: str, **options):
    sc = load_scenario(path)
    return explore(factory_for("langgraph:" + mode, sc), sc, agent_name="langgraph:" + mode,
                   **options).runs[0]


def _invariants(run) -> set[str]:
    return {v.invariant for f in run.failures for v in f.violations}


# -- a fake Claude any agent can reach -----------------------------------------------------
def _world(path: Path = BUNDLED / "react_payments.toml"):
    return load_scenario(path).build_world()


@tool
def lookup_invoice(invoice: str) -> str:
    """Look up an invoice."""
    return '{"supplier": "Acme", "amount_cents": 12000, "status": "approved"}'


@tool
def pay_invoice(invoice: str, amount_cents: int) -> str:
    """Pay an invoice."""
    return '{"id": "pay-1"}'


@tool
def send_email(to: str, subject: str, body: str) -> str:
    """Send an email."""
    return '{"id": "mail-1"}'


def test_chat_anthropic_runs_a_react_graph_against_the_loopback_endpoint():
    sc = load_scenario(BUNDLED / "react_payments.toml")
    world = sc.build_world()
    with serve(world.model) as endpoint:
        assert endpoint.base_url.startswith("http://127.0.0.1:")
        chat = ChatAnthropic(model=sc.model, base_url=endpoint.base_url,
                             api_key=endpoint.api_key, max_tokens=1024)
        graph = create_react_agent(chat, [lookup_invoice, pay_invoice, send_email])
        out = graph.invoke({"messages": [("user", sc.task)]})
    assert out["messages"][-1].content == sc.expected_final_answer
    served = [r for r in world.model.requests if r.ok]
    assert [r.position for r in served] == [0, 1, 2, 3]  # each turn once, in order
    assert not world.model.invalid_requests


def test_clients_configured_by_the_environment_are_served(monkeypatch):
    world = _world()
    for key in ("ANTHROPIC_BASE_URL", "ANTHROPIC_API_KEY"):
        monkeypatch.delenv(key, raising=False)
    with serve(world.model, environ=True) as endpoint:
        client = anthropic.Anthropic()
        message = client.messages.create(
            model="claude-sonnet-5-5", max_tokens=100,
            tools=[{"name": "lookup_invoice", "input_schema": {"type": "object"}}],
            messages=[{"role": "user", "content": load_scenario(
                BUNDLED / "react_payments.toml").task}])
        assert str(client.base_url).startswith(endpoint.base_url)
    assert message.content[-1].name == "lookup_invoice"
    import os
    assert "ANTHROPIC_BASE_URL" not in os.environ  # restored on the way out


def test_the_endpoint_drops_the_connection_when_the_world_is_sealed():
    world = _world()
    world.sealed = True
    with serve(world.model) as endpoint:
        client = anthropic.Anthropic(base_url=endpoint.base_url, api_key="k", max_retries=0)
        with pytest.raises(anthropic.APIConnectionError):
            client.messages.create(model="m", max_tokens=10,
                                   messages=[{"role": "user", "content": "x"}])
    assert world.model.requests == []


# -- the adapter ---------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["react_payments", "parallel_tools", "human_approval"])
def test_each_bundled_graph_runs_clean_and_offers_every_kind_of_kill_point(name):
    sc = load_scenario(BUNDLED / f"{name}.toml")
    with Explorer(factory_for("langgraph:sync", sc), sc) as ex:
        golden = ex.golden()  # two clean runs, compared event by event
    assert golden.outcome.final_answer == sc.expected_final_answer
    cats = {p.category for p in kill_points(golden.trace)}
    assert {"after-checkpoint-read", "after-checkpoint-put", "after-put-writes",
            "after-model-response", "in-tool", "after-effect", "after-tool"} <= cats
    starts = [e.subject for e in golden.trace if e.kind == "mark.tool.start"]
    assert len(starts) == sum(len(t.tool_calls) for t in sc.script.turns)


def test_tasks_and_background_writes_run_on_the_calling_thread():
    seen = []

    @tool
    @effect("invoices", key=lambda invoice: invoice)
    def lookup(invoice: str) -> str:
        """Look up an invoice."""

    def build(checkpointer, model):
        @tool
        def lookup_invoice(invoice: str) -> str:
            """Look up an invoice."""
            seen.append(threading.current_thread().name)
            return lookup.invoke({"invoice": invoice})
        return create_react_agent(model, [lookup_invoice, pay_invoice, send_email],
                                  checkpointer=checkpointer)

    sc = load_scenario(BUNDLED / "parallel_tools.toml")
    with Explorer(graph_agent(build, durability="async"), sc, timeout=None) as ex:
        world = ex.new_world()
        # Threads other tests left may end meanwhile: the claim is that none is added.
        threads_before = set(threading.enumerate())
        inc = ex.incarnation(world, timed=False)
    assert inc.error is None and inc.outcome.final_answer == sc.expected_final_answer
    assert seen and set(seen) == {threading.main_thread().name}
    assert set(threading.enumerate()) <= threads_before


def test_langsmith_tracing_stays_off_under_faultsim(monkeypatch):
    from langchain_core.tracers.context import _tracing_v2_is_enabled
    from langsmith.utils import get_env_var

    monkeypatch.setenv("LANGSMITH_TRACING", "true")
    get_env_var.cache_clear()
    seen = []

    def build(checkpointer, model):
        @tool
        def lookup_invoice(invoice: str) -> str:
            """Look up an invoice."""
            seen.append(_tracing_v2_is_enabled())
            return "{}"
        return create_react_agent(model, [lookup_invoice, pay_invoice, send_email],
                                  checkpointer=checkpointer)

    try:
        assert _tracing_v2_is_enabled()  # the environment asks for it
        sc = load_scenario(KEYED)
        with Explorer(graph_agent(build, durability="sync"), sc) as ex:
            ex.incarnation(ex.new_world())
    finally:
        monkeypatch.undo()
        get_env_var.cache_clear()
    assert seen == [False]


def test_kills_land_at_every_point_and_sync_holds_with_keyed_effects_only():
    run = _explore(KEYED, "sync")
    assert len(run.verdicts) == len(run.kill_points) > 20  # one landed kill per point
    assert run.judged > 0
    assert run.ok, [f.violations for f in run.failures]


@pytest.mark.parametrize("mode", ["async", "exit"])
def test_async_and_exit_lose_more_than_one_step_on_the_same_graph(mode):
    run = _explore(KEYED, mode)
    assert "one_step_repeated_per_crash" in _invariants(run)
    assert "effects_exactly_once" not in _invariants(run)  # the keyed payment holds
    failure = next(f for f in run.failures)
    text = run.counterexample(failure)
    assert "VIOLATED one_step_repeated_per_crash" in text and "---- KILL ----" in text


@pytest.mark.parametrize("mode", DURABILITY_MODES)
def test_a_blind_email_is_sent_twice_in_every_mode(mode):
    run = _explore(BUNDLED / "react_payments.toml", mode)
    dup = [f for f in run.failures if "effects duplicated" in classify(f)]
    assert dup, _invariants(run)
    assert all("email.send" in v.explanation for f in dup for v in f.violations
               if v.invariant == "effects_exactly_once")
    if mode == "sync":  # each duplicate says whether it is LangGraph's documented re-run
        from faultsim.reports.report import why_of

        classes = {f.kill_point.id: why_of(f)[0] for f in dup}
        assert set(classes.values()) == {"by-design", "ordering"}, classes
        shown = "\n".join(run.counterexample(f) for f in dup)
        assert "why: at-least-once by design" in shown and "idempotency key" in shown
        assert "why: not the documented window" in shown and "#8039" in shown


def test_exit_mode_restarts_from_scratch_and_the_table_counts_it():
    runs = [_explore(KEYED, m) for m in DURABILITY_MODES]
    by_mode = {r.mode: r for r in rows(runs)}
    assert by_mode["exit"].counts["restarted from scratch"] > 0
    assert by_mode["sync"].counts["restarted from scratch"] == 0
    assert by_mode["sync"].counts["resumed correctly"] == by_mode["sync"].counts[
        "crash states"]
    text = table(runs)
    assert text.splitlines()[0].startswith("| scenario | durability |")
    assert "faultsim replay fs1_" in by_mode["exit"].replay["steps lost"]


def test_same_seed_same_verdicts():
    a, b = (_explore(BUNDLED / "parallel_tools.toml", "async") for _ in range(2))
    assert [p.id for p in a.kill_points] == [p.id for p in b.kill_points]
    assert [(v.kill_point.id, [x.explanation for x in v.violations]) for v in a.verdicts] \
        == [(v.kill_point.id, [x.explanation for x in v.violations]) for v in b.verdicts]


def test_forked_and_replayed_sweeps_agree():
    forked = _explore(BUNDLED / "human_approval.toml", "async", workers=2)
    replayed = _explore(BUNDLED / "human_approval.toml", "async", workers=0)
    assert [(v.kill_point.id, v.ok) for v in forked.verdicts] == \
        [(v.kill_point.id, v.ok) for v in replayed.verdicts]


def test_a_replay_token_reproduces_the_break(monkeypatch):
    monkeypatch.chdir(ROOT)
    run = _explore(Path("scenarios/langgraph/react_payments.toml"), "sync")
    failure = run.failures[0]
    result = faultsim.replay(failure.token(run))
    assert not result.ok
    assert {v.invariant for v in result.verdict.violations} == \
        {v.invariant for v in failure.violations}


def test_a_finished_superstep_call_is_not_run_again():
    """A crash after the first payment of a parallel superstep was saved (put_writes, done
    while the second payment was out): the resumed graph keeps its result and does not
    pay again; the second payment, whose writes were not saved, is asked again."""
    sc = load_scenario(BUNDLED / "parallel_tools.toml")
    with Explorer(factory_for("langgraph:sync", sc), sc) as ex:
        golden = ex.golden()
        points = kill_points(golden.trace)
        second = [n for n, e in enumerate(golden.trace, 1)
                  if e.kind == "effect.applied" and e.subject == "payments.submit"][1]
        saved = next(p for p in points if p.index > second and
                     p.category == "after-put-writes")
        crashed = ex.crash(saved, "process")
        run = ex.resume(crashed.world, crashed.states[0], [saved])
    again = [e for e in run.world.ledger.entries if e.incarnation == 2 and
             e.service == "payments" and e.params["invoice"] == "INV-1"]
    assert again == []
    assert [e.params["invoice"] for e in run.world.ledger.entries if e.incarnation == 2
            and e.service == "payments"] == ["INV-3"]
    assert run.outcome.final_answer == sc.expected_final_answer


def test_an_interrupt_without_a_reply_is_a_legal_stop():
    sc = load_scenario(BUNDLED / "human_approval.toml")
    run = explore(graph_agent(load_callable(sc.langgraph.graph), durability="sync"),
                  sc, crashes=1).runs[0]
    assert run.verdicts[0].golden.outcome.status == "escalated"
    assert run.escalated > 0
    assert "completes_or_escalates" not in _invariants(run)


def test_explore_modes_names_each_run_by_its_mode():
    from faultsim.adapters.langgraph import explore_modes

    sc = load_scenario(KEYED)
    reports = explore_modes(load_callable(sc.langgraph.graph), sc,
                            modes=["sync", "exit"])
    assert reports["sync"].ok and not reports["exit"].ok
    assert reports["exit"].runs[0].agent == "langgraph:exit"


def test_the_world_keeps_the_checkpointer_across_incarnations():
    sc = load_scenario(KEYED)
    with Explorer(factory_for("langgraph:sync", sc), sc) as ex:
        world = ex.new_world()
        ex.incarnation(world)
        saver = world.durable[CHECKPOINTER_KEY]
        assert saver.storage[sc.id]  # the finished thread, saved in the world
        again = ex.incarnation(world)  # a restart finds it
    assert world.durable[CHECKPOINTER_KEY] is saver
    assert again.outcome.final_answer == sc.expected_final_answer
    assert sum(1 for r in world.model.requests if r.incarnation == 2) == 0


# -- the tool wrapper ---------------------------------------------------------------------
def test_effect_is_transparent_outside_faultsim():
    @effect("payments", key=lambda invoice: invoice)
    def pay(invoice: str) -> str:
        return f"paid {invoice}"

    assert pay("INV-1") == "paid INV-1"
    assert pay.faultsim_effect.service == "payments"


def test_an_async_effect_stays_awaitable_and_is_routed_under_faultsim():
    import asyncio

    from faultsim.adapters.langgraph import adapter

    @effect("payments", key=lambda invoice: invoice)
    async def pay(invoice: str) -> str:
        return f"paid {invoice}"

    assert inspect.iscoroutinefunction(pay)
    assert asyncio.run(pay("INV-1")) == "paid INV-1"  # outside faultsim: the body

    class Session:  # what an incarnation's tools report to
        def act(self, name, service, arguments, key):
            return ("routed", name, service, arguments, key(**arguments))

    token = adapter._session.set(Session())
    try:
        routed = asyncio.run(pay("INV-2"))
    finally:
        adapter._session.reset(token)
    assert routed == ("routed", "pay", "payments", {"invoice": "INV-2"}, "INV-2")


def _graph_with(tool_fn):
    def build(checkpointer, model):
        return create_react_agent(model, [tool_fn, pay_invoice, send_email],
                                  checkpointer=checkpointer)
    return build


@pytest.mark.parametrize("service,key,message", [
    ("nowhere", lambda invoice: invoice, "does not define"),
    ("payments", None, "give effect(..., key="),
])
def test_effect_mistakes_are_named(service, key, message):
    @tool
    @effect(service, key=key)
    def lookup_invoice(invoice: str) -> str:
        """Look up an invoice."""

    sc = load_scenario(BUNDLED / "react_payments.toml")
    with Explorer(graph_agent(_graph_with(lookup_invoice)), sc) as ex:
        inc = ex.incarnation(ex.new_world())
    assert message in (inc.error or "")


# -- scenario files, CLI ------------------------------------------------------------------
def test_langgraph_table_errors_name_the_field():
    base = {"task": "t", "expected_final_answer": "a", "turns": [{"final": "a"}]}
    with pytest.raises(ScenarioError, match="langgraph.graph"):
        parse_scenario({**base, "langgraph": {"graph": "no_colon"}}, "x.toml")
    with pytest.raises(ScenarioError, match="langgraph"):
        parse_scenario({**base, "langgraph": {"graph": "a.py:b", "human": "x"}}, "x.toml")
    sc = parse_scenario({**base, "langgraph": {"graph": "g.py:build"}}, "dir/x.toml")
    assert sc.langgraph.graph == "dir/g.py:build" and sc.langgraph.method == "invoke"
    with pytest.raises(ScenarioError, match="langgraph.method"):
        parse_scenario({**base, "langgraph": {"graph": "a.py:b", "method": "arun"}}, "x.toml")
    with pytest.raises(ValueError, match="method 'arun'"):
        graph_agent(lambda checkpointer, model: None, method="arun")


def _faultsim(*args, cwd=ROOT):
    exe = shutil.which("faultsim") or [sys.executable, "-m", "faultsim.cli"]
    cmd = ([exe] if isinstance(exe, str) else exe) + list(args)
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=600)


def test_cli_explores_each_durability_mode_and_prints_the_table(tmp_path):
    out = tmp_path / "report.json"
    done = _faultsim("run", str(KEYED), "--durability", "sync,exit", "--json", str(out))
    assert done.returncode == 1, done.stderr
    assert "| lg_keyed | sync | " in done.stdout and "| lg_keyed | exit | " in done.stdout
    assert "lg_keyed [exit] steps lost" in done.stdout
    runs = json.loads(out.read_text())["runs"]
    assert [r["agent"] for r in runs] == ["langgraph:sync", "langgraph:exit"]
    assert runs[0]["violations"] == [] and runs[1]["violations"]
    rerun = _faultsim("run", str(KEYED), "--agent", "langgraph:sync")
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    listed = _faultsim("list", str(KEYED))
    assert listed.returncode == 0 and "langgraph    " in listed.stdout
    assert "after-checkpoint-put" in listed.stdout


def test_cli_refuses_what_it_cannot_do():
    bad = _faultsim("run", str(KEYED), "--durability", "sometimes")
    assert bad.returncode == 2 and "--durability" in bad.stderr
    wrong = _faultsim("run", "scenarios/refunds.toml", "--agent", "langgraph:sync")
    assert wrong.returncode == 2 and "[langgraph]" in wrong.stderr
    real = _faultsim("run", str(KEYED), "--mode", "subprocess")
    assert real.returncode == 2 and "in-process" in real.stderr


def test_langgraph_without_a_mode_takes_the_one_the_scenario_names(tmp_path):
    import argparse

    from faultsim.cli.args import agents_for
    from faultsim.settings.loading import AgentLoadError, langgraph_spec
    from faultsim.scenario import load_scenario as load

    named = tmp_path / "named.toml"
    named.write_text(KEYED.read_text().replace(
        'graph = "../../scenarios/langgraph/graphs.py:react_payments"',
        f'graph = "{BUNDLED / "graphs.py"}:react_payments"\ndurability = "exit"'))
    sc, plain = load(named), load(KEYED)
    assert sc.langgraph.durability == "exit" and plain.langgraph.durability is None
    ns = lambda agent, durability=None, typed=False: argparse.Namespace(  # noqa: E731
        agent=agent, durability=durability, agent_typed=typed)
    assert agents_for(sc, ns("langgraph:"), DURABILITY_MODES) == ["langgraph:exit"]
    assert agents_for(sc, ns("langgraph"), DURABILITY_MODES) == ["langgraph:exit"]
    # a default agent (the project's) leaves the scenario to its graph; a typed one wins
    assert agents_for(sc, ns("pkg:agent"), DURABILITY_MODES) == ["langgraph:exit"]
    assert agents_for(sc, ns("pkg:agent", "sync"), ["sync"]) == ["langgraph:sync"]
    assert agents_for(sc, ns("pkg:agent", typed=True), DURABILITY_MODES) == ["pkg:agent"]
    assert agents_for(sc, ns("langgraph:", typed=True), DURABILITY_MODES) == ["langgraph:exit"]
    assert agents_for(plain, ns("pkg:agent"), DURABILITY_MODES) == \
        [f"langgraph:{m}" for m in DURABILITY_MODES]
    assert langgraph_spec("langgraph:sync", plain) == "langgraph:sync"
    with pytest.raises(AgentLoadError, match="names none: give one, langgraph:sync"):
        langgraph_spec("langgraph:", plain)
    assert callable(factory_for("langgraph:", sc))
    from faultsim.pytest.settings import factory_and_name  # the marker's agent="langgraph:"

    assert factory_and_name("langgraph:", str(named))[1] == "langgraph:exit"
    # the marker's agent is always the one named: a plain one runs as given, not the graph
    factory, name = factory_and_name("reference_agent", str(named))
    assert (factory.__module__, name) == ("reference_agent.agent", "reference_agent")


def test_two_durability_modes_compare_state_by_state():
    from faultsim.reports.compare import compare

    def report(mode, verdict):
        return {"runs": [{"scenario": "lg", "crash_model": "process",
                          "agent": f"langgraph:{mode}",
                          "states": [["process:after-effect x#1", "k3", verdict]]}]}

    diff = compare(report("sync", "passed"), report("exit", "effects_exactly_once"))
    assert [s.kind for r in diff.runs for s in r.states] == ["broken by B"]


def test_sqlite_saver_on_a_real_file_in_subprocess_mode():
    from faultsim.real.explore import explore_subprocess

    sc = load_scenario(BUNDLED / "react_payments_sqlite.toml")
    report = explore_subprocess("langgraph:sync", sc, agent_name="langgraph:sync",
                                workers=2, timeout=60)
    run = report.runs[0]
    assert run.mode == "subprocess"
    kinds = {p.category for p in run.kill_points}
    assert "checkpoint-commit" in kinds  # statement-level kill points inside the saver
    assert len(run.verdicts) == len(run.kill_points)
    assert "effects_exactly_once" in _invariants(run)  # the blind email, as in memory
    assert "one_step_repeated_per_crash" not in _invariants(run)
    # its counterexample shows the saved checkpoint and pending writes, not "none"
    text = run.counterexample(run.failures[0])
    assert "LangGraph checkpoints: " in text and "pending writes against it: " in text, text
    assert "checkpoint on disk at the kill: none" not in text


# -- LangGraph internals the adapter relies on (pinned minor version) ---------------------
def test_langgraph_internals_are_where_the_adapter_expects_them():
    from langgraph.pregel import _executor, _loop

    assert callable(getattr(_executor, "get_executor_for_config", None))
    assert hasattr(_loop.SyncPregelLoop, "_checkpointer_put_after_previous")
    from langgraph.checkpoint.base import id as checkpoint_id
    assert hasattr(checkpoint_id, "_last_v6_timestamp")
    from langchain_core.utils import uuid as lc_uuid
    assert callable(lc_uuid.uuid7)
    assert ChatAnthropic.__dict__.get("_client") is not None  # a cached property
    assert ChatAnthropic.__dict__.get("_async_client") is not None
    # an async graph's SQLite saver: aiosqlite's connection queues each job for its own
    # thread, both made from these module names (the adapter runs them on the loop's)
    import aiosqlite.core as aiosqlite_core
    assert "SimpleQueue()" in inspect.getsource(aiosqlite_core.Connection.__init__)
    assert "Thread(target=" in inspect.getsource(aiosqlite_core.Connection.__init__)
    assert "self._tx.put_nowait((future, function))" in inspect.getsource(
        aiosqlite_core.Connection._execute)
    assert callable(aiosqlite_core.set_result) and callable(aiosqlite_core.set_exception)


def test_the_docs_langgraph_table_is_what_a_run_measures():
    section = (ROOT / "docs/how-to/langgraph.md").read_text()
    runs = [_explore(BUNDLED / f"{name}.toml", mode)
            for name in ("human_approval", "parallel_tools", "react_payments")
            for mode in DURABILITY_MODES]
    measured = table(runs).splitlines()
    assert measured[0] in section
    for line in measured[2:]:
        assert line in section, line


def test_the_plugin_checks_a_graph_per_durability_mode(pytester):
    """A marker names the scenario and `langgraph:MODE`; the keyed-only graph passes under
    sync and fails under exit with a counterexample that replays."""
    pytester.makeini("[pytest]\nfilterwarnings = ignore:create_react_agent has been moved\n")
    pytester.makepyfile(test_graph=f"""
        import pytest

        @pytest.mark.faultsim({str(KEYED)!r}, agent="langgraph:sync", crashes=1)
        def test_sync(crash_safety):
            crash_safety.check()

        @pytest.mark.faultsim({str(KEYED)!r}, agent="langgraph:exit", crashes=1)
        def test_exit(crash_safety):
            crash_safety.check()
        """)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-q")
    result.assert_outcomes(passed=1, failed=1)
    out = result.stdout.str()
    assert "test_exit" in out and "one_step_repeated_per_crash" in out
    assert "faultsim replay fs1_" in out


# -- async graphs: ainvoke / astream, AsyncSqliteSaver ------------------------------------
ASYNC = ROOT / "tests" / "data" / "lg_async.toml"  # astream, in memory
ASYNC_SQLITE = ROOT / "tests" / "data" / "lg_async_sqlite.toml"  # ainvoke, AsyncSqliteSaver
sys.path.insert(0, str(ROOT / "tests"))
import async_graph_agent  # noqa: E402


def test_an_async_graph_is_driven_on_an_event_loop_and_invoke_cannot_run_it():
    """tests/async_graph_agent.py has async nodes and tools only, as an async service
    writes them: `astream` (the scenario's method) runs it, on the loop's thread, the same
    events run after run; `invoke` cannot run it at all."""
    sc = load_scenario(ASYNC)
    assert sc.langgraph.method == "astream"
    with Explorer(factory_for("langgraph:sync", sc), sc) as ex:
        golden = ex.golden()  # two clean runs, compared event by event
    assert golden.outcome.final_answer == sc.expected_final_answer
    assert [e.subject for e in golden.trace if e.kind == "mark.tool.start"] == [
        "lookup_invoice", "pay_invoice", "send_receipt"]
    sync = graph_agent(async_graph_agent.build_graph, durability="sync")  # method invoke
    with Explorer(sync, sc) as ex, pytest.raises(Exception, match="No synchronous function"):
        ex.golden()


def test_kills_land_in_an_async_graph_and_a_fresh_receipt_key_is_caught():
    """Every kill point of the astream run lands (one crash state each) and the graph,
    keyed throughout, holds every invariant under sync durability; the planted mistake (a
    receipt key drawn afresh per attempt) sends the receipt twice exactly where the kill
    lands after the receipt went out and before the tool's result was saved. A kill in the
    model's call lands inside a task LangChain gathers with return_exceptions=True: it is
    no finding that LangChain then fails on the kill it got back as a value."""
    sc = load_scenario(ASYNC)
    good = explore(graph_agent(async_graph_agent.build_graph, durability="sync",
                               method="astream"), sc, agent_name="langgraph:sync").runs[0]
    assert len(good.verdicts) == len(good.explored) == len(good.kill_points) >= 30
    assert {p.category for p in good.kill_points} >= {
        "after-model-response", "in-tool", "after-effect", "after-tool",
        "after-checkpoint-put", "after-put-writes"}
    assert good.failures == []
    bad = explore(graph_agent(async_graph_agent.build_graph_fresh_key, durability="sync",
                              method="astream"), sc, agent_name="langgraph:sync").runs[0]
    assert len(bad.verdicts) == len(good.verdicts)
    assert [f.kill_point.category for f in bad.failures] == ["after-effect", "after-tool"]
    assert _invariants(bad) == {"effects_exactly_once"}
    assert all("receipts.submit" in v.explanation for f in bad.failures
               for v in f.violations)


def test_async_sqlite_saver_statements_are_kill_points_in_subprocess_mode():
    """ainvoke on AsyncSqliteSaver (aiosqlite) on a real database file: every statement
    and commit it sends, run on the loop's thread rather than aiosqlite's own, is a kill
    point, and the keyed graph resumes correctly from each."""
    from faultsim.real.explore import explore_subprocess

    sc = load_scenario(ASYNC_SQLITE)
    assert (sc.langgraph.method, sc.store.kind) == ("ainvoke", "sqlite")
    report = explore_subprocess("langgraph:sync", sc, agent_name="langgraph:sync",
                                workers=2, timeout=60)
    run = report.runs[0]
    assert run.mode == "subprocess"
    commits = [p for p in run.kill_points if p.category == "checkpoint-commit"]
    assert len(commits) >= 10  # the saver's INSERTs, each a kill point
    assert len(run.verdicts) == len(run.kill_points)
    assert run.failures == []


def test_a_graph_driven_with_stream_runs_as_with_invoke():
    """`method = "stream"`: the sync `graph.stream(...)` read to the end, not `invoke`;
    the same run."""
    from faultsim.settings.loading import load_callable

    sc = load_scenario(BUNDLED / "react_payments.toml")
    outcomes, called = {}, []

    def build(checkpointer, model):  # the bundled graph, its invoke watched
        graph = load_callable(sc.langgraph.graph)(checkpointer=checkpointer, model=model)
        invoke = graph.invoke
        graph.invoke = lambda *a, **k: called.append(method) or invoke(*a, **k)
        return graph

    for method in ("invoke", "stream"):
        with Explorer(graph_agent(build, durability="sync", method=method), sc) as ex:
            golden = ex.golden()
        outcomes[method] = (golden.outcome, [(e.kind, e.subject) for e in golden.trace])
    assert outcomes["stream"] == outcomes["invoke"]
    assert outcomes["stream"][0].final_answer == sc.expected_final_answer
    assert set(called) == {"invoke"}  # stream never went through invoke


# -- several user turns --------------------------------------------------------------------
FOLLOW_UP = load_scenario(ROOT / "tests" / "data" / "lg_followup.toml")

import langgraph_followup_agent  # noqa: E402

# the service's chat loop on a sync graph (invoke) and on an async one (ainvoke)
LOOPS = {"sync": "make_agent", "async": "make_async_agent"}


def _loop(kind: str, mistake: str = "") -> tuple:
    name = LOOPS[kind] + (f"_{mistake}" if mistake else "")
    return getattr(langgraph_followup_agent, name), f"langgraph_followup_agent:{name}"


def _documented(loop: str) -> list[str]:
    """docs/how-to/langgraph.md's row for a chat loop of tests/langgraph_followup_agent.py:
    [crash states (memory, sync / async), failing, crash states (SQLite), failing]."""
    page = (ROOT / "docs" / "how-to" / "langgraph.md").read_text()
    section = page.split("## Several user turns", 1)[1].split("\n## ", 1)[0]
    start = "| make_agent," if loop == "" else f"| …_{loop} |"
    [row] = [line for line in section.splitlines() if line.startswith(start)]
    return [c.strip() for c in row.strip("|").split("|")][2:6]


def _figure(cell: str, kind: str) -> int:
    return int(cell.split(" / ")[list(LOOPS).index(kind)])


def _follow_up_input(ids: list[str]) -> int:
    """Where the follow-up is saved: the checkpoint of the thread's second input."""
    return next(n for n, i in enumerate(ids) if "lg.put-step_" in i and "_input_" in i
                and "step_-1_" not in i)


@pytest.mark.parametrize("kind", LOOPS)
def test_a_follow_up_goes_into_the_same_thread_and_a_restart_redoes_nothing(kind):
    """After the first answer the follow-up is the next invocation's input, into the same
    thread: the model gets the whole conversation with the follow-up once, after that
    answer; a restart after the last answer sends nothing and asks nothing."""
    from faultsim.pipeline.runner import ScenarioRun

    factory, _ = _loop(kind)
    with ScenarioRun(FOLLOW_UP, factory) as run:
        first = run.incarnation()
        asked = len(run.world.model.requests)
        again = run.incarnation()
    assert first.final_answer == again.final_answer == FOLLOW_UP.expected_final_answer
    assert asked == len(run.world.model.requests) == 4  # two model turns per user turn
    [said] = FOLLOW_UP.script.follow_ups
    last = run.world.model.requests[-1]
    assert (last.position, last.repeat) == (3, 0)
    assert sum(said[:20] in m for m in last.sent) == 1  # sent once ...
    answered = [n for n, m in enumerate(last.sent) if "Paid INV-7." in m]
    asking = [n for n, m in enumerate(last.sent) if said[:20] in m]
    assert answered and answered[0] < asking[0]  # ... after the first answer
    assert {n: len(run.world.ledger.applied(n)) for n in ("payments", "receipts")} == \
        {"payments": 1, "receipts": 1}


@pytest.mark.parametrize("kind", LOOPS)
def test_a_crash_in_either_user_turn_resumes_to_the_last_answer(kind):
    """Killed at every kill point of both user turns, resumed from the checkpointer's saved
    state: every crash state completes with the follow-up's answer, the follow-up sent
    once (sync durability, keyed effects: the graph itself repeats at most one step)."""
    factory, name = _loop(kind)
    [run] = explore(factory, FOLLOW_UP, agent_name=name).runs
    assert len(run.verdicts) == len(run.explored) == len(run.kill_points) >= 30  # all landed
    ids = [p.id for p in run.kill_points]
    saved = _follow_up_input(ids)
    assert 10 < saved < len(ids) - 10  # kill points in both user turns
    assert run.failures == []
    states, failing = _documented("")[:2]
    assert (_figure(states, kind), _figure(failing, kind)) == (len(run.verdicts), 0)


@pytest.mark.parametrize("kind", LOOPS)
def test_a_service_that_sends_its_follow_ups_again_on_a_restart_is_caught(kind):
    """The planted mistake (a chat loop that sends every follow-up after the first answer
    on each start): every crash state from the save of the follow-up's input on has it in
    the thread twice, the model asked a turn the clean run never asked; every state before
    it passes (sending it is what is left to do)."""
    factory, name = _loop(kind, "replays_follow_ups")
    [run] = explore(factory, FOLLOW_UP, agent_name=name).runs
    assert len(run.verdicts) == len(run.explored)
    ids = [p.id for p in run.explored]
    assert [f.kill_point.id for f in run.failures] == ids[_follow_up_input(ids):]
    assert {v.invariant for f in run.failures for v in f.violations} <= {
        "counters_continue", "one_step_repeated_per_crash"}
    states, failing = _documented("replays_follow_ups")[:2]
    assert (_figure(states, kind), _figure(failing, kind)) == (len(run.verdicts),
                                                               len(run.failures))


@pytest.mark.parametrize("kind", LOOPS)
def test_a_service_that_loses_its_follow_up_on_a_restart_is_caught(kind):
    """The planted mistake (the user's next messages kept in memory only): every crash
    state from the task's first checkpoint until the follow-up is saved ends at the first
    answer, the receipt never sent; from the follow-up's save on the thread carries it."""
    factory, name = _loop(kind, "loses_follow_ups")
    [run] = explore(factory, FOLLOW_UP, agent_name=name).runs
    ids = [p.id for p in run.explored]
    first = next(n for n, i in enumerate(ids) if "lg.put-step_-1_input_" in i)
    assert [f.kill_point.id for f in run.failures] == ids[first:_follow_up_input(ids)]
    assert all("completes_or_escalates" in {v.invariant for v in f.violations}
               for f in run.failures)
    assert all("'Paid INV-7.' differs" in v.explanation for f in run.failures
               for v in f.violations if v.invariant == "completes_or_escalates")
    states, failing = _documented("loses_follow_ups")[:2]
    assert (_figure(states, kind), _figure(failing, kind)) == (len(run.verdicts),
                                                               len(run.failures))


@pytest.mark.parametrize("mode", ["async", "exit"])
def test_the_follow_up_is_sent_once_in_the_durability_modes_that_lose_steps(mode):
    """Under "async" and "exit" a crash may lose the follow-up's input checkpoint: the
    thread then does not hold it and sending it is what is left to do. What fails is the
    mode's own lost steps, never a follow-up twice in the thread (`counters_continue`, the
    replaying loop's finding), as the how-to says."""
    import re

    [run] = explore(graph_agent(langgraph_followup_agent.build_graph, durability=mode),
                    FOLLOW_UP, agent_name=f"langgraph:{mode}").runs
    assert len(run.verdicts) == len(run.explored)
    assert run.failures and _invariants(run) == {"one_step_repeated_per_crash"}
    page = (ROOT / "docs" / "how-to" / "langgraph.md").read_text()
    states, failing = re.search(rf'"{mode}" (\d+)(?: crash states)?, (\d+) failing',
                                page).groups()
    assert (int(states), int(failing)) == (len(run.verdicts), len(run.failures))


def test_the_turn_a_restarted_process_is_at_comes_from_the_sqlite_checkpoints():
    """Subprocess mode, LangGraph's SqliteSaver on a real database file: each incarnation a
    process killed by SIGKILL, the thread read back from what SQLite committed. The clean
    loop passes at every kill point; the two planted chat loops fail on either side of the
    commit that makes the follow-up's input durable, and only there: the replaying one
    from it on, the forgetting one from the first commit up to it."""
    from faultsim.real.explore import explore_subprocess

    sc = load_scenario(ROOT / "tests" / "data" / "lg_followup_sqlite.toml")
    assert sc.store.kind == "sqlite"
    agent = ROOT / "tests" / "langgraph_followup_agent.py"
    failed = {}
    for name in ("make_agent", "make_agent_replays_follow_ups",
                 "make_agent_loses_follow_ups"):
        stats: dict = {}
        [run] = explore_subprocess(f"{agent}:{name}", sc, workers=2, stats=stats).runs
        assert run.mode == "subprocess"
        assert stats["kills_landed"] == len(run.verdicts) == len(run.kill_points) > 50
        ids = [p.id for p in run.kill_points]
        failed[name] = [ids.index(f.kill_point.id) for f in run.failures]
        loop = name.removeprefix("make_agent").lstrip("_")
        assert _documented(loop)[2:] == [str(len(run.verdicts)), str(len(run.failures))]
    assert failed["make_agent"] == []
    replayed, lost = failed["make_agent_replays_follow_ups"], failed["make_agent_loses_follow_ups"]
    assert lost and replayed and lost[-1] + 1 == replayed[0]  # one boundary: the follow-up saved
    assert lost == list(range(lost[0], replayed[0])) and replayed == list(
        range(replayed[0], len(ids)))
    assert "commit" in ids[replayed[0]]  # ... by a commit of the saver's transaction
