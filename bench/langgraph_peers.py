"""Benchmark: faultsim's LangGraph adapter against crashresume, on the same graph.

The graph is the bundled ReAct payment agent (scenarios/langgraph/react_payments.toml):
look up an invoice, pay it with a keyed provider, confirm by a blind email. Both tools run
it unchanged with LangGraph's InMemorySaver, under each durability mode; both get the same
fake Claude (crashresume's run reaches it over faultsim's loopback endpoint, as any agent
that builds its own ChatAnthropic would).

crashresume (pip install crashresume) crashes right after each effect it is told about,
restarts the subject and compares effect logs and state. faultsim kills at every model
answer, tool boundary and checkpointer call, and judges each resume with its oracle.

Prints, per durability mode and tool: crash points tried, runs that broke, which kinds of
break, and seconds; last, one JSON line with the same figures.

Run: python bench/langgraph_peers.py        (needs faultsim[langgraph] and crashresume)
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCENARIO = ROOT / "scenarios" / "langgraph" / "react_payments.toml"
MODES = ("sync", "async", "exit")


def faultsim_figures(mode: str) -> dict:
    from faultsim import load_scenario
    from faultsim.adapters.langgraph.verdicts import classify
    from faultsim.settings.loading import factory_for
    from faultsim.inprocess.explore import explore

    sc = load_scenario(SCENARIO)
    started = time.perf_counter()
    run = explore(factory_for("langgraph:" + mode, sc), sc,
                  agent_name="langgraph:" + mode).runs[0]
    kinds: dict[str, int] = {}
    for verdict in run.verdicts:
        for column in classify(verdict):
            if column != "resumed correctly":
                kinds[column] = kinds.get(column, 0) + 1
    return {"crash_points": len(run.verdicts), "broken": len(run.failures),
            "kinds": kinds, "seconds": round(time.perf_counter() - started, 2)}


def crashresume_figures(mode: str) -> dict:
    import crashresume
    from langchain_anthropic import ChatAnthropic
    from langchain_core.tools import tool
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.prebuilt import create_react_agent

    from faultsim import load_scenario
    from faultsim.model import serve

    sc = load_scenario(SCENARIO)
    world = sc.build_world()
    stores: dict[str, InMemorySaver] = {}

    class Subject:
        """The graph as crashresume's step(input) subject; effects go through ctx."""

        def __init__(self, ctx, base_url: str) -> None:
            self.ctx = ctx
            saver = stores.setdefault(ctx.run_id, InMemorySaver())

            @tool
            def lookup_invoice(invoice: str) -> str:
                """Look up an invoice."""
                return json.dumps({"supplier": "Acme", "amount_cents": 12000,
                                   "status": "approved"})

            @tool
            def pay_invoice(invoice: str, amount_cents: int) -> str:
                """Pay a supplier invoice."""
                ctx.effect("pay", {"invoice": invoice, "amount_cents": amount_cents},
                           key=f"pay-{invoice}-{amount_cents}")
                return json.dumps({"id": "pay-1"})

            @tool
            def send_email(to: str, subject: str, body: str) -> str:
                """Send an email."""
                ctx.effect("email", {"to": to, "subject": subject})
                return json.dumps({"id": "mail-1"})

            chat = ChatAnthropic(model=sc.model, base_url=base_url, api_key="k",
                                 max_tokens=1024, max_retries=0)
            self.graph = create_react_agent(chat, [lookup_invoice, pay_invoice, send_email],
                                            checkpointer=saver)
            self.config = {"configurable": {"thread_id": ctx.run_id}}

        def step(self, task: str) -> None:
            state = self.graph.get_state(self.config)
            payload = None if state.values else {"messages": [("user", task)]}
            self.graph.invoke(payload, self.config, durability=mode)

        def state(self):
            values = self.graph.get_state(self.config).values
            return [m.content for m in values.get("messages", [])][-1:]

    started = time.perf_counter()
    with serve(world.model) as endpoint:
        report = crashresume.conform(lambda ctx: Subject(ctx, endpoint.base_url),
                                     inputs=[sc.task])
    kinds: dict[str, int] = {}
    for finding in report.findings:
        kinds[finding.kind] = kinds.get(finding.kind, 0) + 1
    return {"crash_points": report.crash_points,
            "broken": len({f.crash_after for f in report.findings}), "kinds": kinds,
            "seconds": round(time.perf_counter() - started, 2)}


def main() -> int:
    import warnings

    warnings.filterwarnings("ignore", message="create_react_agent has been moved")
    import importlib.util

    if importlib.util.find_spec("crashresume") is None:
        print("this benchmark compares with crashresume: pip install crashresume",
              file=sys.stderr)
        return 2
    figures = {}
    for mode in MODES:
        figures[mode] = {"faultsim": faultsim_figures(mode),
                         "crashresume": crashresume_figures(mode)}
        for tool_name, f in figures[mode].items():
            kinds = ", ".join(f"{k} {n}" for k, n in sorted(f["kinds"].items())) or "none"
            print(f"{mode:5}  {tool_name:11}  crash points {f['crash_points']:3}  "
                  f"broken {f['broken']:3}  ({kinds})  {f['seconds']:.1f}s")
    print(json.dumps(figures, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
