"""Benchmark: crash states per second of the command backend (an agent run as a command,
`cmd:`) against subprocess mode and in-process mode, on equivalent agents and one
scenario (examples/any_language/scenario.toml): tests/command_agents/raw_agent.py as a
command, bench/any_language_agent.py (the same agent as a faultsim factory) in the other
two, bench/any_language_claude_agent.py (the same agent on the Claude Agent SDK, its tool
an SDK MCP tool, on bench/any_language_claude.toml: the same turns, the CLI's tool name)
on the Claude Agent SDK backend, its transcript writes killed too (where strace can
trace; skipped without the SDK and its CLI). Process model, single crashes, every kill
point; the command backend also under the power model (subprocess mode has none). Ratios
within one run are the figures to read.

Run: python bench/any_language.py      (prints one line per backend, then a JSON line)

One run, 2 shared cores, busy (states per second, and against the command backend):
command 1.75/s (19 states), command+power 3.34/s (55; x1.91), subprocess 5.86/s (32;
x3.35), in-process 10.19/s (32; x5.82), claude-agent-sdk 0.44/s (33 states from 15 kills:
its hook and transcript-write kill points, the transcript's prefixes; x0.25). The Claude
agent's violations (18 of 33) are its CLI's: a resume from a cut transcript repeats a
turn; the figure is throughput only.
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

from faultsim.command import explore as explore_command  # noqa: E402
from faultsim.scenario import load_scenario  # noqa: E402

SCENARIO = ROOT / "examples" / "any_language" / "scenario.toml"
AGENT = ROOT / "tests" / "command_agents" / "raw_agent.py"


def main() -> None:
    scenario = load_scenario(SCENARIO)
    figures = {}

    started = time.perf_counter()
    found = explore_command(f"cmd:{sys.executable} {AGENT}", scenario,
                            crash_models=("process",))
    seconds = time.perf_counter() - started
    figures["command"] = {"crash_states": found.states, "kills": found.kills_landed,
                          "seconds": round(seconds, 2)}

    started = time.perf_counter()
    found = explore_command(f"cmd:{sys.executable} {AGENT}", scenario,
                            crash_models=("process", "power"))
    seconds = time.perf_counter() - started
    figures["command+power"] = {"crash_states": found.states, "kills": found.kills_landed,
                                "seconds": round(seconds, 2)}

    from faultsim.real.explore import explore_subprocess

    stats: dict = {}
    started = time.perf_counter()
    report = explore_subprocess(str(ROOT / "bench" / "any_language_agent.py"), scenario,
                                crash_model="process", stats=stats)
    seconds = time.perf_counter() - started
    # (its one violation is the version probe's, P4: this agent reads any version)
    figures["subprocess"] = {"crash_states": stats["crash_states"],
                             "kills": stats["kills_landed"], "seconds": round(seconds, 2)}

    from faultsim.inprocess.explore import explore
    from any_language_agent import make_agent

    started = time.perf_counter()
    report = explore(make_agent, scenario, crash_model="process", timeout=60)
    seconds = time.perf_counter() - started
    figures["in-process"] = {"crash_states": sum(len(r.verdicts) for r in report.runs),
                             "kills": None, "seconds": round(seconds, 2)}

    claude = _claude_agent_sdk()
    if claude is not None:
        figures["claude-agent-sdk"] = claude

    for name, f in figures.items():
        f["states_per_second"] = round(f["crash_states"] / f["seconds"], 2)
        print(f"{name:16} {f['crash_states']:4} crash states in {f['seconds']:7.2f} s: "
              f"{f['states_per_second']:6.2f}/s")
    base = figures["command"]["states_per_second"]
    ratios = {n: round(f["states_per_second"] / base, 2) for n, f in figures.items()}
    print(json.dumps({"figures": figures, "per_second_vs_command": ratios}))


def _claude_agent_sdk() -> dict | None:
    """The Claude Agent SDK backend on the equivalent agent, or None (and why, on stderr)
    where the SDK or its CLI is missing."""
    try:
        from faultsim.adapters.claude_agent_sdk import cli_unavailable, explore
    except ImportError as exc:
        print(f"claude-agent-sdk: skipped ({exc})", file=sys.stderr)
        return None
    why = cli_unavailable()
    if why:
        print(f"claude-agent-sdk: skipped ({why})", file=sys.stderr)
        return None
    from any_language_claude_agent import run_pay

    started = time.perf_counter()
    found = explore(run_pay, load_scenario(ROOT / "bench" / "any_language_claude.toml"))
    seconds = time.perf_counter() - started
    return {"crash_states": len(found.verdicts), "kills": found.kills_landed,
            "seconds": round(seconds, 2),
            "violations": sum(1 for v in found.verdicts if v.violations)}


if __name__ == "__main__":
    main()
