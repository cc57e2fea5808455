"""The Claude Agent SDK backend behind `faultsim.backends`: a `claude-agent-sdk:FILE.py:ATTR`
agent explored on its own processes (`runs.py`), one crash per run, under the process and
power models. Loaded by name (`backends.BACKENDS`, `BY_PREFIX`) wherever such a spec is
given: `faultsim run/list/replay`, the pytest marker, `faultsim.explore`.

May import: this adapter and what it may import; never another backend."""
from __future__ import annotations

import sys
import time
from collections import Counter
from typing import Any, Callable, Mapping

from ...backends import (Agent, Survey, factory_job_refusal, pause_refusal, refused,
                         unclassed_refusal)
from ...errors import UsageError
from ...settings.options import in_shard
from ...reports.report import Report


def _seconds(timeout: Any) -> float:
    """Each incarnation costs seconds: "auto" and None mean 60 s."""
    return 60.0 if timeout == "auto" else timeout or 60.0


class ClaudeAgentSdk:
    name = "claude-agent-sdk"

    def refuses(self, agent: Agent, scenario: Any, options: Any, job: str) -> str | None:
        if job == "formats":
            return factory_job_refusal(job, f"{agent.spec}: ", "a Claude Agent SDK agent "
                                       "runs its own CLI, explore it with faultsim run")
        if job in ("items", "session"):
            return factory_job_refusal(job, f"{agent.spec}: ", "for a Claude Agent SDK "
                                       "agent mark the test without them and call "
                                       "crash_safety.check()")
        if agent.spec is None:
            return ("a Claude Agent SDK agent is named by its spec, "
                    "claude-agent-sdk:FILE.py:ATTR")
        if job == "explore":
            if options.mode == "in-process":
                return ("--mode in-process: a Claude Agent SDK agent runs its CLI as a real "
                        "process; drop --mode (or give --mode subprocess)")
            if (options.crashes or 1) > 1:
                return (f"--crashes {options.crashes}: a Claude Agent SDK agent is explored "
                        "one crash per run (each incarnation costs seconds)")
            refused = (unclassed_refusal(options, scenario, "a Claude Agent SDK agent",
                                         "its `faultsim list` says its budget; ")
                       or pause_refusal(options, scenario, "a Claude Agent SDK agent"))
            if refused:
                return refused
        if job in ("explore", "survey"):
            from .sdk import cli_unavailable

            why = cli_unavailable()
            if why:
                return f"{agent.spec}: {why}"
        return None

    def explore(self, agent: Agent, scenario: Any, options: Any, *,
                progress: Callable[..., None] | None = None, plan: Callable | None = None,
                settings: Mapping[str, Any] | None = None) -> Report:
        """Real processes, one crash per run, its report the same as any agent's; with a
        console watching (`progress`), what it does is said on stderr as it goes."""
        from . import writes
        from .runs import run

        asked = (settings or {}).get("transcript_writes")
        traced = writes.strace_unavailable() if asked is not False else \
            "--no-transcript-writes"
        if asked and traced is not None:
            raise UsageError(f"--transcript-writes: {traced}")
        only = options.only
        keep = lambda kp: (only is None or only(kp)) and in_shard(kp.index - 1,  # noqa: E731
                                                                 options.shard)
        say = None
        if progress is not None:
            print(f"{scenario.id} · {agent.spec}: the clean run, then runs stopped at each "
                  "kill point (a crash run where a stop cannot be kept) and one resume per "
                  "distinct crash state, on real processes" + (
                      "" if traced is None else
                      f" (no kills inside transcript writes: {traced})"),
                  file=sys.stderr, flush=True)
            say = lambda line: print(f"  {scenario.id} {line}",  # noqa: E731
                                     file=sys.stderr, flush=True)
        found, runs = run(agent.spec, scenario, options.crash_model or ("process",),
                          timeout=_seconds(options.timeout), only=keep, progress=say,
                          writes=traced is None)
        if runs:
            runs[-1].notes.append(_kills_line(found))
        return Report(list(runs))

    def survey(self, agent: Agent, scenario: Any, *,
               timeout: float | str | None = 30.0) -> Survey:
        """One clean run on the bundled CLI gives the kill points; each incarnation costs
        seconds, so the lines say the budget."""
        from . import CATEGORIES, survey
        from .report import engine_point
        from .runs import load
        from .writes import HOLD, strace_unavailable

        untraced = strace_unavailable()
        found = survey(load(agent.spec), scenario, timeout=_seconds(timeout),
                       writes=untraced is None)
        cats = Counter(kp.category for kp in found.kill_points)
        lines = [f"  agent        {agent.spec} (Claude Agent SDK, real processes)",
                 f"  kill points  {len(found.kill_points)}: crash states process about "
                 f"{found.crash_states} (the state as written and each transcript prefix)",
                 "               " + ", ".join(f"{c} {cats[c]}" for c in CATEGORIES
                                              if cats[c])]
        if (untraced or found.untraced) is not None:
            lines.append("               no kills inside transcript writes: "
                         f"{untraced or found.untraced}")
        held = "" if not found.writes else f", and strace holding each transcript write " \
                                           f"{HOLD:g} s in the run stopped in them"
        lines.append(f"  budget       about {max(1, round(found.seconds / 60))} min: "
                     f"{found.incarnations} incarnations at "
                     f"{found.seconds_per_incarnation:.1f} s (a clean run's, measured now)"
                     f"{held}")
        return Survey([engine_point(kp) for kp in found.kill_points],
                      {"process": f"about {found.crash_states}"}, lines)

    def replay(self, token: Any, agent: Agent | None, *,
               timeout: float | str | None = "auto") -> Any:
        from .runs import replay

        return replay(token, agent=agent.spec if agent is not None else None,
                      timeout=_seconds(timeout))

    def items(self, agent: Agent, scenario: Any, **settings: Any) -> Any:
        refused(self, agent, scenario, "items")

    def session(self, agent: Agent, scenario: Any, **settings: Any) -> Any:
        refused(self, agent, scenario, "session")

    def formats(self, agent: Agent, scenario: Any, **settings: Any) -> Any:
        refused(self, agent, scenario, "formats")

def _kills_line(found: Any) -> str:
    """What the report cannot say: how many kills landed, and the transcript writes."""
    inside = sum(1 for v in found.verdicts if v.kill_point.category == "transcript-write")
    writes_line = (f"not traced: {found.untraced}" if found.writes is None else
                   f"{found.writes} in the clean run, {inside} killed inside"
                   + (f", {len(found.writes_missed)} not reached (the run wrote fewer)"
                      if found.writes_missed else ""))
    killed = found.kills_landed - found.stopped
    how = (f"{killed} the CLI's process group SIGKILLed, each checked dead; {found.stopped} "
           "read with it SIGSTOPped, each checked stopped, in one run that went on"
           if found.stopped else "the CLI's process group SIGKILLed, each checked dead")
    return f"  kills         {found.kills_landed} landed ({how}); transcript writes {writes_line}"
