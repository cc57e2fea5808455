"""Benchmark: what the pause model costs in each mode that runs it, against the process
model on the same agent and scenario (tests/data/pause_charge.toml: two turns, one keyed
charge; a 60 s downtime). In process: tests/pause_agents.py's `naive` and `fenced`; as a
command: their port tests/command_agents/pause_agent.py (SIGSTOP/SIGCONT of its process
group); in subprocess mode: `naive` by its spec (two children of a fork server, each
stopping itself at its point, the world handed over with the turn). Process model with single crashes, every kill point. Wall and CPU (this process
and its children) of each run, and the ratios pause/process within one run are the
figures to read.

Run: python bench/pause_modes.py [ROW ...]  (one line per run, then a JSON line; ROW: the
rows whose name starts so, e.g. `subprocess`)

One run, 2 shared cores (process: crash states resumed; pause: schedules run, each both
incarnations to their ends):
  in-process naive   process 34 states  2.3 s wall | pause  87 schedules  1.4 s wall
                     (x0.6: that process run paid the first set-up; now warmed up first)
  in-process fenced  process 48 states  0.5 s wall | pause  62 schedules  0.8 s (x1.7)
  command naive      process 20 states 11.5 s wall | pause  79 schedules 49.2 s (x4.3 wall,
                     x5.9 cpu)
  command fenced     process 25 states 15.2 s wall | pause 109 schedules 74.0 s (x4.9 wall,
                     x6.5 cpu)
Subprocess mode (`python bench/pause_modes.py in-process subprocess`, another run, 2 shared
cores, 2 fork servers):
  in-process naive   process 34 states  0.5 s wall | pause  87 schedules  1.8 s (x3.4 wall,
                     x4.3 cpu)
  subprocess naive   process 34 states  9.9 s wall | pause  87 schedules 28.4 s (x2.9 wall,
                     x2.8 cpu; 0.33 s wall a schedule, two forked incarnations each)
"""
from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

import faultsim  # noqa: E402

SCENARIO = str(ROOT / "tests" / "data" / "pause_charge.toml")
COMMAND = f"cmd:{sys.executable} {ROOT / 'tests' / 'command_agents' / 'pause_agent.py'}"


def cpu() -> float:
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def measure(agent, model: str) -> dict:
    wall, used = time.perf_counter(), cpu()
    kw = {"workers": 0} if not isinstance(agent, str) else {}
    if isinstance(agent, str) and not agent.startswith("cmd:"):  # fork servers, one a core
        from faultsim.real.explore import explore_subprocess

        (run,) = explore_subprocess(agent, faultsim.load_scenario(SCENARIO),
                                    crash_model=model, crashes=1,
                                    workers=os.cpu_count() or 1).runs
    else:
        (run,) = faultsim.explore(agent, SCENARIO, crash_model=model, crashes=1, **kw).runs
    return {"schedules": len(run.verdicts), "failed": sum(1 for v in run.verdicts
                                                          if v.violations),
            "wall": round(time.perf_counter() - wall, 2), "cpu": round(cpu() - used, 2)}


def main() -> None:
    import pause_agents

    agents = {"in-process naive": pause_agents.naive, "in-process fenced": pause_agents.fenced,
              "command naive": COMMAND, "command fenced": COMMAND + " --fenced",
              # `fenced` creates its versions with os.link, which subprocess mode's file
              # tracing does not follow (its clean run shows no checkpoint): naive only
              "subprocess naive": "pause_agents:naive"}
    only = sys.argv[1:]  # e.g. `subprocess`: the rows whose name starts so
    agents = {k: v for k, v in agents.items() if not only or k.startswith(tuple(only))}
    measure(pause_agents.naive, "process")  # the imports and first set-up, paid once
    figures = {}
    for name, agent in agents.items():
        process, pause = measure(agent, "process"), measure(agent, "pause")
        figures[name] = {"process": process, "pause": pause,
                         "wall_ratio": round(pause["wall"] / process["wall"], 1),
                         "cpu_ratio": round(pause["cpu"] / process["cpu"], 1)}
        print(f"{name:18} process {process['schedules']:3} states {process['wall']:6.1f}s "
              f"wall {process['cpu']:6.1f}s cpu | pause {pause['schedules']:3} schedules "
              f"({pause['failed']} failed) {pause['wall']:6.1f}s wall {pause['cpu']:6.1f}s "
              f"cpu | x{figures[name]['wall_ratio']} wall, x{figures[name]['cpu_ratio']} cpu")
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
