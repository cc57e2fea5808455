"""What a test sees of faultsim: `faultsim.parametrize`, the `faultsim` marker and fixture.

    import faultsim
    from my_agent import make_agent

    @faultsim.parametrize(make_agent, "scenarios/my_task.toml")
    def test_survives_every_crash(faultsim):
        faultsim.check()

Settings come from the command line (`--faultsim-*`, when given), else from the marker,
else the defaults. Only pytest is imported here at load time: the engine, pyfakefs and the
SDK are imported when a faultsim test first runs.
"""
from __future__ import annotations

import dataclasses
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import pytest

from .errors import KNOWN, UsageError
from .options import MODES, ExploreOptions, OptionError, in_shard  # noqa: F401

if TYPE_CHECKING:
    from .killpoints import KillPoint
    from .pointwise import PointwiseExplorer
    from .report import Report
    from .session import Session

MARKER = "faultsim"
_MARKER_KEYS = ("scenario", "agent", "crash_model", "crashes", "seed", "timeout",
                "categories", "kill_points", "mode")
DEFAULTS = {"crash_model": "process", "crashes": 2, "seed": "0", "timeout": "auto"}


def parametrize(agent: Callable | str, scenario: str | Path, *, crash_model: str | None = None,
                crashes: int | None = None, seed: str | int | None = None,
                timeout: float | None = None, categories: tuple[str, ...] | None = None):
    """One test item per kill point of `scenario` (ids such as `k23-after-effect-email.send#2`):
    each judges every crash state there and every schedule of two crashes that starts there.
    `agent` is the factory (or "module:attr"); the test takes the `faultsim` fixture and
    calls `faultsim.check()`. The same as `@pytest.mark.faultsim(..., kill_points=True)`."""
    given = {"crash_model": crash_model, "crashes": crashes, "seed": seed, "timeout": timeout,
             "categories": tuple(categories) if categories is not None else None}
    return getattr(pytest.mark, MARKER)(scenario, agent=agent, kill_points=True,
                                        **{k: v for k, v in given.items() if v is not None})


class FaultsimUsageError(UsageError):
    """A faultsim marker or option that cannot work; the message names what is wrong."""


@dataclass(frozen=True)
class Options:
    """The `--faultsim-*` command-line options (None: not given)."""

    seed: str | None = None
    crash_model: str | None = None
    crashes: int | None = None
    budget: float | None = None
    shard: tuple[int, int] | None = None
    record: bool = False
    html: str | None = None  # --faultsim-html: the session's one HTML page


def parse_shard(text: str) -> tuple[int, int]:
    i, sep, n = text.partition("/")
    try:
        shard = (int(i), int(n))
    except ValueError:
        shard = None
    if not sep or shard is None or not 1 <= shard[0] <= shard[1]:
        raise FaultsimUsageError(f"--faultsim-shard={text}: expected I/N with 1 <= I <= N, "
                                 "for example 2/4")
    return shard


@dataclass(frozen=True)
class Settings:
    """One test's faultsim settings, resolved."""

    scenario: str | None
    agent: Any  # a factory, "module[:attr]", or None (given to check() instead)
    crash_model: str
    crashes: int
    seed: str
    timeout: float | None
    categories: tuple[str, ...] | None
    kill_points: bool  # one test item per kill point
    mode: str = "auto"  # auto | in-process | subprocess (auto: subprocess for a database store)

    def options(self, **more: Any) -> ExploreOptions:
        """These settings (already validated) as the options of one exploration."""
        return ExploreOptions(crash_model=self.crash_model, crashes=self.crashes,
                              seed=self.seed, timeout=self.timeout, mode=self.mode, **more)

    def resolve_agent(self, agent: Any = None) -> tuple[Callable, str]:
        agent = agent if agent is not None else self.agent
        if agent is None:
            raise FaultsimUsageError("no agent: name it in the marker "
                                     "(@pytest.mark.faultsim(scenario, agent=make_agent)) or "
                                     "pass it: faultsim.check(make_agent)")
        return factory_and_name(agent, self.scenario)


def factory_and_name(agent: Any, scenario: str | None = None) -> tuple[Callable, str]:
    """The factory and the name replays use to import it again ("module", "module:attr",
    or "langgraph:MODE" for the graph a scenario's [langgraph] table names)."""
    import types

    from .loading import AgentLoadError, factory_for

    if isinstance(agent, str):
        try:
            return factory_for(agent, scenario), agent
        except AgentLoadError as exc:
            raise FaultsimUsageError(str(exc)) from None
    if isinstance(agent, types.ModuleType):
        agent = getattr(agent, "make_agent", None) or agent
    if not callable(agent):
        raise FaultsimUsageError(f"agent {agent!r} is not callable: give the factory "
                                 "(env -> agent with .run()) or 'module:attr'")
    module = getattr(agent, "__module__", None) or "agent"
    qualname = getattr(agent, "__qualname__", None) or getattr(agent, "__name__", "")
    if qualname == "make_agent" or not qualname or "<" in qualname:
        return agent, module
    return agent, f"{module}:{qualname}"


def settings_for(node: Any, options: Options) -> Settings | None:
    """The marker's settings, overridden by the command line; None without a marker."""
    marker = node.get_closest_marker(MARKER)
    if marker is None:
        return None
    where = f"{node.nodeid}: @pytest.mark.{MARKER}"
    args, kwargs = list(marker.args), dict(marker.kwargs)
    unknown = sorted(set(kwargs) - set(_MARKER_KEYS))
    if unknown:
        raise FaultsimUsageError(f"{where}: unknown setting(s) {', '.join(unknown)}; "
                                 f"expected {', '.join(_MARKER_KEYS)}")
    for name in ("scenario", "agent"):
        if args:
            if name in kwargs:
                raise FaultsimUsageError(f"{where}: {name} given twice")
            kwargs[name] = args.pop(0)
    if args:
        raise FaultsimUsageError(f"{where}: expected (scenario, agent=..., ...), got "
                                 f"{len(marker.args)} positional arguments")
    scenario = kwargs.get("scenario")
    if scenario is not None:
        scenario = str(resolve_scenario(scenario, node))
    profile = _profile_of(scenario)
    crash_model = options.crash_model or kwargs.get("crash_model", profile["crash_model"])
    crashes = options.crashes if options.crashes is not None else \
        kwargs.get("crashes", profile["crashes"])
    timeout = kwargs.get("timeout", DEFAULTS["timeout"])
    seed = options.seed if options.seed is not None else str(kwargs.get("seed",
                                                                        DEFAULTS["seed"]))
    mode = kwargs.get("mode", "auto")
    try:  # the one validation of every exploration setting
        ExploreOptions(crash_model=crash_model, crashes=crashes, timeout=timeout, seed=seed,
                       mode=mode)
    except OptionError as exc:
        raise FaultsimUsageError(f"{where}: {exc}") from None
    categories = kwargs.get("categories")
    if categories is not None:
        from .killpoints import CATEGORIES

        categories = (categories,) if isinstance(categories, str) else tuple(categories)
        bad = [c for c in categories if c not in CATEGORIES]
        if bad:
            raise FaultsimUsageError(f"{where}: unknown kill-point categor"
                                     f"{'y' if len(bad) == 1 else 'ies'} {', '.join(bad)}; "
                                     f"expected some of {', '.join(CATEGORIES)}")
    if mode == "subprocess" and kwargs.get("kill_points"):
        raise FaultsimUsageError(f"{where}: kill_points=True items run in-process; explore "
                                 "in subprocess mode with one test (faultsim.check())")
    return Settings(scenario, kwargs.get("agent"), crash_model, crashes, seed, timeout,
                    categories, bool(kwargs.get("kill_points", False)), mode)


def _golden_key(scenario: Any, name: str, settings: Settings) -> str:
    """One run's clean runs, shared by its xdist workers: the same scenario text, agent and
    settings give the same clean run (the flake guard proved it deterministic)."""
    import hashlib

    from ._version import __version__

    text = Path(scenario.path).read_bytes()
    parts = [__version__, name, settings.seed, str(settings.timeout)]
    return hashlib.blake2b(text + "\0".join(parts).encode(),
                           digest_size=16).hexdigest() + ".golden"


def told(exc: BaseException) -> str:
    """A known error as a failed test shows it: the one line, then the agent's own
    traceback and output when it raised."""
    details = getattr(exc, "details", "")
    return f"faultsim: {exc}" + (f"\n\n{details}" if details else "")


def resolve_scenario(scenario: str | Path, node: Any) -> Path:
    """A relative path is looked up next to the test file, then under the rootdir, then in
    the current directory; the result is relative to the current directory when it can be
    (replay commands are run from there)."""
    path = Path(scenario)
    tried = [path] if path.is_absolute() else [
        Path(node.path).parent / path, Path(node.config.rootpath) / path, Path.cwd() / path]
    for candidate in tried:
        if candidate.is_file():
            candidate = candidate.resolve()
            try:
                return candidate.relative_to(Path.cwd())
            except ValueError:
                return candidate
    raise FaultsimUsageError(f"{node.nodeid}: scenario {str(scenario)!r} not found (looked "
                             f"in {', '.join(str(t.parent) for t in tried)})")


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
        from .pointwise import PointwiseExplorer
        from .scenario import load_scenario

        factory, name = settings.resolve_agent()
        key = (id(factory), name, settings.scenario, settings.crash_model, settings.crashes,
               settings.seed, settings.timeout)
        explorer = self.explorers.get(key)
        if explorer is None:
            scenario = load_scenario(settings.scenario)
            explorer = PointwiseExplorer(factory, scenario,
                                         agent_name=name, crash_model=settings.crash_model,
                                         crashes=settings.crashes, seed=settings.seed,
                                         timeout=settings.timeout)
            shared = self.shared_dir()
            if shared is not None:
                explorer.golden_cache = shared / _golden_key(scenario, name, settings)
            self.explorers[key] = explorer
        return explorer

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


def known_errors() -> tuple[type[BaseException], ...]:
    """What a wrong agent or scenario raises: told as one line, not a traceback."""
    return KNOWN


class FaultsimFixture:
    """The explorer bound to the running test: its scenario, agent and settings, and, in a
    kill-point item, its kill point.

    - `check(make_agent=None, scenario=None)`: explore, then fail the test with the
      readable counterexample if any crash state violates the protocol;
    - `explore(...)`: the same, returning the `Report` without judging it;
    - `session(...)`: a `faultsim.Session` for hypothesis tests of crash schedules;
    - `kill_point`, `settings`, `record` (`--faultsim-record`).
    """

    def __init__(self, request: Any, state: PluginState, param: Any) -> None:
        self._request, self._state, self._param = request, state, param
        self._error: FaultsimUsageError | None = None
        try:
            self.settings = settings_for(request.node, state.options)
        except FaultsimUsageError as exc:  # told when the test explores, as its failure
            self.settings, self._error = None, exc
        self.record = state.options.record
        self.explored = 0  # kill points explored by this test
        self.reports: list[Report] = []

    def __repr__(self) -> str:
        s = self.settings
        if s is None:
            return "<faultsim fixture: no marker>"
        where = f"kill point {self._param.id}" if isinstance(self._param, PointParam) \
            else "whole scenario"
        return (f"<faultsim fixture: {s.scenario}, {where}, crash model {s.crash_model}, "
                f"crashes {s.crashes}, seed {s.seed}>")

    @property
    def kill_point(self) -> "KillPoint | None":
        """This item's kill point (None in a test that explores the whole scenario)."""
        if not isinstance(self._param, PointParam):
            return None
        return self._explorer().point(self._param.id)

    def _explorer(self) -> "PointwiseExplorer":
        return self._state.explorer_for(self.settings)

    def _settings_for(self, scenario: Any) -> Settings:
        settings = self.settings
        if scenario is not None:
            path = str(resolve_scenario(scenario, self._request.node))
            if settings is None:
                settings = settings_for_options(path, self._state.options)
            else:
                settings = dataclasses.replace(settings, scenario=path)
        if settings is None or settings.scenario is None:
            raise FaultsimUsageError(
                f"{self._request.node.nodeid}: no scenario: mark the test "
                "(@pytest.mark.faultsim('my_scenario.toml', agent=make_agent)) or pass it: "
                "faultsim.check(make_agent, 'my_scenario.toml')")
        return settings

    def explore(self, make_agent: Any = None, scenario: Any = None) -> "Report":
        """Explore this item's kill point, or (outside kill-point items) every kill point of
        the scenario in this shard, and return the report."""
        __tracebackhide__ = True
        try:
            return self._explore(make_agent, scenario)
        except known_errors() as exc:
            pytest.fail(told(exc), pytrace=False)

    def _explore(self, make_agent: Any, scenario: Any) -> "Report":
        state = self._state
        if self._error is not None:
            raise self._error
        if isinstance(self._param, BrokenParam):
            raise FaultsimUsageError(self._param.message)
        if isinstance(self._param, PointParam):
            if make_agent is not None or scenario is not None:
                raise FaultsimUsageError("a kill-point item explores the agent and scenario "
                                         "of its marker; call faultsim.check() without them")
            report = self._explorer().check(self._param.id)
            self._note(report, "kill point")
            return report
        from .engine import run
        from .scenario import load_scenario

        settings = self._settings_for(scenario)
        factory, name = settings.resolve_agent(make_agent)
        left = state.budget_left()
        if left is not None and left <= 0:
            self._skip_for_budget()
        categories = settings.categories
        scenario_ = load_scenario(settings.scenario)
        options = settings.options(
            shard=state.options.shard, search_seconds=left,
            only=(lambda p: p.category in categories) if categories else None)
        # subprocess mode imports the agent by name; a factory without one cannot go there
        report = run(scenario_, options, make_agent=factory, agent_name=name,
                     spec=None if name == "agent" else name)
        self._note(report, "scenario")
        return report

    def check(self, make_agent: Any = None, scenario: Any = None) -> "Report":
        """Explore, and fail the test (a plain AssertionError carrying the counterexample)
        if any crash state violates the protocol."""
        __tracebackhide__ = True
        report = self.explore(make_agent, scenario)
        if not report.ok:
            raise AssertionError(self._failure_text(report))
        return report

    def corpus(self, path: str | Path, make_agent: Any = None, scenario: Any = None) -> list:
        """Check the checkpoint corpus at `path` (relative to the test file): every recorded
        state resumes under the agent's current code and passes the oracle. With
        `--faultsim-record`, record it anew from the scenario first (like a snapshot tool's
        update flag); a missing corpus fails and says so."""
        __tracebackhide__ = True
        from .formats import Corpus, check_corpus, record_corpus
        from .scenario import load_scenario

        folder = Path(path)
        if not folder.is_absolute():
            folder = Path(self._request.node.path).parent / folder
        try:
            if self.record:
                settings = self._settings_for(scenario)
                factory, name = settings.resolve_agent(make_agent)
                record_corpus(factory, load_scenario(settings.scenario), folder, agent=name,
                              seed=settings.seed, timeout=settings.timeout)
            if not (folder / "manifest.json").exists():
                pytest.fail(f"faultsim: no corpus at {folder}: record it once with "
                            f"pytest --faultsim-record '{rerun_id(self._request.node)}'",
                            pytrace=False)
            corpus = Corpus.open(folder)
            if callable(make_agent):
                factory = make_agent
            elif make_agent is None and self.settings is not None and self.settings.agent:
                factory, _ = self.settings.resolve_agent(None)
            else:
                from .loading import load_factory

                factory = load_factory(make_agent or corpus.agent)
            verdicts = check_corpus(factory, corpus)
        except known_errors() as exc:
            pytest.fail(told(exc), pytrace=False)
        bad = [v for v in verdicts if not v.ok]
        if bad:
            raise AssertionError(
                f"faultsim: {len(bad)} of {len(verdicts)} recorded states in {folder} do not "
                "resume under the current code; the first:\n\n"
                + "\n\n".join(v.describe() for v in bad[:3]))
        return verdicts

    def session(self, make_agent: Any = None, scenario: Any = None,
                crash_model: str | None = None) -> "Session":
        """A `faultsim.Session` with this test's agent, scenario, seed and timeout (use it
        in `with`)."""
        from .session import Session

        settings = self._settings_for(scenario)
        factory, name = settings.resolve_agent(make_agent)
        model = crash_model or settings.crash_model
        if model == "all":
            model = "process"
        return Session(factory, settings.scenario, crash_model=model, seed=settings.seed,
                       timeout=settings.timeout, agent_name=name)

    # -- what the summary and the failure say ---------------------------------------------
    def _failure_text(self, report: "Report") -> str:
        states = sum(len(r.failures) for r in report.runs)
        where = (f"kill point {self._param.id}" if isinstance(self._param, PointParam)
                 else f"{len(report.runs[0].explored)} kill points" if report.runs else "")
        return (f"faultsim: {states} crash state(s) violate the protocol at {where}; the "
                "first of each kind:\n\n" + "\n\n".join(report.counterexamples())
                + f"\n\nrerun this test alone: pytest '{rerun_id(self._request.node)}'")

    def _note(self, report: "Report", mode: str) -> None:
        from .killpoints import categories

        self.reports.append(report)
        self.explored += max((len(r.explored) for r in report.runs), default=0)
        first = report.runs[0] if report.runs else None
        entry = {
            "mode": mode, "nodeid": self._request.node.nodeid,
            "rerun": rerun_id(self._request.node),
            "group": _group_of(self._request.node),
            "scenario": first.scenario.id if first else None,
            "agent": first.agent if first else None,
            "kill_points_total": len(first.kill_points) if first else 0,
            "models": {r.crash_model: {
                "kill_points": len(r.explored),
                "categories": {k: n for k, n in categories(r.explored).items() if n},
                "crash_states": len(r.verdicts), "violating": sum(not v.ok for v in r.verdicts),
                "resumed": r.judged,
                "pairs": {"total": r.depth(2).total, "explored": r.depth(2).explored,
                          "resumed": r.depth(2).resumed,
                          "violating": sum(len(v.earlier) == 1 for v in r.deep_failures)}
                if r.crashes >= 2 else None,
                "probes": [p.ok for p in r.probes],
                "seconds": round(r.seconds, 3)} for r in report.runs},
            "failures": [{"crash_model": r.crash_model,
                          "schedule": [p.id for p in v.schedule],
                          "invariants": [x.invariant for x in v.violations],
                          "replay": r.replay_command(v)}
                         for r in report.runs for v in r.failures],
        }
        if mode == "kill point" and self.settings.crashes > 2:
            entry["note"] = (f"{_group_of(self._request.node)}: kill-point items explore "
                             "schedules of at most 2 crashes; longer ones are searched in "
                             "whole-scenario tests")
        self._request.node.user_properties.append(("faultsim", json.dumps(entry)))
        if self._state.options.html:  # the runs travel to the session's page (xdist too)
            test = entry["group"] if mode == "kill point" else entry["nodeid"]
            for r in report.runs:
                # a kill-point item sends its one kill point's verdict; the clean run's
                # parts of the map once per group and worker (not once per kill point)
                key = (test, r.crash_model)
                sparse = mode == "kill point" and key in self._state.mapped
                self._state.mapped.add(key)
                self._request.node.user_properties.append(
                    ("faultsim_run", json.dumps([test, mode, r.to_json(sparse_map=sparse)])))

    def _skip_for_budget(self) -> None:
        __tracebackhide__ = True
        node = self._request.node
        node.user_properties.append(("faultsim", json.dumps(
            {"mode": "skipped", "nodeid": node.nodeid, "group": _group_of(node)})))
        pytest.skip(f"faultsim: the budget of {self._state.options.budget:g} s is spent")


def _profile_of(scenario: str | None) -> dict:
    """The crash model and crash count a scenario's fault profile asks for (the defaults
    when there is no scenario yet, or it does not load: its error is reported where the
    scenario is loaded for the run)."""
    if scenario is None:
        return DEFAULTS
    from .scenario import ScenarioError, load_scenario

    try:
        profile = load_scenario(scenario).profile
    except ScenarioError:
        return DEFAULTS
    return {"crash_model": profile.crash_model, "crashes": profile.crashes}


def settings_for_options(scenario: str, options: Options) -> Settings:
    profile = _profile_of(scenario)
    return Settings(scenario, None, options.crash_model or profile["crash_model"],
                    options.crashes if options.crashes is not None else profile["crashes"],
                    options.seed if options.seed is not None else DEFAULTS["seed"],
                    DEFAULTS["timeout"], None, False)


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


def _group_of(node: Any) -> str:
    """The test's id without its parameters: one line of the summary."""
    return rerun_id(node).split("[", 1)[0]
