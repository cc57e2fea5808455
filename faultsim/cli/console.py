"""What `faultsim run` and `faultsim list` show while they work: the plan before a sweep and
the forecast of its largest costs, progress on stderr (a bar on a terminal; elsewhere, as in
a CI log, a plain line every few seconds, so no minute passes silent), and each run's
figures when it ends."""
from __future__ import annotations

import os
import posix  # the real pid: pyfakefs patches `os` while the in-process mode runs
import re
import sys
import threading
from typing import Callable, TextIO

from ..pipeline.forecast import words

# Seconds between progress lines when stderr is not a terminal (a CI log, a pipe). CI
# services end a job after some minutes without output (10 on several), and a person
# watching a log wants to see it move: a line every 10 s says so in every stretch of a long
# run, while a run shorter than that prints none. FAULTSIM_PROGRESS_SECONDS, or
# `progress_seconds =` under [tool.faultsim], sets it (0: no progress lines).
EVERY = 10.0
_LOOK = 1.0  # how often the timer thread looks (a terminal's bar moves at this pace)

# Every write of a Progress holds this lock, and so does every fork of this process
# (os.register_at_fork): the in-process mode forks its crash runs from the main thread while
# the timer thread may be writing, and a child must not inherit a lock (ours, or the
# stream's) held by a thread it does not have. A child gets a lock of its own and never
# writes (a Progress checks its pid). Reentrant: a signal handler of the main thread that
# reports progress while it writes must not wait on itself.
_WRITING = threading.RLock()


def _after_fork_in_child() -> None:
    global _WRITING
    _WRITING = threading.RLock()


os.register_at_fork(before=lambda: _WRITING.acquire(),
                    after_in_parent=lambda: _WRITING.release(),
                    after_in_child=_after_fork_in_child)


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def _unit(stage: str) -> str:
    return "kill points" if stage == "kill points" else f"first crash states, {stage}"


class Progress:
    """Told by the engine as it goes (`progress(done, total, stage=...)`, `plan(Plan)`).

    Before each sweep it says on stderr what it will explore and its largest costs. Started
    (`start()`), a timer thread keeps it talking while the engine does not call (the clean
    runs, one long crash run, a pair stage's set-up): on a terminal, runs longer than a
    second get a one-line bar (done/total, rate and ETA) or their stage and time; elsewhere
    a plain line every `every` seconds, with the same figures, or "still working" and where
    the run is when nothing moved. The first stage, before any plan, is the clean runs."""

    def __init__(self, label: str, stream: TextIO | None = None, every: float | None = None,
                 clock: Callable[[], float] | None = None) -> None:
        import freezegun.api as real  # the engine freezes time.monotonic; this is not

        self.label, self.clock = label, clock or real.real_monotonic
        self.stream = stream or sys.stderr
        self.enabled = self.stream.isatty()  # a bar, redrawn in place
        self.every = EVERY if every is None else every  # plain lines (0: none)
        self.stage, self.done, self.total = "clean runs", 0, 0
        self.started = self.said = self.clock()  # the stage's start; the last line's time
        self.said_at: tuple | None = None  # (stage, done) the last plain line told
        self.shown = False
        self.pid = posix.getpid()
        self._stop = threading.Event()
        self._timer: threading.Thread | None = None

    def start(self) -> "Progress":
        """Start the timer thread (a daemon: it never holds the process up)."""
        if self._timer is None and (self.enabled or self.every > 0):
            self._timer = threading.Thread(target=self._tick_until_closed, daemon=True,
                                           name=f"faultsim progress {self.label}")
            self._timer.start()
        return self

    def _tick_until_closed(self) -> None:
        while not self._stop.wait(min(_LOOK, self.every) if self.every > 0 else _LOOK):
            self.tick()

    def tick(self) -> None:
        """What the timer does: a line (or the bar) if one is due."""
        if posix.getpid() != self.pid:
            return  # a forked child: its parent speaks
        with _WRITING:
            if not self._stop.is_set():
                self._show(self.clock(), timer=True)

    def plan(self, plan) -> None:
        states = ", ".join(f"{n} {model}" for model, n in plan.crash_states.items())
        scope = (f"{plan.explored} of {plan.kill_points}" if plan.explored != plan.kill_points
                 else str(plan.kill_points))
        then = {1: "", 2: "; then every second crash in each resumed run"}.get(
            plan.crashes, f"; then every second crash in each resumed run, and longer "
                          f"schedules up to {plan.crashes} crashes searched")
        with _WRITING:
            # pipeline/forecast.py: from the clean run, before any crash run
            sweep = words(plan.forecasts)
            self._say(f"{self.label}: {scope} kill points, "
                      f"{_plural(sum(plan.crash_states.values()), 'crash state')} to judge "
                      f"({states}){then}" + (f"; {sweep}" if sweep else ""))
            costs = forecast(plan)
            if costs:
                self._say(f"{self.label}: largest costs: {costs}")
            self.stage, self.done, self.total = "kill points", 0, plan.explored
            self.started = self.clock()

    def __call__(self, done: int, total: int, stage: str = "kill points") -> None:
        if posix.getpid() != self.pid:
            return
        with _WRITING:
            now = self.clock()
            if stage != self.stage:
                self._end_bar()
                self.stage, self.started = stage, now  # a new stage: a new rate
                if stage.startswith("pairs") and done == 0:
                    model = stage[stage.find("(") + 1:-1]
                    self._say(f"{self.label}: {_plural(total, 'distinct first crash state')} "
                              f"({model}) to crash again, each at every kill point of the run "
                              "resumed from it")
            self.done, self.total = done, total
            self._show(now, timer=False)

    def _show(self, now: float, timer: bool) -> None:
        elapsed = now - self.started
        if not self.enabled:
            if self.every > 0 and now - self.said >= self.every:
                self._line(now, elapsed)
            return
        done, total = self.done, self.total
        if done and total:
            if elapsed < 1.0 and done < total:
                return  # runs shorter than a second get no bar
            rate = done / elapsed if elapsed else 0.0
            eta = (total - done) / rate if rate else 0.0
            width = 30
            filled = int(width * done / max(1, total))
            self.stream.write(f"\r{self.label} [{'#' * filled}{'.' * (width - filled)}] "
                              f"{done}/{total} {_unit(self.stage)}  {rate:5.1f}/s  "
                              f"ETA {_clock(eta)} ")
        elif timer and elapsed >= 1.0:  # nothing done yet in this stage: its time
            self.stream.write(f"\r{self.label}: {self.stage}, {_clock(elapsed)} ")
        else:
            return
        self.stream.flush()
        self.shown = True

    def _line(self, now: float, elapsed: float) -> None:
        """A plain progress line: the figures, or "still working" when none moved."""
        done, total, stage = self.done, self.total, self.stage
        if done and total and (stage, done) != self.said_at:
            rate = done / elapsed if elapsed else 0.0
            eta = (total - done) / rate if rate else 0.0
            line = (f"{self.label}: {done}/{total} {_unit(stage)}, {rate:.1f}/s, "
                    f"ETA {_clock(eta)}")
        elif total and done >= total:  # the stage's last step: what follows it runs
            line = (f"{self.label}: still working after {stage} ({done}/{total} done), "
                    f"{_clock(elapsed)} in")
        else:
            line = f"{self.label}: still working: {stage}" + (
                f", {done}/{total} done" if total else "") + f", {_clock(elapsed)} in"
            where = _running_here()
            if where:
                line += f"; this process's run: {where}"
        self._say(line)
        self.said, self.said_at = now, (stage, done)

    def _say(self, line: str) -> None:  # with _WRITING held
        self._end_bar()
        print(line, file=self.stream, flush=True)
        self.said = self.clock()

    def _end_bar(self) -> None:
        if self.shown:
            self.stream.write("\n")
            self.shown = False

    def close(self) -> None:
        self._stop.set()
        if self._timer is not None and self._timer is not threading.current_thread():
            self._timer.join(timeout=2 * _LOOK)
        with _WRITING:
            self._end_bar()


def _running_here() -> str:
    """How far an incarnation running in this process is (pipeline.incarnation): read only
    if that module is loaded, for without it no incarnation runs here (and a thread must
    not import while the in-process mode has the file system patched)."""
    module = sys.modules.get("faultsim.pipeline.incarnation")
    return module.running_now() if module is not None else ""


def forecast(plan) -> str:
    """The largest costs a plan knows of, in words ("" when it knows none): what one
    incarnation takes and may take, the write with the most torn kill points (each a crash
    run of its own), and the writes whose torn cuts were bounded."""
    parts = []
    if plan.clean_seconds is not None:
        parts.append(f"a clean incarnation took {plan.clean_seconds:.1f} s")
    if plan.timeout:
        parts.append(f"a crash run counts as hung after {plan.timeout:g} s")
    if plan.largest_write is not None:
        cuts, size, where = plan.largest_write
        written = re.search(r"#(\d+) fs\.write (\S+)", where)
        what = (f"{_bytes(size)} to {written[2]} (event #{written[1]})" if written
                else f"{_bytes(size)} ({where})")
        parts.append(f"the largest write, {what}, has {_plural(cuts, 'torn kill point')}")
    if plan.torn_bounded:  # killpoints.torn_offsets: large writes cut at representatives
        kept, every = (sum(b[k] for b in plan.torn_bounded) for k in ("cuts", "of"))
        parts.append(f"{_plural(len(plan.torn_bounded), 'large write')} torn at {kept} "
                     f"representative cuts of {every} ([fault_profile] torn_cuts = \"all\" "
                     "tries every one)")
    return "; ".join(parts)


def _bytes(n: int) -> str:
    for unit, size in (("GB", 1 << 30), ("MB", 1 << 20), ("KB", 1 << 10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return _plural(n, "byte")


def _clock(seconds: float) -> str:
    seconds = int(seconds + 0.5)
    return f"{seconds // 60}:{seconds % 60:02d}" if seconds >= 60 else f"{seconds}s"


def print_run(run) -> None:
    data = run.to_json()
    cats = ", ".join(f"{c} {n}" for c, n in data["categories"].items() if n)
    counts = run.counts()  # faultsim.reports.counts: the same figures as every report's
    status = "ok" if run.ok else f"{counts.violating} VIOLATIONS ({counts.failing()})"
    print(f"{run.scenario.id} · {run.agent} · {run.crash_model}: {status}")
    judged = "" if counts.kill_points_judged == counts.kill_points_explored else \
        f"; a crash state judged here at {counts.kill_points_judged} of them"
    print(f"  kill points   {data['kill_points_explored']}/{data['kill_points_total']} "
          f"explored ({cats}){judged}")
    covered = run.coverage_line()
    if covered is not None:  # never passes for an exhaustive sweep (faultsim.core.classes)
        print(f"  coverage      {covered}")
    downtime = run.scenario.profile.downtime
    if downtime:
        from ..scenario import format_duration

        print(f"  downtime      {format_duration(downtime)} between each crash and its restart")
    deeper = sum(d.seconds for d in run.depths.values())
    print(f"  crash states  {data['crash_states']} judged, {run.judged} resumed "
          f"({run.reused} shared with an equal or equivalent state), "
          f"{max(0.0, run.seconds - deeper):.1f}s")
    from ..reports.shortcuts import line, off

    if data.get("shortcuts") is not None and off(data["shortcuts"]):
        # a shortcut that had work and never applied says why (the JSON has every count)
        print(f"  shortcuts     {line(data['shortcuts'])}")
    golden = run.verdicts[0].golden if run.verdicts else None
    if golden is not None and not golden.ledger.entries:
        # every verdict passed on effects it never had to count: say so, not just "ok"
        print("  effects       none: the clean run applied no effect, so no verdict here "
              "counts one" + ("" if run.scenario.services else
                              " (the scenario declares no [services])"))
    if run.escalated:
        print(f"  escalated     {run.escalated} crash states ended in an explicit escalation to "
              "a person (an effect that cannot be checked; a legal stop)")
    for n, depth in sorted(run.depths.items()):
        if depth.explored:
            print(f"  {n} crashes     {depth.total} schedules over {data['crash_states']} "
                  f"first crash states; {depth.explored} explored after pruning, "
                  f"{depth.resumed} resumed, {depth.seconds:.1f}s")
        if depth.searched:
            print(f"  {n} crashes     searched: {depth.searched} schedules (hypothesis, "
                  f"seed {run.seed}), {depth.after_convergence} of them composed after "
                  f"convergence, {depth.seconds:.1f}s")
    for probe in run.probes:
        print(f"  probe         {probe.kill_point.id}: {'ok' if probe.ok else 'VIOLATED'}")
