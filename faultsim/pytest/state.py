"""What the plugin keeps for a session (`PluginState`: the explorers of kill-point items,
the budget's clock, the clean runs xdist workers share), the parameters of kill-point items,
and a test's id as the summary and rerun commands print it."""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from ..settings.options import in_shard
from .settings import Options, Settings

if TYPE_CHECKING:
    from ..inprocess.pointwise import PointwiseExplorer


def _golden_key(scenario: Any, name: str, settings: Settings) -> str:
    """One run's clean runs, shared by its xdist workers: the same scenario text, agent and
    settings give the same clean run (the flake guard proved it deterministic)."""
    import hashlib

    from .._version import __version__

    text = Path(scenario.path).read_bytes()
    parts = [__version__, name, settings.seed, str(settings.timeout)]
    return hashlib.blake2b(text + "\0".join(parts).encode(),
                           digest_size=16).hexdigest() + ".golden"


@dataclass(frozen=True)
class PointParam:
    """The parameter of one kill-point item: its position among the scenario's kill points
    (what shards split on) and its id."""

    position: int
    id: str


@dataclass(frozen=True)
class BrokenParam:
    """The one parameter of a test whose kill points could not be found (the clean run
    failed, or the settings are wrong): the item fails with this message."""

    message: str


@dataclass
class PluginState:
    """What the plugin keeps for a session (per xdist worker)."""

    options: Options
    explorers: dict = field(default_factory=dict)  # group key -> PointwiseExplorer
    started: float | None = None  # when the first faultsim test began (the budget's clock)
    # where the xdist workers of one run share their clean runs (None: not under xdist);
    # found on first use
    shared_dir: Callable[[], Path | None] = lambda: None
    mapped: set = field(default_factory=set)  # (test, crash model): full map sent (html)

    def explorer_for(self, settings: Settings) -> "PointwiseExplorer":
        from ..backends import Agent, check_job, items
        from ..scenario import load_scenario

        spec = settings.agent if isinstance(settings.agent, str) else None
        if spec is not None:  # refused before the spec is resolved (a cmd: agent)
            check_job(spec, settings.scenario, "items")
        factory, name = settings.resolve_agent()
        key = (id(factory), name, settings.scenario, settings.crash_model, settings.crashes,
               settings.seed, settings.timeout)
        explorer = self.explorers.get(key)
        if explorer is None:
            scenario = load_scenario(settings.scenario)
            explorer = items(Agent(spec, factory, name), scenario,
                             crash_model=settings.crash_model, crashes=settings.crashes,
                             seed=settings.seed, timeout=settings.timeout)
            shared = self.shared_dir()
            if shared is not None:
                explorer.golden_cache = shared / _golden_key(scenario, name, settings)
            self.explorers[key] = explorer
        return explorer

    _baseline: Any = None  # the --faultsim-baseline report, read on first use

    def baseline(self) -> dict | None:
        """The --faultsim-baseline report (faultsim.reports.merge.read), or None."""
        if self.options.baseline is None:
            return None
        if self._baseline is None:
            from ..reports.merge import read

            self._baseline = read(self.options.baseline)
        return self._baseline

    def start_clock(self) -> None:
        if self.started is None:
            self.started = time.monotonic()

    def budget_left(self) -> float | None:
        if self.options.budget is None:
            return None
        self.start_clock()
        return self.options.budget - (time.monotonic() - self.started)

    def in_shard(self, position: int) -> bool:
        return in_shard(position, self.options.shard)


def rerun_id(node: Any) -> str:
    """The test's id as typed from the current directory (pytest's node ids are relative
    to the rootdir)."""
    import os

    _, sep, rest = node.nodeid.partition("::")
    try:
        path = os.path.relpath(node.path, Path.cwd())
    except ValueError:
        path = str(node.path)
    return f"{path}{sep}{rest}"


def rerun_command(node: Any, options: Options) -> str:
    """The command that runs the test alone with the session's faultsim settings that
    decide its verdict (seed, crash model, crashes, coverage, shard, baseline), however
    they were given: the command line, an ini key, or the project's FAULTSIM_* or
    [tool.faultsim], which a shell elsewhere may lack. The budget, the HTML page and
    --faultsim-record decide no verdict and are left out."""
    import shlex

    given = (("seed", options.seed), ("crash-model", options.crash_model),
             ("crashes", options.crashes),
             ("coverage", options.coverage), ("per-class", options.per_class),
             ("shard", options.shard and "%d/%d" % options.shard),
             ("baseline", options.baseline))
    return " ".join(["pytest", *(f"--faultsim-{name}={shlex.quote(str(value))}"
                                 for name, value in given if value is not None),
                     shlex.quote(rerun_id(node))])


def group_of(node: Any) -> str:
    """The test's id without its parameters: one line of the summary."""
    return rerun_id(node).split("[", 1)[0]
