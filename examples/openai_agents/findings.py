"""What faultsim finds on the OpenAI Agents SDK examples and their planted mistakes: the
table in docs/how-to/openai-agents.md.

    python examples/openai_agents/findings.py      # from the repository root, ~40 s

One row per factory (seed 0, process crashes, one crash per run; the SQLiteSession
agents in subprocess mode, the RunState ones in process), then the same crash states per
kill-point category. Counts are crash states; a state can break several invariants.
"""
from __future__ import annotations

import collections
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import faultsim  # noqa: E402

import approval_agent  # noqa: E402

# factory, scenario, what it is
FACTORIES = [
    ("session_agent:make_agent", "scenario.toml", "SQLiteSession; payment looked up, email intent"),
    ("session_agent:make_agent_thinking", "scenario.toml", "the same, Claude thinking on"),
    ("session_agent:make_agent_thinking_trimmed", "scenario.toml",
     "planted: thinking on, history read back without reasoning items"),
    ("session_agent:make_agent_reprompts", "scenario.toml", "task re-sent on restart"),
    ("session_agent:make_agent_without_lookup", "scenario.toml", "payment not looked up: the keyed re-submission is the step in flight"),
    ("session_agent:make_agent_blind_email", "scenario.toml", "planted: email without intent"),
    ("approval_agent:make_agent", "approval.toml", "RunState pause, approved; refund looked up"),
    ("approval_agent:make_agent_streamed", "approval.toml", "the same, Runner.run_streamed"),
    ("approval_agent:make_agent_without_lookup", "approval.toml", "planted: refund not looked up"),
    ("approval_agent:make_agent_fresh_key", "approval.toml", "planted: a fresh key per attempt"),
    ("approval_agent:make_agent_unattended", "approval.toml", "nobody approves"),
]
INVARIANTS = ("effects_exactly_once", "one_step_repeated_per_crash", "completes_or_escalates")


def explore(spec: str, scenario_file: str):
    scenario = faultsim.load_scenario(HERE / scenario_file)
    module, name = spec.split(":")
    if scenario.store.needs_subprocess:  # a spec: it runs on the backend its store needs
        return faultsim.explore(f"{HERE / module}.py:{name}", scenario, agent_name=spec,
                                workers=1)
    return faultsim.explore(getattr(approval_agent, name), scenario, agent_name=spec)


def main() -> None:
    head = ["factory", "what", "mode", "crash states", "ok", *INVARIANTS, "others broken",
            "escalated", "seconds"]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    by_category: dict[str, collections.Counter] = {}
    replays = []
    for spec, scenario_file, what in FACTORIES:
        start = time.perf_counter()
        run = explore(spec, scenario_file).runs[0]
        seconds = time.perf_counter() - start
        broken = collections.Counter(v.invariant for verdict in run.verdicts
                                     for v in verdict.violations)
        ok = sum(1 for v in run.verdicts if not v.violations)
        other = ", ".join(f"{n} {inv}" for inv, n in sorted(broken.items())
                          if inv not in INVARIANTS)
        cells = [f"`{spec}`", what, run.mode, str(len(run.verdicts)), str(ok),
                 *[str(broken[i]) if broken[i] else "·" for i in INVARIANTS],
                 other or "·", str(run.escalated or "·"), f"{seconds:.1f}"]
        print("| " + " | ".join(cells) + " |")
        counts = by_category.setdefault(spec, collections.Counter())
        for verdict in run.verdicts:
            counts[(verdict.kill_point.category, "all")] += 1
            counts[(verdict.kill_point.category, "bad")] += bool(verdict.violations)
        if run.failures:
            first = run.failures[0]
            replays.append(f"{spec}: {first.kill_point.id}: {run.replay_command(first)}")
    categories = sorted({c for counts in by_category.values() for c, _ in counts})
    print()
    print("violating / judged crash states per kill-point category:")
    print()
    print("| factory | " + " | ".join(categories) + " |")
    print("|" + "---|" * (len(categories) + 1))
    for spec, counts in by_category.items():
        cells = [f"{counts[(c, 'bad')]}/{counts[(c, 'all')]}" if counts[(c, "all")] else "·"
                 for c in categories]
        print(f"| `{spec}` | " + " | ".join(cells) + " |")
    print()
    for line in replays:
        print(line)


if __name__ == "__main__":
    main()
