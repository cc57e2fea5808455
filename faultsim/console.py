"""What `faultsim run` shows while it works: the plan before a sweep, a progress bar on a
terminal, and each run's figures when it ends."""
from __future__ import annotations

import sys
from typing import TextIO


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


class Progress:
    """Told by the engine as it goes (`progress(done, total, stage=...)`, `plan(Plan)`).

    Before each sweep it says on stderr what it will explore; on a terminal, runs longer
    than a second also get a one-line bar: done/total, rate and ETA."""

    def __init__(self, label: str, stream: TextIO | None = None) -> None:
        import freezegun.api as real  # the engine freezes time.perf_counter; this is not

        self.label, self.clock = label, real.real_perf_counter
        self.stream = stream or sys.stderr
        self.enabled = self.stream.isatty()
        self.stage, self.started, self.shown = "kill points", self.clock(), False

    def plan(self, plan) -> None:
        states = ", ".join(f"{n} {model}" for model, n in plan.crash_states.items())
        scope = (f"{plan.explored} of {plan.kill_points}" if plan.explored != plan.kill_points
                 else str(plan.kill_points))
        then = {1: "", 2: "; then every second crash in each resumed run"}.get(
            plan.crashes, f"; then every second crash in each resumed run, and longer "
                          f"schedules up to {plan.crashes} crashes searched")
        self._say(f"{self.label}: {scope} kill points, "
                  f"{_plural(sum(plan.crash_states.values()), 'crash state')} to judge "
                  f"({states}){then}")
        self.started = self.clock()

    def __call__(self, done: int, total: int, stage: str = "kill points") -> None:
        if stage != self.stage:
            self._end_bar()
            self.stage, self.started = stage, self.clock()  # a new stage: a new rate
            if stage.startswith("pairs") and done == 0:
                model = stage[stage.find("(") + 1:-1]
                self._say(f"{self.label}: {_plural(total, 'distinct first crash state')} "
                          f"({model}) to crash again, each at every kill point of the run "
                          "resumed from it")
        if not self.enabled:
            return
        elapsed = self.clock() - self.started
        if done == 0 or (elapsed < 1.0 and done < total):
            return  # runs shorter than a second get no bar
        rate = done / elapsed if elapsed else 0.0
        eta = (total - done) / rate if rate else 0.0
        width = 30
        filled = int(width * done / max(1, total))
        unit = "kill points" if self.stage == "kill points" else \
            f"first crash states, {self.stage}"
        self.stream.write(f"\r{self.label} [{'#' * filled}{'.' * (width - filled)}] "
                          f"{done}/{total} {unit}  {rate:5.1f}/s  ETA {_clock(eta)} ")
        self.stream.flush()
        self.shown = True

    def _say(self, line: str) -> None:
        self._end_bar()
        print(line, file=self.stream, flush=True)

    def _end_bar(self) -> None:
        if self.shown:
            self.stream.write("\n")
            self.shown = False

    def close(self) -> None:
        self._end_bar()


def _clock(seconds: float) -> str:
    seconds = int(seconds + 0.5)
    return f"{seconds // 60}:{seconds % 60:02d}" if seconds >= 60 else f"{seconds}s"


def print_run(run) -> None:
    data = run.to_json()
    cats = ", ".join(f"{c} {n}" for c, n in data["categories"].items() if n)
    status = "ok" if run.ok else f"{len(run.failures)} VIOLATIONS"
    print(f"{run.scenario.id} · {run.agent} · {run.crash_model}: {status}")
    print(f"  kill points   {data['kill_points_explored']}/{data['kill_points_total']} "
          f"explored ({cats})")
    downtime = run.scenario.profile.downtime
    if downtime:
        from .scenario import format_duration

        print(f"  downtime      {format_duration(downtime)} between each crash and its restart")
    deeper = sum(d.seconds for d in run.depths.values())
    print(f"  crash states  {data['crash_states']} judged, {run.judged} resumed "
          f"({run.reused} shared with an equal or equivalent state), "
          f"{max(0.0, run.seconds - deeper):.1f}s")
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
