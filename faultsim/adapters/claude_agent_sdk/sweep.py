"""The sweep: the clean run, then the pipeline's loop over kill points
(`faultsim.pipeline.crashes`, the command backend's too) given this adapter's crash run,
crash states, memo key (`memo.py`) and resume (`Backend`); and `survey`, its budget."""
from __future__ import annotations

import copy
import dataclasses
import json
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from ...core.crashmodel import CrashState
from ...errors import AgentFailedCleanly, NonDeterminismError
from ...killpoints import KillPoint as EnginePoint
from ...judge.oracle import CrashRun, Golden
from ...reports.interrupted import leaves
from ...pipeline.crashes import Found, Kill, Swept, judge_state, sweep
from ...pipeline.golden import agree
from ...pipeline.sweep import ResumeResult, Shared
from ...scenario import Scenario
from ...world import World
from .writes import session_id, strace_unavailable, transcript_path
from .control import CATEGORIES, WRITE_KILL, KillPoint
from .incarnations import AgentRun, Incarnation, incarnation
from .memo import key
from .report import course, engine_point, name
from .sandbox import restore, sandbox_root, snapshot, work_files
from .results import Exploration, Survey, Verdict
from .states import CHECKPOINT, PREFIXES, crash_states, is_transcript

__all__ = ["Exploration", "Survey", "Verdict"]  # re-exported: their home is results.py

def _new_world(scenario: Scenario) -> World:
    return scenario.build_world()


def golden_run(run: AgentRun, scenario: Scenario, root: Path, *, timeout: float = 60.0,
               world: World | None = None,
               wrap_cli: Callable[[list[str]], list[str]] | None = None
               ) -> tuple[Golden, list[KillPoint], Incarnation]:
    """The clean run (in `world`, a fresh one by default): what the oracle judges against,
    and the kill points it met."""
    world = world if world is not None else _new_world(scenario)
    restore(root, {})
    inc = incarnation(run, scenario, world, root, timeout=timeout, wrap_cli=wrap_cli)
    if inc.outcome is None:
        raise AgentFailedCleanly(scenario, inc.error or "no answer")
    final = work_files(snapshot(root))
    golden = Golden.of(inc.outcome, world, final, [], CHECKPOINT)
    return golden, _in_order(inc.seen), inc


def _in_order(seen: list[KillPoint]) -> list[KillPoint]:
    """The clean run's points, numbered in one order whatever the threads did: by model
    turn (each request starts one), then by category (a stream's tool_use block closes
    before its handler runs, though the two threads may report them the other way)."""
    step, steps = 0, []
    for kp in seen:
        step += kp.category == "model-request"
        steps.append(step)
    ranked = sorted(range(len(seen)), key=lambda n: (steps[n], CATEGORIES.index(
        seen[n].category), n))
    return [KillPoint(i, seen[n].category, seen[n].detail, seen[n].ordinal)
            for i, n in enumerate(ranked, start=1)]




def survey(run: AgentRun, scenario: Scenario, *, timeout: float = 60.0,
           root: Path | None = None, writes: bool | None = None) -> Survey:
    """Run the agent clean, twice, and estimate the sweep: at each kill point, the state as
    written, no transcript, and a cut after each conversation entry written by then (the
    entries of the turns answered before it, and the point's own turn's answer once it
    streamed in); with `writes` (None: where strace can trace), a third run under strace
    counts the transcript writes, one kill point and one crash state each."""
    if writes is None:
        writes = strace_unavailable() is None
    with sandbox_root(scenario.id, root) as root:
        _golden, points, _cold = golden_run(run, scenario, root, timeout=timeout)
        # twice: the first start of the CLI pays for loading its 370 MB binary, and two clean
        # runs must meet the same kill points (else no crash run could find its own)
        _golden, again, inc = golden_run(run, scenario, root, timeout=timeout)
        try:
            agree(course(points), course(again), name)
        except NonDeterminismError as exc:
            raise NonDeterminismError(f"{scenario.path}: {exc}") from None
        files = snapshot(root)
        traced, untraced = None, None
        if writes:
            traced, untraced = write_points(run, scenario, root, len(points),
                                            timeout=timeout)
    answers: dict[int, int] = {}  # turn -> its assistant entries
    results: dict[int, int] = {}  # turn -> the tool results answering it
    for path, data in files.items():
        if not is_transcript(path):
            continue
        for line in data.split(b"\n")[:-1]:
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            message = entry.get("message") or {}
            if entry.get("type") == "assistant":
                turn = re.search(r"_(\d+)(?:_r\d+)?$", str(message.get("id", "")))
                if turn:
                    answers[int(turn.group(1))] = answers.get(int(turn.group(1)), 0) + 1
            elif entry.get("type") == "user" and isinstance(message.get("content"), list):
                for block in message["content"]:
                    turn = re.search(r"toolu_\w+?_(\d+)_\d+", str(block.get("tool_use_id")))
                    if block.get("type") == "tool_result" and turn:
                        results[int(turn.group(1))] = results.get(int(turn.group(1)), 0) + 1
    states, step = 0, 0
    for kp in points:
        step += kp.category == "model-request"
        written = 1 + sum(answers.get(t, 0) + results.get(t, 0) for t in range(1, step))
        if kp.category != "model-request":
            written += answers.get(step, 0)
        states += 1 + written  # as written, no file, a cut per entry but the last
    if traced is None:
        return Survey(points, states, inc.seconds, untraced=untraced)
    return Survey([*points, *traced], states + len(traced), inc.seconds, len(traced))


def write_points(run: AgentRun, scenario: Scenario, root: Path, first: int, *,
                 timeout: float = 60.0) -> tuple[list[KillPoint] | None, str | None]:
    """The `transcript-write` kill points: one clean run with the CLI under strace, its
    transcript writes held and counted (`writes.py`), one point per write; or None and why
    not, when the CLI chose the session id itself (the agent starts with
    `continue_conversation=True` or a session id of its own, which `--session-id` may not
    join): the path strace must watch was not known before the CLI started."""
    restore(root, {})
    world = _new_world(scenario)
    inc = incarnation(run, scenario, world, root, timeout=timeout, writes=True)
    if inc.outcome is None:
        raise AgentFailedCleanly(scenario, f"under strace: {inc.error}")
    expected = transcript_path(root, session_id(scenario.id, 1, 1))
    if not expected.exists():
        return None, ("the CLI chose the session id itself (the agent starts with "
                      "continue_conversation or its own session id), so the transcript's "
                      "path was not known before it started")
    return [KillPoint(first + n, WRITE_KILL, "session", n)
            for n in range(1, (inc.writes or 0) + 1)], None


def kill_states(kp: KillPoint, files: dict[str, bytes], prefixes: str = "messages",
                power: bool = False) -> list[tuple[str, dict[str, bytes | None]]]:
    """The crash states the kill at `kp` left `files` in: those `crash_states` derives, or,
    for a kill inside a transcript write, the one a real kill made."""
    if kp.category == WRITE_KILL:
        return [(f"as written (killed at the entry to transcript write {kp.ordinal})", files)]
    return crash_states(files, prefixes, power)


def explore(run: AgentRun, scenario: Scenario, *, prefixes: str = "messages",
            power: bool = False, only: Callable[[KillPoint], bool] | None = None,
            timeout: float = 60.0, settle: float = 0.3, root: Path | None = None,
            writes: bool | None = None,
            progress: Callable[[str], None] | None = None,
            share: bool = True, stops: bool = True,
            leaving: Callable[[Exploration], list] | None = None) -> Exploration:
    """Kill the agent at each kill point of its clean run (or those `only` keeps), resume it
    from every crash state the kill may leave, and judge each with faultsim's oracle.
    `writes` adds the kills inside the CLI's transcript writes (by strace; None: where
    strace can trace). A state equal to one resumed already (`memo.py`: the same sandbox,
    the CLI's own ids and clock aside, and the same world) shares its resumed run;
    `share=False` resumes every state (as the command backend's `share=False`).
    `stops`: one run reads the crash state of every point where the CLI waits on faultsim,
    stopping the CLI's process group there and letting it go on (`Controller._stop`);
    `stops=False` kills a crash run of its own at each point (the long way). `leaving`
    makes the report's runs of an exploration cut short (Ctrl-C, SIGTERM: what the
    interrupt carries up, `faultsim.reports.interrupted`)."""
    if prefixes not in PREFIXES:
        raise ValueError(f"prefixes {prefixes!r}: expected one of {', '.join(PREFIXES)}")
    if writes is None:
        writes = strace_unavailable() is None
    with sandbox_root(scenario.id, root) as root:
        started = time.monotonic()
        golden, points, _ = golden_run(run, scenario, root, timeout=timeout)
        result = Exploration(scenario, golden, points, incarnations=1)
        if writes:
            result.incarnations += 1
            traced, result.untraced = write_points(run, scenario, root, len(points),
                                                   timeout=timeout)
            if traced is not None:
                result.writes = len(traced)
                points = result.kill_points = [*points, *traced]
        else:
            result.untraced = "not asked for"
        chosen = [kp for kp in points if only is None or only(kp)]
        backend = Backend(run, scenario, root, golden, len(points), result, prefixes,
                          power, timeout, settle, chosen if stops else [])
        swept = Swept()

        def so_far() -> list:  # the states judged until the interrupt
            return leaving(dataclasses.replace(
                result, verdicts=[Verdict.of(j) for j in swept.judged],
                kills_landed=result.kills_landed + len(swept.landed),
                seconds=time.monotonic() - started)) if leaving is not None else []

        with leaves(so_far):
            sweep(backend, chosen, golden, share=share, progress=progress, swept=swept)
        result.kills_landed += len(swept.landed)
        result.incarnations += swept.resumes
        result.writes_missed.extend(swept.missed)
        result.verdicts.extend(Verdict.of(j) for j in swept.judged)
        result.seconds = time.monotonic() - started
        return result


@dataclass
class Backend:
    """The agent as the pipeline's kill-point loop sees it (`crashes.Backend`): a crash run
    replays the clean run and kills the CLI at the point (`incarnations.py`), the states
    are the sandbox as written and the transcript's prefixes (`states.py`), keyed by
    `memo.py`."""

    run: AgentRun
    scenario: Scenario
    root: Path
    golden: Golden
    points: int = 0  # the clean run's kill points (a crash run that stops short says so)
    result: Exploration | None = None  # counts the incarnations
    prefixes: str = "messages"
    power: bool = False
    timeout: float = 60.0
    settle: float = 0.3
    # the points runs stop at instead of crash runs (`_stop_runs`)
    stops: list[KillPoint] = field(default_factory=list)
    _stopped: dict | None = None  # key -> Kill, once that run ran

    @property
    def where(self) -> str:
        return f"{self.scenario.path}: "

    def _stop_runs(self) -> dict:
        """The stops' crash states as Kills, by point key: one run stopped at each kill
        point where the CLI waits on faultsim, and one under strace stopped at the entry of
        each transcript write (as a write kill's crash run is traced; the others are not,
        as theirs are not). Where a run could not go on (a stop turned into a kill, it timed
        out or met fewer points), the points it did not stop at get crash runs of their own."""
        kills: dict = {}
        for stops in ([kp for kp in self.stops if kp.category != WRITE_KILL],
                      [kp for kp in self.stops if kp.category == WRITE_KILL]):
            if stops:
                kills.update(self._stop_run(stops))
        return kills

    def _stop_run(self, stops: list[KillPoint]) -> dict:
        world = _new_world(self.scenario)
        restore(self.root, {})
        # each stop waits as a kill does (settle, the config dir still: at most 5 s more)
        limit = self.timeout + len(stops) * (self.settle + 6.0)
        inc = incarnation(self.run, self.scenario, world, self.root, timeout=limit,
                          settle=self.settle, stops=stops)
        if self.result is not None:
            self.result.incarnations += 1
            self.result.stopped += len(inc.stopped)
        kills = {}
        for key, s in inc.stopped.items():
            run = Incarnation(None, None, False, inc.seen[:s.seen], s.files, True,
                              inc.seconds)
            kills[key] = Kill(run, s.world, reached=True, landed=True)
        if inc.killed_at is not None:  # a stop turned kill: that point's crash run
            kills[inc.killed_at] = Kill(inc, world, reached=True, landed=inc.landed,
                                        why=inc.error or "the CLI's process group did not "
                                        "die by SIGKILL")
        return kills

    def crash(self, point: KillPoint) -> Kill:
        if self.stops:
            if self._stopped is None:
                self._stopped = self._stop_runs()
            if point.key in self._stopped:
                return self._stopped[point.key]
        world = _new_world(self.scenario)
        restore(self.root, {})
        crash = incarnation(self.run, self.scenario, world, self.root, target=point,
                            timeout=self.timeout, settle=self.settle)
        if self.result is not None:
            self.result.incarnations += 1
        missed = None
        if crash.files is None and point.category == WRITE_KILL and crash.error is None:
            # the batches are the CLI's timer's: a run may write fewer than the clean
            # run did. Reported, never judged as passed
            missed = f"not reached (this run wrote the transcript {crash.writes} times)"
        return Kill(crash, world, reached=crash.files is not None, landed=crash.landed,
                    met=f"{len(crash.seen)} of {self.points}", error=crash.error,
                    why=crash.error or "the CLI's process group did not die by SIGKILL",
                    missed=missed)

    def states(self, point: KillPoint, kill: Kill) -> list[Found]:
        return [found(name, files)
                for name, files in kill_states(point, kill.run.files, self.prefixes,
                                               self.power)]

    def key(self, point: KillPoint, kill: Kill, found: Found) -> tuple[CrashState, str]:
        return key(found.given, kill.world)  # memo.py: why equal keys give one run

    def resume(self, point: KillPoint, kill: Kill, found: Found) -> ResumeResult:
        return _resumed(self.run, self.scenario, self.golden, kill.world, self.root,
                        point, found.given, found.state, self.timeout)

    def engine_point(self, point: KillPoint) -> EnginePoint:
        return engine_point(point)


def found(name: str, files: dict[str, bytes | None]) -> Found:
    """A crash state as the loop judges it: the guards read the transcript as the CLI
    does (a torn last line is skipped, so an answer only in it is not held: format
    "bytes" would count it); the torn states are power loss's, the others both models'
    (a lost append is a power-loss state too)."""
    held = {p: d[:d.rfind(b"\n") + 1] if d is not None and is_transcript(p) else d
            for p, d in files.items()}
    models = ("power",) if name.startswith("power loss") else ("process", "power")
    return Found(CrashState.of("process", name, held), models, name, files)


def resume(run: AgentRun, scenario: Scenario, golden: Golden, killed: World, root: Path,
            kp: KillPoint, name: str, files: dict[str, bytes | None],
            timeout: float = 60.0, order: int = 0, memo: Shared | None = None) -> Verdict:
    """Resume the agent once from `files`, with a copy of the world as the kill left it,
    and judge the run (the loop's `judge_state`); with `memo`
    (`faultsim.pipeline.sweep.Shared`, keyed by `memo.py`), a state equal to one resumed
    before takes that run's resume guards' verdict instead, its own state judged all the
    same."""
    state = found(name, files)
    kill = Kill(None, killed, reached=True, landed=True)
    return Verdict.of(judge_state(Backend(run, scenario, root, golden, timeout=timeout),
                                memo or Shared(golden, share=False), kp, kill, state,
                                {m: order for m in state.models}))


def _resumed(run: AgentRun, scenario: Scenario, golden: Golden, killed: World, root: Path,
             kp: KillPoint, files: dict[str, bytes | None], state: CrashState,
             timeout: float) -> ResumeResult:
    """One resumed run from `files` (the sandbox as the kill left it, torn line and all),
    judged by the resume guards: what equal states share."""
    world = copy.deepcopy(killed)
    restore(root, files)
    inc = incarnation(run, scenario, world, root, timeout=timeout)
    asked = [q.position for q in world.model.requests
             if q.incarnation == world.incarnation and q.ok]
    crash_run = CrashRun(kill_points=[engine_point(kp)], state=state,
                         world=world, outcome=inc.outcome, error=inc.error,
                         timed_out=inc.timed_out, final=work_files(snapshot(root)),
                         resume_positions=asked[:1])
    return ResumeResult.of_run(golden, crash_run, asked[0] if asked else None, inc.seconds)
