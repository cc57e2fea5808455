"""Real sweeps made once per test session and shared by every test (and every xdist worker)
that asks for the same one, so that front-end tests (CLI, reports, HTML, compare, docs) run
on real reports without each paying for the sweep again.

`SharedCache` is a folder of pickled results keyed by a string, one file lock a key: the
first process to ask computes the value while holding the lock, the others wait for it and
read it back. Under xdist the folder is in the session's temporary root (the parent of each
worker's basetemp), so the four workers of `pytest -n 4` share it; it is new each session,
so nothing it holds can outlive the code that made it.

`MemoBackend` is a fake in-process backend (as httpx's MockTransport stands for a server):
it stands in the backends table (`faultsim.backends._LOADED`, through a fixture that puts
the real one back) and answers `explore` with the report the real in-process backend made
for the same inputs earlier in the session, replaying the plan and progress calls the real
one made. Sound because the in-process backend is deterministic in what the key holds (the
project's rule: same agent, scenario, options and seed give the same report, timings
aside): the agent's name and source file, the scenario file's path and bytes, every option,
the settings, the working folder, faultsim's environment variables, and whether a plan and
a progress callback were given. An input it cannot key (an `only` callable, a hypothesis
database, a factory without an importable name) goes to the real backend every time. The
front end still does all of its own work on the report; only the sweep is shared.
tests/test_shared_runs.py checks a shared report against the real backend's.
"""
from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import hashlib
import inspect
import os
import pickle
from pathlib import Path
from typing import Any, Callable

# Imported before any sweep: a module first imported inside a sweep's pyfakefs patch is
# unloaded when the patch ends, and a Plan's Forecast then has a class pickle cannot find
import faultsim.pipeline.forecast  # noqa: F401


class SharedCache:
    def __init__(self, folder: Path) -> None:
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.computed: list[str] = []  # the keys this process computed (the rest it read)
        self.unpicklable: list[str] = []

    def get(self, key: str, compute: Callable[[], Any]) -> Any:
        """The value of `key`: computed by the first process to ask, read by the others (a
        fresh copy every time: a test may change what it gets)."""
        digest = hashlib.sha256(key.encode()).hexdigest()[:32]
        path = self.folder / f"{digest}.pickle"
        with open(self.folder / f"{digest}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
            if path.exists():
                return pickle.loads(path.read_bytes())
            value = compute()  # an exception is not stored: the next asker computes again
            try:
                data = pickle.dumps(value)
            except (pickle.PicklingError, TypeError, AttributeError):
                self.unpicklable.append(key)  # not shared: each asker computes its own
                return value
            tmp = path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_bytes(data)
            os.replace(tmp, path)
            self.computed.append(key)
            return pickle.loads(data)


def cache_folder(tmp_path_factory) -> Path:
    """The session's shared folder: the xdist workers' common temporary root, or this
    session's own basetemp without xdist."""
    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent
    return base / "shared-runs"


def _file_digest(path: str | os.PathLike | None) -> str | None:
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except (OSError, TypeError):
        return None


def _agent_key(agent: Any) -> str | None:
    parts = [repr(agent.spec), repr(agent.name)]
    if agent.factory is not None:
        f = agent.factory
        name = f"{getattr(f, '__module__', None)}:{getattr(f, '__qualname__', None)}"
        if "<" in name or name.startswith("None:"):  # a lambda, a closure: no stable name
            return None
        try:
            source = inspect.getsourcefile(f)
        except TypeError:
            return None
        parts += [name, str(source), str(_file_digest(source))]
    if agent.spec:
        file = agent.spec.split(":")[0] if ".py" in agent.spec else None
        if file:
            parts.append(str(_file_digest(file)))
        else:  # a module: its file, wherever this process imports it from
            import importlib.util

            try:
                spec = importlib.util.find_spec(agent.spec.split(":")[0])
            except (ImportError, ValueError):
                spec = None
            parts.append(str(_file_digest(spec.origin)) if spec and spec.origin else "?")
    return "|".join(parts)


def explore_key(agent: Any, scenario: Any, options: Any, settings: Any, progress: Any,
                plan: Any) -> str | None:
    """Everything the in-process backend's report depends on, or None when an input has no
    key (then the real backend runs)."""
    agent_key = _agent_key(agent)
    path = getattr(scenario, "path", None)
    scenario_bytes = _file_digest(path)
    if agent_key is None or scenario_bytes is None:
        return None
    values = []
    for field in dataclasses.fields(options):
        value = getattr(options, field.name)
        if field.name in ("only", "database") and value is not None:
            return None
        values.append(f"{field.name}={value!r}")
    # faultsim's environment, but FAULTSIM_RUN: the name the subprocess mode gives its run
    # folders (tests/conftest.py sets one for each xdist worker), in no report
    env = sorted((k, v) for k, v in os.environ.items()
                 if k.startswith("FAULTSIM_") and k != "FAULTSIM_RUN")
    return "\n".join([
        "explore", agent_key, f"{path}:{scenario_bytes}", *values,
        repr(sorted((settings or {}).items())), os.getcwd(), repr(env),
        f"plan={plan is not None} progress={progress is not None}"])


class MemoBackend:
    """The real in-process backend's reports, each made once per session (see above)."""

    def __init__(self, real: Any, cache: SharedCache) -> None:
        self.real, self.cache = real, cache
        self.name = real.name
        self.shared = 0  # explores answered with a shared report
        self.unkeyed = 0  # explores passed to the real backend (an input with no key)

    def __getattr__(self, attr: str) -> Any:  # refuses, survey, replay: the real ones
        return getattr(self.real, attr)

    def explore(self, agent, scenario, options, *, progress=None, plan=None, settings=None):
        key = explore_key(agent, scenario, options, settings, progress, plan)
        if key is None:
            self.unkeyed += 1
            return self.real.explore(agent, scenario, options, progress=progress, plan=plan,
                                     settings=settings)

        def compute():
            calls: list = []

            def record_plan(p):
                calls.append(("plan", p))
                if plan is not None:
                    plan(p)

            def record_progress(*args, **kwargs):
                calls.append(("progress", (args, kwargs)))
                progress(*args, **kwargs)

            report = self.real.explore(
                agent, scenario, options, settings=settings,
                progress=None if progress is None else record_progress,
                plan=None if plan is None else record_plan)
            return calls, report

        made = len(self.cache.computed) + len(self.cache.unpicklable)
        calls, report = self.cache.get(key, compute)
        if len(self.cache.computed) + len(self.cache.unpicklable) == made:
            # read back: tell the front end what the real run told it, in the same order
            self.shared += 1
            for kind, what in calls:
                if kind == "plan":
                    plan(what)
                else:
                    progress(*what[0], **what[1])
        return report


@contextlib.contextmanager
def memo_in_process(cache: SharedCache):
    """The in-process backend replaced by a `MemoBackend` for the duration."""
    from faultsim import backends

    real = backends.backend("in-process")
    if isinstance(real, MemoBackend):  # already shared (a fixture inside another)
        yield real
        return
    memo = MemoBackend(real, cache)
    backends._LOADED["in-process"] = memo
    try:
        yield memo
    finally:
        backends._LOADED["in-process"] = real
