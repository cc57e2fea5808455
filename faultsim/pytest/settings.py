"""A faultsim test's settings: the `faultsim` marker and `faultsim.parametrize`, the
`--faultsim-*` options as the plugin read them (`Options`), and one test's settings resolved
from both (`Settings`: the command line wins over the marker, the marker over the scenario's
fault profile, that over the defaults). Only pytest is imported at load time."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import pytest

from ..errors import UsageError
from ..settings.options import ExploreOptions, OptionError
from ..settings.table import BY_NAME, SETTINGS, SHARD_EXPECTED
from ..settings.table import parse_shard as _parse_shard


MARKER = "faultsim"
# the marker's keys and their defaults (where the scenario's fault profile decides nothing),
# the settings table's (faultsim.settings.table)
_MARKER_KEYS = tuple(s.marker for s in SETTINGS if s.marker)
DEFAULTS = {s.marker: s.default for s in SETTINGS if s.marker and s.default is not None}


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
    """The session's `--faultsim-*` settings (`read_options`: the command line, ini keys or
    the project's; None: not given)."""

    seed: str | None = None
    crash_model: str | None = None
    crashes: int | None = None
    budget: float | None = None
    shard: tuple[int, int] | None = None
    record: bool = False
    html: str | None = None  # --faultsim-html: the session's one HTML page
    baseline: str | None = None  # --faultsim-baseline: a JSON report the run is judged against
    # whole-scenario tests: every kill point, or a representative choice (faultsim.core.classes)
    coverage: str | None = None
    per_class: int | None = None
    # --faultsim-ray: whole-scenario sweeps as Ray tasks ("": a local cluster; None: no Ray)
    ray: str | None = None
    ray_shards: int | None = None


def parse_shard(text: str, where: str | None = None) -> tuple[int, int]:
    try:
        return _parse_shard(text)
    except ValueError:
        raise FaultsimUsageError(f"{where or f'--faultsim-shard={text}'}: expected "
                                 f"{SHARD_EXPECTED}") from None


# the session settings that are ini keys too, and what each holds (pytest --help says)
INI_KEYS = {s.ini: s.ini_help for s in SETTINGS if s.ini}
# those a project sets for `faultsim run` too: FAULTSIM_* and [tool.faultsim] (faultsim.settings.config)
PROJECT_KEYS = {s.ini: s.toml for s in SETTINGS if s.ini and s.toml}


def read_options(config: Any) -> Options:
    """The session's `--faultsim-*` settings. Each is the command line's, else its ini key's,
    else the project's (FAULTSIM_* over [tool.faultsim] in the nearest pyproject.toml at or
    above the rootdir: faultsim.settings.config, as `faultsim run` reads them). An error names the
    setting where it was given; ExploreOptions checks what it holds, once."""
    from ..settings.config import load

    project = load(Path(config.rootpath))

    def setting(key: str) -> tuple[Any, str]:
        value = config.getoption(key)
        if value is not None:
            return value, f"--{key.replace('_', '-')}={value}"
        value = config.getini(key) or None
        if value is not None:
            return value, f"{key} = {value}"
        name = PROJECT_KEYS.get(key)
        if name in project.values:
            return project.values[name], f"{project.origin[name]} = {project.values[name]!r}"
        return None, ""

    def number(key: str, kind: type) -> tuple[Any, str]:
        value, where = setting(key)
        if value is None or isinstance(value, kind):
            return value, where
        try:
            return kind(value), where
        except ValueError:
            raise FaultsimUsageError(f"{where}: expected a number") from None

    seed, _ = setting("faultsim_seed")
    crash_model, crash_model_at = setting("faultsim_crash_model")
    crashes, crashes_at = number("faultsim_crashes", int)
    coverage, coverage_at = setting("faultsim_coverage")
    per_class, per_class_at = number("faultsim_per_class", int)
    try:
        ExploreOptions(crash_model=crash_model, crashes=crashes, coverage=coverage,
                       per_class=per_class)
    except OptionError as exc:
        where = {"crash_model": crash_model_at, "crashes": crashes_at,
                 "coverage": coverage_at, "per_class": per_class_at}[exc.field]
        raise FaultsimUsageError(f"{where}: expected {exc.expected}") from None
    budget, _ = number("faultsim_budget", float)
    _check("session_budget", budget, lambda: f"--faultsim-budget={budget:g}")
    shard, shard_at = setting("faultsim_shard")
    ray, ray_shards = config.getoption("faultsim_ray"), config.getoption("faultsim_ray_shards")
    if ray is not None:
        from ..pipeline.ray_shards import check_address

        try:
            check_address(ray, "--faultsim-ray")
        except UsageError as exc:
            raise FaultsimUsageError(str(exc)) from None
        if shard is not None:
            raise FaultsimUsageError(f"{shard_at} with --faultsim-ray: Ray runs every shard "
                                     "itself (their number: --faultsim-ray-shards N)")
    _check("ray_shards", ray_shards, lambda: f"--faultsim-ray-shards={ray_shards}")
    html = config.getoption("faultsim_html")
    if html:  # before any test: a typo must not cost the session's sweeps
        from ..reports.outfile import check_writable

        check_writable(html, "--faultsim-html")
    return Options(seed=None if seed is None else str(seed), crash_model=crash_model,
                   crashes=crashes, budget=budget,
                   shard=parse_shard(shard, shard_at) if shard is not None else None,
                   record=config.getoption("faultsim_record"),
                   html=html,
                   baseline=config.getoption("faultsim_baseline"),
                   coverage=coverage, per_class=per_class, ray=ray, ray_shards=ray_shards)


def _check(name: str, value: Any, where: Callable[[], str]) -> None:
    """The table's check of a setting no exploration holds (ExploreOptions checks the
    others), named as the plugin takes it."""
    s = BY_NAME[name]
    try:
        s.check(value)
    except ValueError:
        raise FaultsimUsageError(f"{where()}: expected {s.expected}") from None


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

    from ..settings.loading import AgentLoadError, bound_name, factory_for, langgraph_spec, names_graph

    if isinstance(agent, str):
        try:
            if names_graph(agent) and scenario is not None:
                from ..scenario import load_scenario

                agent = langgraph_spec(agent, load_scenario(scenario))  # `langgraph:`: its mode
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
    if "<" in qualname:  # an adapter's factory: named by the attribute it is kept in
        bound = bound_name(agent)
        if bound is None:  # no name imports it: reports show its own, nothing imports it
            return agent, f"{module}:{qualname}"
        return agent, module if bound == "make_agent" else f"{module}:{bound}"
    if qualname == "make_agent" or not qualname:
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
    mode = kwargs.get("mode", DEFAULTS["mode"])
    try:  # the one validation of every exploration setting
        ExploreOptions(crash_model=crash_model, crashes=crashes, timeout=timeout, seed=seed,
                       mode=mode)
    except OptionError as exc:
        raise FaultsimUsageError(f"{where}: {exc}") from None
    categories = kwargs.get("categories")
    if categories is not None:
        from ..killpoints import CATEGORIES

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
                    categories, bool(kwargs.get("kill_points", DEFAULTS["kill_points"])), mode)


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


def _profile_of(scenario: str | None) -> dict:
    """The crash model and crash count a scenario's fault profile asks for (the defaults
    when there is no scenario yet, or it does not load: its error is reported where the
    scenario is loaded for the run)."""
    if scenario is None:
        return DEFAULTS
    from ..scenario import ScenarioError, load_scenario

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
