"""The command backend behind `faultsim.backends`: an agent spec `cmd:COMMAND` (any
program, any language) explored from outside (`sweep.py`), one crash per run, under the
process and power models. Loaded by name (`backends.BACKENDS`, `BY_PREFIX`) wherever such
a spec is given.

May import: this package and what it may import; never another backend."""
from __future__ import annotations

import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any, Callable, Mapping

from ..backends import (Agent, Survey, factory_job_refusal, refuse_settings, refused,
                        unclassed_refusal)
from ..core.crashmodel import PAUSE
from ..reports.report import Report
from ..settings.options import in_shard


def no_factory(spec: str) -> Callable[..., Any]:
    """`loading.SPECS`' entry for `cmd:`: a command is run, never imported. The front ends
    that resolve a spec to a factory first (the pytest marker) get one that refuses to be
    called: `backends.BY_PREFIX` sends the agent here, where only its spec is used."""
    def factory(env: Any) -> Any:
        from ..settings.loading import AgentLoadError

        raise AgentLoadError(f"agent {spec!r} is a command: it runs as a process of its "
                             "own, it has no Python factory to call")
    return factory


class Command:
    name = "command"

    def refuses(self, agent: Agent, scenario: Any, options: Any, job: str) -> str | None:
        if agent.spec is None:
            return "an agent run as a command is named by its spec, cmd:COMMAND"
        if job == "formats":
            return factory_job_refusal(job, f"{agent.spec}: ",
                                       "explore a command with faultsim run")
        if job in ("items", "session"):
            return factory_job_refusal(job, f"{agent.spec}: ", "for an agent run as a "
                                       "command mark the test without them and call "
                                       "crash_safety.check()")
        if job == "explore":
            if options.mode == "in-process":
                return ("--mode in-process: an agent run as a command is a real process; "
                        "drop --mode (or give --mode subprocess)")
            if (options.crashes or 1) > 2:
                return (f"--crashes {options.crashes}: an agent run as a command is explored "
                        "with one or two crashes per schedule (give --crashes 2 at most)")
            refused = (unclassed_refusal(options, scenario, "an agent run as a command")
                       or pause_refusal(options))
            if refused:
                return refused
        from .syscalls import strace_unavailable

        why = strace_unavailable()
        return f"{agent.spec}: {why}" if why else None

    def explore(self, agent: Agent, scenario: Any, options: Any, *,
                progress: Callable[..., None] | None = None, plan: Callable | None = None,
                settings: Mapping[str, Any] | None = None) -> Report:
        from .pairs import explore

        refuse_settings(settings)
        only = options.only
        keep = lambda kp: (only is None or only(kp)) and in_shard(kp.index,  # noqa: E731
                                                                 options.shard)
        say = None
        if progress is not None:
            say = lambda line: print(f"  {scenario.id} {line}",  # noqa: E731
                                     file=sys.stderr, flush=True)
        models = tuple(options.crash_model or scenario.profile.crash_models)
        rest = tuple(m for m in models if m != PAUSE)
        report = Report()
        if rest:
            found = explore(agent.spec, scenario, crash_models=rest, only=keep,
                            timeout=options.timeout, seed=options.seed, progress=say,
                            agent=agent.label, probe=options.only is None and (
                                options.shard is None or options.shard[0] == 1),
                            crashes=options.crashes or 1)
            runs = list(found.runs.values())
            if runs:
                runs[-1].notes.append(kills_line(found))
            report = found.report()
        if PAUSE in models:  # its own stage, after the others (command/pause.py)
            from .pause import pause_run

            # `keep`: --kill-point and the shard's kill points (by index, as the process
            # sweep's): schedules share nothing, so the shards' add up to the whole run's
            run, _found = pause_run(agent.spec, scenario, only=keep,
                                    timeout=options.timeout, seed=options.seed,
                                    agent=agent.label, progress=say)
            run.shard = options.shard
            run.shard_by = "kill point"
            report.runs.append(run)
        return report

    def survey(self, agent: Agent, scenario: Any, *,
               timeout: float | str | None = 30.0) -> Survey:
        """The two clean runs: the kill points, one process crash state each."""
        from .launch import split
        from .sweep import clean_runs, default_services, kill_points

        with tempfile.TemporaryDirectory(prefix=f"faultsim-{scenario.id}-") as tmp:
            golden, clean = clean_runs(split(agent.spec), scenario, Path(tmp),
                                       timeout="auto" if timeout is None else timeout,
                                       services=default_services())
        points = kill_points(golden)
        cats = Counter(p.category for p in points)
        lines = [f"  agent        {agent.spec} (a command, real processes under strace)",
                 f"  kill points  {len(points)}: " + ", ".join(
                     f"{c} {n}" for c, n in cats.items()),
                 f"  budget       {len(points)} crash runs (one per kill point), then one "
                 f"resume per distinct crash state, at about {clean[0].seconds:.1f} s each "
                 "(a clean run's, measured now)"]
        from ..pipeline.pause import pause_points

        lines.insert(2, f"  pause        {len(pause_points(points))} pause points (the boundary "
                        "kill points after the first event), each woken at the new "
                        "incarnation's first model request, after each of its checkpoint "
                        "saves, and at its end; a schedule costs two incarnations")
        lines += [f"    {p.id}" for p in points]
        return Survey(points, {"process": len(points), "power": f"about {len(points)}+"},
                      lines)

    def replay(self, token: Any, agent: Agent | None, *,
               timeout: float | str | None = "auto") -> Any:
        """The clean runs, the token's one crash, its states under the token's model, and
        the one it names."""
        from ..errors import UsageError
        from ..scenario import load_scenario
        from ..schedule import ScheduleResult
        from .pairs import explore

        if token.crash_model == PAUSE:  # one pause schedule: its point and its wake
            from .pause import replay_pause

            return replay_pause(token, agent.spec if agent is not None and agent.spec
                                else token.agent, timeout)
        if len(token.steps) > 2:
            raise UsageError("a token of an agent run as a command names one or two "
                             "crashes; schedules of more are not explored for it")
        step = token.steps[0]
        spec = agent.spec if agent is not None and agent.spec else token.agent
        scenario = load_scenario(token.scenario)
        last = token.steps[-1]
        found = explore(spec, scenario, crash_models=(token.crash_model,),
                        only=lambda kp: kp.index == step.index, timeout=timeout,
                        seed=token.seed, agent=spec, probe=False,
                        crashes=len(token.steps),
                        second=lambda kp: kp.index == last.index and kp.offset == last.offset)
        run = found.runs[token.crash_model]
        if len(token.steps) == 2:  # the pair: its first crash state, then its second
            chosen = [v for v in found.deep if v.earlier[0].order == step.order
                      and v.order == last.order]
        else:
            chosen = [v for v in run.verdicts if v.order == step.order]
        if not chosen:
            raise UsageError(f"k{last.index}: the replay left no crash state "
                             f"{last.order + 1} where the token names one")
        return ScheduleResult(chosen[0], run)

    def items(self, agent: Agent, scenario: Any, **settings: Any) -> Any:
        refused(self, agent, scenario, "items")

    def session(self, agent: Agent, scenario: Any, **settings: Any) -> Any:
        refused(self, agent, scenario, "session")

    def formats(self, agent: Agent, scenario: Any, **settings: Any) -> Any:
        refused(self, agent, scenario, "formats")


def pause_refusal(options: Any) -> str | None:
    """What the pause model of a command does not do yet, in one line (issue 55)."""
    models = options.crash_model or ()
    if PAUSE not in (models if not isinstance(models, str) else (models,)):
        return None
    if (options.crashes or 1) > 1:
        return (f"--crashes {options.crashes}: the pause model pauses one incarnation per "
                "schedule (give --crashes 1)")
    return None


def kills_line(found: Any) -> str:
    again = f", {found.held_again} held again on every call of the kind" \
        if found.held_again else ""
    pairs = f" ({found.pair_kills} of them second crashes, during recovery)" \
        if found.pair_kills else ""
    return (f"  kills         {found.kills_landed} landed{pairs} (the command's process group "
            f"SIGKILLed at its boundary, checked dead, the disk checked against the traced "
            f"calls){again}; {found.crash_runs} crash runs, {found.resumes} resumes for "
            f"{found.states} crash states")
