"""The forecast of a sweep's cost, from the clean run alone (before any crash run): what the
plan line and `faultsim list` say, and what `--budget` weighs.

A single-crash sweep costs, in CPU, about

    kill points x PER_POINT  +  resumed runs x one resumed run's cost

- PER_POINT: faultsim's own work at a kill point (a crash state made and keyed, a fork
  where a state is new, a verdict recorded), measured flat in the task's length.
- resumed runs: the counting pass (inprocess/counting.py) keys each point's crash states
  as the sweep's memo does with the file being written masked, the class a resumed run is
  shared over once the agent proves blind to that file; a sweep resumes about
  RESUMED_SHARE of those classes (the rest are sensitive pairs settled by an equal
  state, or cut by leads).
- one resumed run: restored from its crash state, it runs until convergence cuts it (at
  its first model request where it meets the clean run's state) or to the end; measured,
  a share of the clean incarnation that falls slowly with the task's length
  (RESUME_SHARE x events^RESUME_EXPONENT). The clean incarnation is weighed by its CPU
  (Explorer.clean_cpu_seconds), not its wall time, which a busy machine stretches.

The constants were fitted on a 2-core machine over the reference agent's scenarios
(tests/data/tiny.toml, scenarios/*.toml, the N-step lookups of bench/scaling.py, N = 10 to
100); `python bench/forecast.py` prints the forecast beside the measured CPU for each, with
its error. It is an estimate, said as one ("about"), never a bound: an agent whose resumed
runs rarely converge costs more than it says; the pair stage (--crashes 2) and subprocess
mode are not forecast (the plan line says so). Standard library only.

With `--horizon H` a resumed run is cut at about its (H+1)-th model request after recovery
(faultsim.inprocess.convergence, "The horizon"), so it costs its restore and recovery plus
H+1 of the clean run's requests: H + HORIZON_FIXED requests at the clean run's mean CPU
per request, HORIZON_FIXED standing for the restore, the recovery and the request it is cut
at (fitted as the constants above are: `python bench/forecast.py --horizon 1`). A run that
would have met the clean run sooner costs what it did. The mean, not the CPU per request
where the run was killed: weighed by position (a checkpoint that grows makes late requests
dearer), the forecast was further off (-16 % to -40 % from 25 to 200 steps, against +2 %
to -17 %), each request's own CPU being noisy and a representative choice crashing every
kill point of the last step.
"""
from __future__ import annotations

from dataclasses import dataclass

PER_POINT = 0.0027  # CPU seconds per kill point
RESUMED_SHARE = 0.62  # resumed runs per class of crash states (masked)
RESUME_SHARE = 0.665  # one resumed run, in clean incarnations, times events^EXPONENT
RESUME_EXPONENT = -0.2
# A clean run without convergence's fingerprints (`faultsim list` skips them: inprocess.explore.survey)
# is this many times faster than one with them, which the constants above were fitted on
# (measured 1.6x to 3.2x: tiny, refunds, research_50_steps); the list's forecast is rougher
FINGERPRINT_FACTOR = 2.4
# A sweep that crashes a share s of the kill points (representative coverage, --kill-point)
# pays 1 + SPARSE x (1 - s) times as much per resumed run: crashed points far apart leave
# resumed runs that rarely meet an earlier one's state (faultsim.inprocess.leads) or the
# clean run's, so fewer are cut short (fitted on the representative sweeps of
# bench/forecast.py: research_50_steps and lookups of 25 to 100 steps)
SPARSE = 1.6
# With a horizon, one resumed run costs about (H + HORIZON_FIXED) of the clean run's model
# requests (the docstring says why)
HORIZON_FIXED = 4.0


@dataclass(frozen=True)
class Forecast:
    """One coverage's forecast: what it crashes at and about how long it takes."""

    coverage: str  # "exhaustive" | "representative"
    kill_points: int  # crashed at
    classes: int  # classes of crash states they leave (the resumed runs' measure)
    cpu_seconds: float

    def wall_seconds(self, workers: int, cpus: int) -> float:
        """Wall time with `workers` crash runs at once on `cpus` processors."""
        return self.cpu_seconds / max(1, min(workers, cpus))

    def to_json(self) -> dict:
        return {"coverage": self.coverage, "kill_points": self.kill_points,
                "classes_of_states": self.classes,
                "cpu_seconds": round(self.cpu_seconds, 1)}


def estimate(coverage: str, kill_points: int, classes: int, clean_seconds: float,
             events: int, fingerprinted: bool = True, share: float = 1.0,
             horizon: int | None = None, requests: int = 0) -> Forecast:
    """The forecast of a single-crash sweep of `kill_points` leaving `classes` classes of
    crash states, for an agent whose clean incarnation took `clean_seconds` over `events`
    events (`fingerprinted`: with convergence's fingerprints, as a run's clean run;
    `share`: the kill points crashed, of all the clean run has; `horizon`: --horizon, with
    `requests` the clean run's model requests)."""
    if not fingerprinted:
        clean_seconds *= FINGERPRINT_FACTOR
    each = clean_seconds * RESUME_SHARE * max(1, events) ** RESUME_EXPONENT
    each *= 1 + SPARSE * (1 - min(1.0, max(0.0, share)))
    if horizon is not None and requests > 0:
        each = min(each, clean_seconds / requests * (horizon + HORIZON_FIXED))
    cpu = kill_points * PER_POINT + RESUMED_SHARE * classes * each
    return Forecast(coverage, kill_points, classes, cpu)


def duration(seconds: float) -> str:
    """`seconds` as a person reads a forecast: 40 s, 3.5 min, 2.1 h."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def words(forecasts: "tuple[Forecast, ...] | list[Forecast]") -> str:
    """The forecasts in words ("" without any), the run's own coverage first: "single-crash
    forecast: about 35 s of CPU (representative: about 12 s, 965 kill points)"."""
    if not forecasts:
        return ""
    own, *others = forecasts
    line = f"single-crash forecast: about {duration(own.cpu_seconds)} of CPU"
    if others:
        line += " (" + "; ".join(f"{f.coverage}: about {duration(f.cpu_seconds)}, "
                                 f"{f.kill_points} kill points" for f in others) + ")"
    return line
