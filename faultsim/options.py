"""The settings of one exploration, validated once: `ExploreOptions`.

Every front end (the CLI, the pytest fixture, `explore()` and `explore_subprocess()` called
from Python) builds one; building it is the validation, so no front end and no backend
checks a setting again. `resolve(scenario)` then fills in what the scenario decides (its
fault profile's crash models and crashes, the mode its store needs, one worker per core):
the one mode dispatch (`engine.run`) reads a resolved object only.

Also here, what every front end shares about settings: the choices (crash models, modes),
the fixed timeout, how a shard `I/N` is written; and the rules the options hold: which
crash models a request names, the shard formula and the kill points a run keeps.
Standard library, errors and crashmodel only: the plugin imports this at load time."""
from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Sequence, TypeVar

from .crashmodel import CRASH_MODELS
from .errors import StoreNeedsSubprocess, SubprocessModeError, UsageError

P = TypeVar("P")

MODES = ("auto", "in-process", "subprocess")
# what --crash-model, --faultsim-crash-model and the marker take: a model, or both
CRASH_MODEL_CHOICES = (*CRASH_MODELS, "all")
CRASH_MODEL_EXPECTED = "process, power or all"
SHARD_EXPECTED = "I/N with 1 <= I <= N, for example 2/4"
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
    """Every setting that decides what an exploration does (see `engine.explore` for each).

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
        if mode == "subprocess" and tuple(models) != ("process",):
            raise SubprocessModeError(
                f"{scenario.path}: subprocess mode crashes processes (SIGKILL) only, not "
                f"{', '.join(models)}: a power loss cannot be staged on a real file system; "
                "use the in-process mode")
        crashes = self.crashes if self.crashes is not None else scenario.profile.crashes
        workers = self.workers if self.workers is not None else (os.cpu_count() or 1)
        return dataclasses.replace(self, crash_model=tuple(models), crashes=crashes,
                                   mode=mode, workers=workers)

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


def crash_models(crash_model: str | Iterable[str]) -> list[str]:
    """The crash models "process", "power", "all" or a list of them name."""
    if isinstance(crash_model, str):
        names = list(CRASH_MODELS) if crash_model == "all" else [crash_model]
    else:
        names = list(crash_model)
    for name in names:
        if name not in CRASH_MODELS:
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
    partition the kill points, deterministically (a CI matrix). Subprocess mode and the
    pytest plugin's kill-point items shard this way; the in-process sweep splits crash
    states instead (faultsim.inprocess.sharding)."""
    return shard is None or position % shard[1] == shard[0] - 1


def select(points: Sequence[P], only: Callable[[P], bool] | None,
           shard: tuple[int, int] | None) -> list[P]:
    """The kill points a run explores: those `only` keeps (a replay), in its shard."""
    return [p for n, p in enumerate(points) if (only is None or only(p)) and in_shard(n, shard)]
