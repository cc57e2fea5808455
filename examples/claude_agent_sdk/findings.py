"""What faultsim finds on the Claude Agent SDK billing agent: the docs' findings table.

    python examples/claude_agent_sdk/findings.py [--prefixes messages] [--power] [--no-share]
                                                 [--no-stops] [--no-writes]

Real processes (the bundled Claude Code CLI), one crash per run; each incarnation costs
about two seconds, so the whole sweep takes minutes. Where strace can trace, the kills
inside the CLI's transcript writes are swept too (`transcript-write`). Crash states equal
to one resumed already share its resumed run (`--no-share`: resume every state, for
comparing). One run, stopped at each kill point where the CLI waits on faultsim, reads
those points' crash states (`--no-stops`: a crash run killed at each point, for comparing).
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import faultsim  # noqa: E402
from faultsim.adapters import claude_agent_sdk as cs  # noqa: E402

import claude_billing_agent  # noqa: E402

AGENTS = ["run_billing", "run_billing_careful", "run_billing_continues"]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--prefixes", default="messages", choices=cs.PREFIXES)
    parser.add_argument("--power", action="store_true")
    parser.add_argument("--agent", nargs="*", default=AGENTS, choices=AGENTS)
    parser.add_argument("--no-share", action="store_true",
                        help="resume every crash state, even one equal to a state resumed")
    parser.add_argument("--no-writes", action="store_true",
                        help="no kills inside the CLI's transcript writes")
    parser.add_argument("--no-stops", action="store_true",
                        help="a crash run killed at each kill point, not one run stopped at "
                        "each")
    args = parser.parse_args()
    scenario = faultsim.load_scenario(HERE / "scenario.toml")
    results = {}
    for name in args.agent:
        started = time.monotonic()
        result = results[name] = cs.explore(
            getattr(claude_billing_agent, name), scenario, prefixes=args.prefixes, power=args.power,
            progress=lambda line: print(f"{name} {line}", flush=True),
            share=not args.no_share, stops=not args.no_stops,
            writes=False if args.no_writes else None)
        print(f"{name}: {len(result.kill_points)} kill points, {result.kills_landed} kills "
              f"landed ({result.stopped} read from one run stopped there), {len(result.verdicts)} crash states judged ({result.resumed} resumed, the "
              f"others sharing an equal state's run), {result.incarnations} "
              f"incarnations, {time.monotonic() - started:.0f} s (prefixes={args.prefixes}"
              f"{', power' if args.power else ''}); transcript writes: " +
              (f"{result.writes}, {len(result.writes_missed)} not reached"
               if result.writes is not None else f"not traced ({result.untraced})"),
              flush=True)
    for name, result in results.items():
        print(f"\n{name}, by kill-point category:\n")
        print(cs.table(result.verdicts, by=lambda v: v.kill_point.category))
        print(f"\n{name}, by crash state:\n")
        print(cs.table(result.verdicts, by=_state_kind, head="crash state"))
        print()
        _failures(result)


def _state_kind(v: cs.Verdict) -> str:
    if v.kill_point.category == cs.WRITE_KILL:
        return "as written, killed inside a transcript write"
    if v.state == "as written":
        return "as written at the kill"
    if v.state.startswith("power"):
        return "power loss (torn last entry)"
    return "earlier in the batch window (a prefix)"


def _failures(result: cs.Exploration) -> None:
    for v in result.failures:
        print(f"{v.kill_point.id} [{v.state}] resumed at turn "
              f"{'-' if v.resumed_at is None else v.resumed_at + 1}: " +
              "; ".join(f"{x.invariant}: {x.explanation[:160]}" for x in v.violations))


if __name__ == "__main__":
    main()
