"""The settings of one exploration, validated once: `ExploreOptions`.

Every front end (the CLI, the pytest fixture, `explore()` and `explore_subprocess()` called
from Python) builds one; building it is the validation, so no front end and no backend
checks a setting again. `resolve(scenario)` then fills in what the scenario decides (its
fault profile's crash models and crashes, the mode its store needs, one worker per core):
the one mode dispatch (`backends.choose`) reads a resolved object only.

Also here, re-exported from the table (faultsim.settings.table) for the front ends: the
choices (crash models, modes), how a shard `I/N` is written, which crash models a request
names; and the fixed timeout, the shard formula and the kill points a run keeps.
Standard library, errors, crashmodel and classes only: the plugin imports this at load
time."""
from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from typing import Any, Callable, Sequence, TypeVar

from ..core.classes import COVERAGES, PER_CLASS, cover
from ..core.crashmodel import PAUSE
from ..errors import StoreNeedsSubprocess, SubprocessModeError, UsageError
# the words every front end shares, declared with the settings (faultsim.settings.table)
from .table import (COVERAGE_EXPECTED, CRASH_MODEL_CHOICES, CRASH_MODEL_EXPECTED, MODES,
                    PER_CLASS_EXPECTED, SEARCH_EXPECTED, SETTINGS, SHARD_EXPECTED,
                    check_shard, crash_models, parse_shard)

__all__ = ["COVERAGES", "PER_CLASS", "COVERAGE_EXPECTED", "CRASH_MODEL_CHOICES",
           "CRASH_MODEL_EXPECTED", "MODES", "PER_CLASS_EXPECTED", "SHARD_EXPECTED",
           "check_shard", "crash_models", "parse_shard", "FIXED_TIMEOUT", "OptionError",
           "ExploreOptions", "mode_for", "in_shard", "select"]

P = TypeVar("P")

# ExploreOptions' fields that are settings: their defaults and checks are the table's
_OPTIONS = {s.name: s for s in SETTINGS if s.option}


def _unset(name: str) -> Any:
    """A field's default: None where the scenario's fault profile decides (`resolve`)."""
    s = _OPTIONS[name]
    return None if s.profile else s.default


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

    The fields that are settings take their default and their check from the table
    (faultsim.settings.table, where each is explained); `only`, `database`, `equivalences`
    and `convergence` are Python's alone. `crash_model`, `crashes`, `coverage` and
    `per_class` left at None take the scenario's fault profile, `mode` "auto" the mode its
    store needs, `workers` None one per core; `resolve()` fills them.
    """

    crash_model: str | tuple[str, ...] | None = _unset("crash_model")  # kept as a tuple
    crashes: int | None = _unset("crashes")
    seed: str = _unset("seed")
    timeout: float | str | None = _unset("timeout")  # seconds, None (no limit) or "auto"
    workers: int | None = _unset("workers")  # 0: one after another in this process (replaying)
    shard: tuple[int, int] | None = _unset("shard")
    only: Callable[[Any], bool] | None = None  # narrows the first crash's kill points
    search: int | None = _unset("search")  # hypothesis examples per crash model
    search_seconds: float | None = _unset("search_seconds")
    database: Any = None  # hypothesis example database for the search
    equivalences: bool = True
    # cut a resumed run where it reaches the clean run's state (faultsim.inprocess.convergence)
    convergence: bool = True
    mode: str = _unset("mode")
    coverage: str | None = _unset("coverage")
    per_class: int | None = _unset("per_class")
    horizon: int | None = _unset("horizon")
    budget: float | None = _unset("budget")

    def __post_init__(self) -> None:
        # each setting by the table's check, in the order of the fields
        for f in dataclasses.fields(self):
            s = _OPTIONS.get(f.name)
            if s is None:
                continue
            value = getattr(self, f.name)
            try:
                object.__setattr__(self, f.name, s.check(value))
            except ValueError:
                raise OptionError(f.name, value, s.expected) from None
        if self.search is not None and self.crashes is not None and self.crashes < 2:
            raise OptionError("search", self.search, SEARCH_EXPECTED)

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
        if mode == "subprocess" and PAUSE in models and (self.crashes or 1) > 1:
            raise SubprocessModeError(
                f"{scenario.path}: --crashes {self.crashes}: the pause model pauses one "
                "incarnation per schedule (give --crashes 1)")
        if mode == "subprocess" and [m for m in models if m != PAUSE] not in ([], ["process"]):
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
        representative run with a pair stage in subprocess mode. In-process, every shard
        makes the whole run's choice of second crashes (classes.cover_courses over every
        first crash's course, each shard resumes them all) and judges the chosen states
        it owns (inprocess.pairs._survey); subprocess mode's pair stage has no survey
        that splits second crash states, so its shards would not add up."""
        if self.shard is None or not self.representative or self.crashes < 2 or (
                self.search and self.crashes == 2) or self.mode != "subprocess":
            return None
        return (f"{path}: --shard with --coverage representative and --crashes 2 in "
                "subprocess mode: its pair stage does not split the chosen second crashes "
                "between shards (drop --shard, give --coverage exhaustive, or run "
                "in-process)")

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
