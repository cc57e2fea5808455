"""What faultsim finds on the billing agent and its planted mistakes: the table of
docs/how-to/pydantic-ai.md (tests/test_docs.py checks it).

    python examples/pydantic_ai/findings.py        # from the repository root, ~10 s

One row per factory of billing_agent.py (seed 0, process crashes, one crash per run);
the columns are the LangGraph table's (faultsim.adapters.langgraph.verdicts.classify, which
reads verdicts only), plus the crash states whose resumed run asked a person.
"""
from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import faultsim  # noqa: E402
from faultsim.adapters.langgraph.verdicts import COLUMNS, classify  # noqa: E402

import billing_agent  # noqa: E402

FACTORIES = {
    "make_agent": "step, continue",
    "make_agent_saves_per_node": "node, continue",
    "make_agent_saves_at_end": "end, continue",
    "make_agent_reprompts": "step, reprompt",
    "make_agent_blind_email": "step, continue; email without intent",
}


def main() -> None:
    scenario = faultsim.load_scenario(HERE / "scenario.toml")
    spec = (HERE / "billing_agent.py").relative_to(Path.cwd()) if HERE.is_relative_to(
        Path.cwd()) else HERE / "billing_agent.py"
    head = ["factory", "save, resume", *COLUMNS, "escalated"]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    replays = []
    for name, how in FACTORIES.items():
        report = faultsim.explore(getattr(billing_agent, name), scenario,
                                  agent_name=f"{spec}:{name}")
        run = report.runs[0]
        counts = {c: 0 for c in COLUMNS}
        for verdict in run.verdicts:
            counts["crash states"] += 1
            for column in classify(verdict):
                counts[column] += 1
        if run.failures:
            first = run.failures[0]
            replays.append(f"{name}: {first.kill_point.id}: {run.replay_command(first)}")
        cells = [str(counts[c]) if counts[c] else "·" for c in COLUMNS]
        print("| " + " | ".join([name, how, *cells, str(run.escalated or "·")]) + " |")
    print()
    for line in replays:
        print(line)


if __name__ == "__main__":
    main()
