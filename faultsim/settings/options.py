"""The settings of one exploration, validated once: `ExploreOptions`.

Every front end (the CLI, the pytest fixture, `explore()` and `explore_subprocess()` called
from Python) builds one; building it is the validation, so no front end and no backend
checks a setting again. `resolve(scenario)` then fills in what the scenario decides (its
fault profile's crash models and crashes, the mode its store needs, one worker per core):
the one mode dispatch (`backends.choose`) reads a resolved object only.

Also here, what every front end shares about settings: the choices (crash models, modes),
the fixed timeout, how a shard `I/N` is written; and the rules the options hold: which
crash models a request names, the shard formula and the kill points a run keeps.
Standard library, errors, crashmodel and classes only: the plugin imports this at load
time."""
from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Sequence, TypeVar

from ..core.classes import COVERAGES, PER_CLASS, cover  # noqa: F401 (the front ends' choices)
from ..core.crashmodel import CRASH_MODELS, MODEL_NAMES, PAUSE
from ..errors import StoreNeedsSubprocess, SubprocessModeError, UsageError

P = TypeVar("P")

MODES = ("auto", "in-process", "subprocess")
# what --crash-model, --faultsim-crash-model and the marker take: a model, or both
CRASH_MODEL_CHOICES = (*CRASH_MODELS, PAUSE, "all")
CRASH_MODEL_EXPECTED = "process, power, pause or all"
SHARD_EXPECTED = "I/N with 1 <= I <= N, for example 2/4"
# the coverage settings, for every front end (the CLI, [tool.faultsim], the scenario's
# [fault_profile], the pytest option and ini key): the choices are faultsim.core.classes'
COVERAGE_EXPECTED = " or ".join(COVERAGES)
PER_CLASS_EXPECTED = "an integer >= 0"
# seconds an incarnation may run where no limit is derived from clean runs: a survey's clean
# run (`faultsim list`), recording and checking checkpoint corpora
FIXED_TIMEOUT = 30.0


class OptionError(UsageError, ValueError):
    """A setting out of range. The message names the setting as `explore()` takes it
    (`crashes=0: expected an integer >= 1`); a front end that names it otherwise (the
    CLI's `--crashes`) rewords it from `field`, `value` and `expected`."""

    def __init__(self, field: str, value: Any, expected: str) -> None:
        super().__init__(f"{field}={value!r}: expected {expected}")
        self.field, self.value, self.expected = field, value, expected


@dataclass(frozen=True)
class ExploreOptions:
    """Every setting that decides what an exploration does (see `faultsim.explore` for each).

    `crash_model` and `crashes` left at None take the scenario's fault profile, `mode`
    "auto" the mode its store needs, `workers` None one per core; `resolve()` fills them.
    """

    crash_model: str | tuple[str, ...] | None = None  # stored as a tuple of names
    crashes: int | None = None
    seed: str = "0"
    # seconds, None (no limit), or "auto": derived from the clean runs
    # (pipeline.incarnation.resumed_limit: 10x the slower clean incarnation, at least 3 s)
    timeout: float | str | None = "auto"
    workers: int | None = None  # 0: one after another in this process (replaying)
    shard: tuple[int, int] | None = None
    only: Callable[[Any], bool] | None = None  # narrows the first crash's kill points
    search: int | None = None  # hypothesis examples per crash model
    search_seconds: float | None = None
    database: Any = None  # hypothesis example database for the search
    equivalences: bool = True
    # cut a resumed run where it reaches the clean run's state (faultsim.inprocess.convergence)
    convergence: bool = True
    mode: str = "auto"
    # every kill point ("exhaustive") or each class's first, last and `per_class` seeded
    # others ("representative", faultsim.core.classes); None: the scenario's fault profile
    coverage: str | None = None
    per_class: int | None = None
    # cut each resumed run past its `horizon`-th model request after recovery, at its first
    # request equal to one the clean run made, and take the rest from the clean run's
    # course (faultsim.inprocess.convergence, "The horizon"); None: every run to its end
    horizon: int | None = None
    # wall seconds the single-crash sweep may be forecast to take (pipeline/forecast.py):
    # over it, the run stops before any crash run and says which coverage fits; None: any
    budget: float | None = None

    def __post_init__(self) -> None:
        set_ = lambda name, value: object.__setattr__(self, name, value)  # noqa: E731
        if self.crash_model is not None:
            try:
                set_("crash_model", tuple(crash_models(self.crash_model)))
            except ValueError:
                raise OptionError("crash_model", self.crash_model,
                                  CRASH_MODEL_EXPECTED) from None
        if self.crashes is not None and (isinstance(self.crashes, bool)
                                         or not isinstance(self.crashes, int)
                                         or self.crashes < 1):
            raise OptionError("crashes", self.crashes, "an integer >= 1")
        set_("seed", str(self.seed))
        if self.timeout is not None and self.timeout != "auto" and (
                not isinstance(self.timeout, (int, float)) or self.timeout <= 0):
            raise OptionError("timeout", self.timeout, "seconds > 0, None or \"auto\"")
        if self.workers is not None and (not isinstance(self.workers, int)
                                         or self.workers < 0):
            raise OptionError("workers", self.workers, "an integer >= 0")
        if self.shard is not None:
            try:
                set_("shard", check_shard(tuple(self.shard)))
            except (TypeError, ValueError):
                raise OptionError("shard", self.shard, "(i, n) with 1 <= i <= n") from None
        if self.search is not None and (not isinstance(self.search, int) or self.search < 1
                                        or (self.crashes is not None and self.crashes < 2)):
            raise OptionError("search", self.search, "a positive number of examples, with "
                              "crashes >= 2 (single crashes are always explored "
                              "exhaustively)")
        if self.search_seconds is not None and self.search_seconds < 0:
            raise OptionError("search_seconds", self.search_seconds, "seconds >= 0")
        if self.mode not in MODES:
            raise OptionError("mode", self.mode, ", ".join(MODES))
        if self.budget is not None and not self.budget > 0:
            raise OptionError("budget", self.budget, "seconds > 0")
        if self.coverage is not None and self.coverage not in COVERAGES:
            raise OptionError("coverage", self.coverage, COVERAGE_EXPECTED)
        if self.per_class is not None and (isinstance(self.per_class, bool)
                                           or not isinstance(self.per_class, int)
                                           or self.per_class < 0):
            raise OptionError("per_class", self.per_class, PER_CLASS_EXPECTED)
        if self.horizon is not None and (isinstance(self.horizon, bool)
                                         or not isinstance(self.horizon, int)
                                         or self.horizon < 0):
            raise OptionError("horizon", self.horizon, "an integer >= 0 (model requests)")

    @property
    def models(self) -> list[str]:
        """The crash models (after `resolve`)."""
        return list(self.crash_model or ())

    def resolve(self, scenario: Any) -> "ExploreOptions":
        """These options with what `scenario` decides filled in: crash models and crashes
        from its fault profile, the mode (`mode_for`), the number of workers. A request
        the mode cannot honour fails here, naming the scenario file."""
        mode = mode_for(scenario, self.mode)
        models = self.crash_model
        if models is None:
            models = tuple(scenario.profile.crash_models)
            if mode == "subprocess" and "process" in models:
                models = ("process",)  # the profile's power model stays in-process
        if mode == "subprocess" and PAUSE in models:
            raise SubprocessModeError(pause_subprocess_refusal(scenario.path))
        if mode == "subprocess" and tuple(models) != ("process",):
            raise SubprocessModeError(
                f"{scenario.path}: subprocess mode crashes processes (SIGKILL) only, not "
                f"{', '.join(models)}: a power loss cannot be staged on a real file system; "
                "use the in-process mode")
        crashes = self.crashes if self.crashes is not None else scenario.profile.crashes
        workers = self.workers if self.workers is not None else (os.cpu_count() or 1)
        profile = scenario.profile
        coverage = self.coverage or profile.coverage
        per_class = self.per_class if self.per_class is not None else \
            profile.per_class
        return dataclasses.replace(self, crash_model=tuple(models), crashes=crashes,
                                   mode=mode, workers=workers, coverage=coverage,
                                   per_class=per_class)

    @property
    def representative(self) -> bool:
        """Whether this run crashes a representative choice of its kill points (after
        `resolve`); a replay (`only`) crashes exactly the points it names instead."""
        return self.coverage == "representative" and self.only is None

    def cover(self, points: Sequence[Any], trace: Sequence[Any]) -> Any:
        """The `classes.Coverage` of the clean run's `points` under these (resolved)
        options: the kill points the run crashes at before `only` and the shard, which
        then narrow or split those (`select`). A replay covers what it names, so under
        `only` the coverage is exhaustive: `--kill-point` reaches any point."""
        return cover(points, trace, "representative" if self.representative
                     else "exhaustive", self.per_class if self.per_class is not None
                     else PER_CLASS, self.seed)

    def pairs_shard_refusal(self, path: str) -> str | None:
        """Why these (resolved) options cannot run, in one line, or None: a shard of a
        representative run with a pair stage. The pair stage's second crashes are chosen
        over the classes of every first crash's resumed course (classes.cover_courses); a
        shard resumes only its own first crashes, so it cannot make the whole run's choice."""
        if self.shard is None or not self.representative or self.crashes < 2 or (
                self.search and self.crashes == 2):
            return None
        return (f"{path}: --shard with --coverage representative and --crashes 2: the pair "
                "stage chooses over every shard's first crashes (drop --shard, or give "
                "--coverage exhaustive)")

    @property
    def first_shard(self) -> bool:
        """Whether this run does the once-per-scenario work (the version probe, the search):
        not a replay of chosen kill points, and the first shard if sharded."""
        return self.only is None and (self.shard is None or self.shard[0] == 1)


def mode_for(scenario: Any, asked: str) -> str:
    """The one place that decides in-process or subprocess: "auto" follows the store (SQLite
    and Redis checkpoints are written below Python's file layer, where only real processes
    on a real directory show them)."""
    needs = scenario.store.needs_subprocess
    if getattr(scenario, "langgraph", None) is not None and asked == "subprocess" \
            and not needs:
        raise SubprocessModeError(f"{scenario.path}: this LangGraph scenario's checkpointer is "
                                  "LangGraph's in-memory one, kept in faultsim's world: it "
                                  "runs in-process (a [store] kind = \"sqlite\" runs "
                                  "SqliteSaver on a real file, in subprocess mode)")
    if asked == "auto":
        return "subprocess" if needs else "in-process"
    if asked == "in-process" and needs:
        raise StoreNeedsSubprocess(
            f"{scenario.path}: store.kind = {scenario.store.kind!r} writes below Python's "
            "file layer, where the in-process mode cannot see or kill it: run it in "
            "subprocess mode (--mode subprocess or auto; from Python, "
            "faultsim.real.explore_subprocess)")
    return asked


# why subprocess mode does not pause (`pause_subprocess_refusal`, `faultsim list`)
PAUSE_WHY = ("each incarnation's world (fake model, services, ledger) lives in that "
             "incarnation's own process, so two live incarnations cannot share one")


def pause_subprocess_refusal(path: str) -> str:
    """Why subprocess mode does not run the pause model, in one line: its fork servers'
    children each hold the world (the fake model, the services, the ledger) in their own
    memory, so a paused incarnation and the new one could not share one; the in-process
    mode and an agent run as a command (its world served on loopback) can."""
    return (f"{path}: --crash-model pause: subprocess mode keeps each incarnation's world "
            "(fake model, services, ledger) in that incarnation's own process, so two live "
            "incarnations cannot share one; use --mode in-process, or run the agent as a "
            "command (--agent 'cmd:...')")


def crash_models(crash_model: str | Iterable[str]) -> list[str]:
    """The crash models "process", "power", "pause", "all" (process and power) or a list
    of them name."""
    if isinstance(crash_model, str):
        names = list(CRASH_MODELS) if crash_model == "all" else [crash_model]
    else:
        names = list(crash_model)
    for name in names:
        if name not in MODEL_NAMES:
            raise ValueError(f"unknown crash model {name!r}; expected {CRASH_MODEL_EXPECTED}")
    return names


def parse_shard(text: str) -> tuple[int, int]:
    """`"2/4"` -> (2, 4), as every front end takes a shard; a ValueError otherwise (the
    front end names its own flag, expecting SHARD_EXPECTED)."""
    i, sep, n = text.partition("/")
    i, n = i.strip(), n.strip()
    if sep and all(part.isascii() and part.isdigit() for part in (i, n)) \
            and 1 <= int(i) <= int(n):
        return int(i), int(n)
    raise ValueError(f"{text!r}: expected {SHARD_EXPECTED}")


def check_shard(shard: tuple[int, int] | None) -> tuple[int, int] | None:
    if shard is not None and not 1 <= shard[0] <= shard[1]:
        raise ValueError(f"shard {shard[0]}/{shard[1]}: expected 1 <= i <= n")
    return shard


def in_shard(position: int, shard: tuple[int, int] | None) -> bool:
    """Shard i of n keeps the kill points whose position is i - 1 modulo n: the n shards
    partition the kill points, deterministically (a CI matrix). An agent run as a command
    and the pytest plugin's kill-point items shard this way; the in-process and subprocess
    sweeps split crash states instead (faultsim.inprocess.sharding, faultsim.real.judging)."""
    return shard is None or position % shard[1] == shard[0] - 1


def select(points: Sequence[P], only: Callable[[P], bool] | None,
           shard: tuple[int, int] | None, coverage: Any = None) -> list[P]:
    """The kill points a run explores: those its `coverage` (a `classes.Coverage`; None:
    every one) crashes at, then those `only` keeps (a replay), in its shard (counted over
    the covered points, so the shards partition them)."""
    if coverage is not None and len(coverage.chosen) != len(points):
        points = [points[n] for n in coverage.chosen]
    return [p for n, p in enumerate(points) if (only is None or only(p)) and in_shard(n, shard)]
