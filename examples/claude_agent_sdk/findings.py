"""What faultsim finds on the Claude Agent SDK billing agent: the docs' findings table.

    python examples/claude_agent_sdk/findings.py [--prefixes messages] [--power]

Real processes (the bundled Claude Code CLI), one crash per run; each incarnation costs
about two seconds, so the whole sweep takes minutes (the budget is printed first).
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

import billing_agent  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--prefixes", default="messages", choices=cs.PREFIXES)
    parser.add_argument("--power", action="store_true")
    args = parser.parse_args()
    scenario = faultsim.load_scenario(HERE / "scenario.toml")
    started = time.monotonic()
    result = cs.explore(billing_agent.run_billing, scenario, prefixes=args.prefixes,
                        power=args.power, progress=lambda line: print(line, flush=True))
    print()
    print(f"{scenario.id}: {len(result.kill_points)} kill points, {result.kills_landed} "
          f"kills landed, {len(result.verdicts)} crash states judged, {result.incarnations} "
          f"incarnations, {time.monotonic() - started:.0f} s (prefixes={args.prefixes}"
          f"{', power' if args.power else ''})")
    print()
    print(cs.table(result.verdicts, by=lambda v: v.kill_point.category))
    print()
    print(cs.table(result.verdicts, by=lambda v: "as written" if v.state == "as written"
                   else "power loss" if v.state.startswith("power") else "earlier in a batch",
                   head="crash state"))
    print()
    for v in result.failures:
        print(f"{v.kill_point.id} [{v.state}] resumed at turn "
              f"{'-' if v.resumed_at is None else v.resumed_at + 1}: " +
              "; ".join(f"{x.invariant}: {x.explanation[:160]}" for x in v.violations))


if __name__ == "__main__":
    main()
