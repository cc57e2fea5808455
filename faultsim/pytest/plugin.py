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
from ..settings.table import SETTINGS
from .fixture import FaultsimFixture, known_errors, told as _told
from .settings import MARKER, FaultsimUsageError, Options, read_options, settings_for
from .state import BrokenParam, PluginState, PointParam
from .summary import SETUP_PROPERTY, Summary, session_folder

_STATE = pytest.StashKey[PluginState]()
_FIXTURE = pytest.StashKey[FaultsimFixture]()
_HEADER = pytest.StashKey[Options]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("faultsim", "faultsim: crash-safety tests for agents")
    # each option and ini key a row of faultsim.settings.table, in its order
    for s in SETTINGS:
        if s.pytest is None:
            continue
        if s.type is bool:
            group.addoption(s.pytest, action="store_true", default=False, help=s.pytest_help)
            continue
        kw: dict[str, Any] = {"metavar": s.metavar or s.name.upper(), "default": None,
                              "help": s.pytest_help}
        if s.type in (int, float):
            kw["type"] = s.type
        if s.choices:
            kw["choices"] = s.choices
        if s.nargs is not None:
            kw.update(nargs=s.nargs, const=s.const)
        group.addoption(s.pytest, **kw)
    # the same settings as ini keys ([tool.pytest.ini_options] faultsim_budget = 600, ...):
    # a project's defaults; the command line wins (faultsim.pytest.settings.read_options)
    for s in SETTINGS:
        if s.ini is not None:
            parser.addini(s.ini, f"default for {s.pytest}: {s.ini_help}", default=None)


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
    first, *keys = [s for s in SETTINGS if s.marker]  # the marker's keys: the table's
    signature = ", ".join([first.marker, *(f"{s.marker}={s.default!r}" for s in keys)])
    config.addinivalue_line(
        "markers", f"{MARKER}({signature}): a faultsim test of agent on scenario; "
        "kill_points=True (or faultsim.parametrize) makes one test item per kill point; "
        "mode='subprocess' runs real processes killed by SIGKILL (auto: for scenarios whose "
        "[store] is sqlite or redis)")
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
