"""The pytest plugin (entry point `pytest11: faultsim`): options, marker, fixture, kill-point
items, shards and the terminal summary. Loaded in every pytest session of an environment
that has faultsim installed, so it imports nothing heavy until a faultsim test runs.

`import pytest` here is pytest itself (imports are absolute): this package is
`faultsim.pytest`, never a top-level `pytest`."""
from __future__ import annotations

import os
from typing import Any

import pytest

from ..errors import UsageError
from ..settings.options import COVERAGES, CRASH_MODEL_CHOICES, PER_CLASS
from .fixture import FaultsimFixture, known_errors, told as _told
from .settings import INI_KEYS, MARKER, FaultsimUsageError, Options, read_options, settings_for
from .state import BrokenParam, PluginState, PointParam
from .summary import SETUP_PROPERTY, Summary, session_folder

_STATE = pytest.StashKey[PluginState]()
_FIXTURE = pytest.StashKey[FaultsimFixture]()
_HEADER = pytest.StashKey[Options]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("faultsim", "faultsim: crash-safety tests for agents")
    group.addoption("--faultsim-seed", metavar="SEED", default=None,
                    help="seed of the agent's uuid/random/temp names and of the search "
                         "(default: the marker's, else 0); the same seed, the same verdicts")
    group.addoption("--faultsim-crash-model", metavar="MODEL", default=None,
                    choices=CRASH_MODEL_CHOICES,
                    help="process (a SIGKILL: what was written survives), power (unsynced "
                         "writes may be lost) or all (default: the marker's, else process)")
    group.addoption("--faultsim-crashes", metavar="N", type=int, default=None,
                    help="crashes per schedule: 1, 2 (every pair, the default) or more "
                         "(longer schedules searched with hypothesis, in whole-scenario tests)")
    group.addoption("--faultsim-coverage", metavar="COVERAGE", default=None,
                    choices=COVERAGES,
                    help="whole-scenario tests: exhaustive (every kill point) or "
                         "representative (each kill-point class at its first, last and "
                         "--faultsim-per-class seeded occurrences, every kill point of the "
                         "first and last step; the rest not crashed, and said) (default: "
                         "the scenario's fault profile, else exhaustive)")
    group.addoption("--faultsim-per-class", metavar="K", type=int, default=None,
                    help="representative coverage: seeded kill points judged per class "
                         f"beside its first and last (default: the scenario's, else "
                         f"{PER_CLASS})")
    group.addoption("--faultsim-budget", metavar="SECONDS", type=float, default=None,
                    help="seconds this session (each xdist worker) may spend exploring: "
                         "kill-point items past it are skipped and counted in the summary")
    group.addoption("--faultsim-shard", metavar="I/N", default=None,
                    help="run shard I of N, for CI matrices: kill-point items split by "
                         "position, whole-scenario tests by crash state (as faultsim run "
                         "--shard); the N shards partition them")
    group.addoption("--faultsim-ray", metavar="ADDRESS", nargs="?", const="", default=None,
                    help="whole-scenario tests: run the sweep's shards as Ray tasks and merge "
                         "their reports (as faultsim run --ray); ADDRESS (HOST:PORT, "
                         "ray://HOST:PORT or auto) names a running cluster, none starts a "
                         "local one per test; the agent must be importable by name "
                         "(pip install 'faultsim[ray]')")
    group.addoption("--faultsim-ray-shards", metavar="N", type=int, default=None,
                    help="with --faultsim-ray: the number of shards (default: the "
                         "cluster's CPUs)")
    group.addoption("--faultsim-html", metavar="FILE", default=None,
                    help="write one HTML report for the session: every faultsim test's "
                         "crash map and counterexamples (as faultsim run --html)")
    group.addoption("--faultsim-baseline", metavar="REPORT", default=None,
                    help="a JSON report of an earlier run (faultsim run --json, e.g. the main "
                         "branch's): a faultsim test then fails only for crash states this "
                         "run adds failing, and names them (as faultsim run --baseline)")
    group.addoption("--faultsim-record", action="store_true", default=False,
                    help="re-record checkpoint-format corpora instead of checking them "
                         "(like a snapshot tool's update flag)")
    # the same settings as ini keys ([tool.pytest.ini_options] faultsim_budget = 600, ...):
    # a project's defaults; the command line wins (faultsim.pytest.settings.read_options)
    for key, what in INI_KEYS.items():
        parser.addini(key, f"default for --{key.replace('_', '-')}: {what}", default=None)


def _shared_dir(config: pytest.Config) -> Any:
    """Under the run's base temporary directory, which xdist workers share as the parent of
    their own (and pytest removes with old runs): no stray files."""
    shared = session_folder(config, controller=False)
    if shared is None:
        return None
    try:
        (shared / "faultsim-golden").mkdir(exist_ok=True)
    except OSError:
        return None
    return shared / "faultsim-golden"


def pytest_report_header(config: pytest.Config) -> list[str] | None:
    """One line: faultsim's version and the settings this session runs with."""
    options = config.stash.get(_HEADER, None)
    if options is None:
        return None
    from .._version import __version__

    given = [f"{k}={v}" for k, v in (("seed", options.seed),
                                      ("crash-model", options.crash_model),
                                      ("crashes", options.crashes),
                                      ("coverage", options.coverage),
                                      ("per-class", options.per_class),
                                      ("budget", options.budget),
                                      ("shard", options.shard and "%d/%d" % options.shard),
                                      ("ray", options.ray if options.ray is None
                                       else options.ray or "local"))
             if v is not None]
    return [f"faultsim {__version__}" + (": " + ", ".join(given) if given else "")]


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", f"{MARKER}(scenario, agent=None, crash_model='process', crashes=2, "
        "seed='0', timeout='auto', categories=None, kill_points=False, mode='auto'): a faultsim "
        "test of agent on scenario; kill_points=True (or faultsim.parametrize) makes one test "
        "item per kill point; mode='subprocess' runs real processes killed by SIGKILL (auto: "
        "for scenarios whose [store] is sqlite or redis)")
    try:
        options = read_options(config)
    except UsageError as exc:  # FaultsimUsageError, or config.ConfigError: [tool.faultsim]
        raise pytest.UsageError(str(exc)) from None
    state = PluginState(options)
    if hasattr(config, "workerinput"):  # an xdist worker: share clean runs with the others
        state.shared_dir = lambda: _shared_dir(config)
        # and never outlive the controller: a controller killed outright (SIGKILL, or a
        # SIGTERM before any faultsim test started) would leave it running its sweep to the
        # end. SIGTERM unwinds a sweep (Summary.pytest_runtestloop); Linux only.
        import signal

        from ..host.lifetime import die_with_parent

        die_with_parent(signal.SIGTERM)
    config.stash[_STATE] = state
    config.stash[_HEADER] = options
    config.pluginmanager.register(Summary(state, not hasattr(config, "workerinput")),
                                  "faultsim-summary")


# -- kill points as test items ---------------------------------------------------------------
def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    marker = metafunc.definition.get_closest_marker(MARKER)
    if marker is None or not marker.kwargs.get("kill_points"):
        return
    name = metafunc.definition.name
    if not {"crash_safety", "faultsim"} & set(metafunc.fixturenames):
        pytest.fail(f"{metafunc.definition.nodeid}: faultsim.parametrize needs the test to "
                    f"take the crash_safety fixture: def {name}(crash_safety): "
                    "crash_safety.check()", pytrace=False)
    state = metafunc.config.stash[_STATE]
    try:
        settings = settings_for(metafunc.definition, state.options)
        if settings.scenario is None:
            raise FaultsimUsageError("faultsim.parametrize needs a scenario")
        explorer = state.explorer_for(settings)
        points = explorer.record_golden()
    except known_errors() as exc:
        # one item that fails with the reason, rather than a collection error
        metafunc.parametrize("faultsim_kill_point",
                             [pytest.param(BrokenParam(_told(exc)[len("faultsim: "):]),
                                           id="clean-run")],
                             indirect=True)
        return
    params = [pytest.param(PointParam(n, p.id), id=p.id) for n, p in enumerate(points)
              if settings.categories is None or p.category in settings.categories]
    metafunc.parametrize("faultsim_kill_point", params, indirect=True)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """--faultsim-shard: keep this shard's kill-point items (whole-scenario tests split
    their kill points the same way when they run)."""
    state = config.stash[_STATE]
    if state.options.shard is None:
        return
    keep, drop = [], []
    for item in items:
        callspec = getattr(item, "callspec", None)
        param = callspec.params.get("faultsim_kill_point") if callspec else None
        if isinstance(param, PointParam) and not state.in_shard(param.position):
            drop.append(item)
        else:
            keep.append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


@pytest.fixture
def faultsim_kill_point(request: pytest.FixtureRequest) -> Any:
    """The kill point of a kill-point item (internal: use `faultsim.kill_point`)."""
    return getattr(request, "param", None)


@pytest.fixture
def crash_safety(request: pytest.FixtureRequest, faultsim_kill_point: Any) -> FaultsimFixture:
    """The faultsim explorer bound to this test: `crash_safety.check()` explores its kill
    point (in a kill-point item) or its scenario, and fails with the counterexample. (Named
    so that it does not shadow the `faultsim` module inside the test.)"""
    return _bind(request, faultsim_kill_point)


@pytest.fixture
def faultsim(request: pytest.FixtureRequest, faultsim_kill_point: Any) -> FaultsimFixture:
    """The old name of `crash_safety`, kept for a release: it shadows `import faultsim`
    inside the test that takes it."""
    import warnings

    warnings.warn(FaultsimDeprecationWarning(
        f"{request.node.nodeid}: the `faultsim` fixture is now `crash_safety` (the old name "
        "shadows the faultsim module inside the test); it goes in the next release"))
    return _bind(request, faultsim_kill_point)


class FaultsimDeprecationWarning(DeprecationWarning):
    """A faultsim name or setting that still works and goes in the next release."""


def _bind(request: pytest.FixtureRequest, faultsim_kill_point: Any) -> FaultsimFixture:
    state = request.config.stash[_STATE]
    state.start_clock()
    request.node.user_properties.append((SETUP_PROPERTY, str(os.getpid())))
    fixture = FaultsimFixture(request, state, faultsim_kill_point)
    request.node.stash[_FIXTURE] = fixture
    if isinstance(faultsim_kill_point, PointParam):
        left = state.budget_left()
        if left is not None and left <= 0:
            fixture._skip_for_budget()
    return fixture


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Any:
    report = yield
    fixture = item.stash.get(_FIXTURE, None)
    if (call.when == "call" and report.passed and fixture is not None
            and isinstance(fixture._param, PointParam) and fixture.explored == 0):
        # a kill-point item that never explored its kill point proved nothing
        report.outcome = "failed"
        report.longrepr = (f"faultsim: {item.nodeid} explored nothing: a kill-point item "
                           "must call crash_safety.check() (or crash_safety.explore())")
    return report
