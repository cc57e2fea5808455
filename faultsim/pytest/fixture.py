"""What a test sees of faultsim: the `crash_safety` fixture (`FaultsimFixture`).

    import faultsim
    from my_agent import make_agent

    @faultsim.parametrize(make_agent, "scenarios/my_task.toml")
    def test_survives_every_crash(crash_safety):
        crash_safety.check()

Its settings come from faultsim.pytest.settings; only pytest is imported here at load time:
the engine, pyfakefs and the SDK are imported when a faultsim test first runs.
"""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from ..errors import KNOWN
from .settings import (FaultsimUsageError, Settings, resolve_scenario, settings_for,
                       settings_for_options)
from .state import BrokenParam, PluginState, PointParam, group_of, rerun_command, rerun_id

if TYPE_CHECKING:
    from ..killpoints import KillPoint
    from ..inprocess.pointwise import PointwiseExplorer
    from ..reports.report import Report
    from ..inprocess.session import Session


def told(exc: BaseException) -> str:
    """A known error as a failed test shows it: the one line, then the agent's own
    traceback and output when it raised."""
    details = getattr(exc, "details", "")
    return f"faultsim: {exc}" + (f"\n\n{details}" if details else "")


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
        from ..backends import Agent, explore
        from ..scenario import load_scenario

        settings = self._settings_for(scenario)
        factory, name = settings.resolve_agent(make_agent)
        left = state.budget_left()
        if left is not None and left <= 0:
            self._skip_for_budget()
        categories = settings.categories
        scenario_ = load_scenario(settings.scenario)
        options = settings.options(
            shard=state.options.shard, search_seconds=left,
            only=(lambda p: p.category in categories) if categories else None,
            coverage=state.options.coverage, per_class=state.options.per_class)
        # the backend faultsim.backends chooses: subprocess mode and the Claude Agent SDK's
        # import the agent by name, so a factory without one (an adapter's factory bound
        # to no module-level name: "<...>") cannot go there
        spec = None if name == "agent" or "<" in name else name
        if state.options.ray is not None:
            report = self._explore_on_ray(settings, spec, options)
        else:
            report = explore(Agent(spec, factory, name), scenario_, options)
        self._note(report, "scenario")
        return report

    def _explore_on_ray(self, settings: Settings, spec: str | None, options) -> Any:
        """--faultsim-ray: this sweep's shards as Ray tasks, each a `faultsim run --shard`
        of the same settings (faultsim.pipeline.ray_shards), merged into the whole run's report."""
        from ..pipeline.ray_shards import check_address, run_shards
        from ..reports.merge import as_report

        where = f"{self._request.node.nodeid}: --faultsim-ray"
        if spec is None:
            raise FaultsimUsageError(f"{where}: a shard imports the agent by name, and this "
                                     "factory has none (define it at a module's top level)")
        if settings.categories:
            raise FaultsimUsageError(f"{where}: categories= narrows the kill points in this "
                                     "process only; drop it or run without Ray")
        args = [str(settings.scenario), "--agent", spec, "--crash-model",
                settings.crash_model, "--crashes", str(settings.crashes), "--seed",
                settings.seed, "--mode", settings.mode]
        if isinstance(settings.timeout, (int, float)):
            args += ["--timeout", str(settings.timeout)]
        for flag, value in (("--coverage", options.coverage), ("--per-class", options.per_class),
                            ("--search-seconds", options.search_seconds)):
            if value is not None:
                args += [flag, str(value)]
        ray = self._state.options
        merged, _ = run_shards(args + ["--workers", "1"],
                               address=check_address(ray.ray, "--faultsim-ray"),
                               shards=ray.ray_shards)
        return as_report(merged)

    def check(self, make_agent: Any = None, scenario: Any = None) -> "Report":
        """Explore, and fail the test (a plain AssertionError carrying the counterexample)
        if any crash state violates the protocol."""
        __tracebackhide__ = True
        report = self.explore(make_agent, scenario)
        if not report.ok:
            try:
                added = self._added_over_baseline(report)
            except known_errors() as exc:
                pytest.fail(told(exc), pytrace=False)
            if added == "":
                return report  # every failing state fails in the baseline too
            raise AssertionError(added or self._failure_text(report))
        return report

    def _added_over_baseline(self, report: "Report") -> str | None:
        """With --faultsim-baseline: "" when the run adds no failing crash state over the
        baseline report, else the failure naming the states it adds (aligned by their
        stable identity, faultsim.reports.compare); None without a baseline."""
        base = self._state.baseline()
        if base is None:
            return None
        from ..reports.compare import compare

        path = self._state.options.baseline
        diff = compare(base, report.to_json(), path, "this run")
        if diff.ok:
            return ""
        added = diff.regressions
        return (f"faultsim: this run adds {len(added)} failing crash state"
                f"{'s' if len(added) != 1 else ''} over the baseline {path}: "
                + "; ".join(f"{s.identity} ({s.b_id}: {s.b})" for _, s in added[:10])
                + (" ..." if len(added) > 10 else "") + "\n\n" + self._failure_text(report))

    def corpus(self, path: str | Path, make_agent: Any = None, scenario: Any = None) -> list:
        """Check the checkpoint corpus at `path` (relative to the test file): every recorded
        state resumes under the agent's current code and passes the oracle. With
        `--faultsim-record`, record it anew from the scenario first (like a snapshot tool's
        update flag); a missing corpus fails and says so."""
        __tracebackhide__ = True
        from ..formats import Corpus, check_corpus, record_corpus
        from ..scenario import load_scenario

        folder = Path(path)
        if not folder.is_absolute():
            folder = Path(self._request.node.path).parent / folder
        try:
            if self.record:
                settings = self._settings_for(scenario)
                factory, name = settings.resolve_agent(make_agent)
                folder.parent.mkdir(parents=True, exist_ok=True)  # corpora/ on first record
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
                from ..settings.loading import load_factory

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
        from ..backends import Agent, session

        settings = self._settings_for(scenario)
        factory, name = settings.resolve_agent(make_agent)
        model = crash_model or settings.crash_model
        if model == "all":
            model = "process"
        return session(Agent(None, factory, name), settings.scenario, crash_model=model,
                       seed=settings.seed, timeout=settings.timeout)

    # -- what the summary and the failure say ---------------------------------------------
    def _failure_text(self, report: "Report") -> str:
        from ..reports.counts import all_failing_in_words

        failing = all_failing_in_words([r.counts() for r in report.runs])
        where = (f"kill point {self._param.id}" if isinstance(self._param, PointParam)
                 else f"{len(report.runs[0].explored)} kill points" if report.runs else "")
        return (f"faultsim: {failing} the protocol at {where}; the "
                "first of each kind:\n\n" + "\n\n".join(report.counterexamples())
                + "\n\nrerun this test alone: "
                + rerun_command(self._request.node, self._state.options))

    def _note(self, report: "Report", mode: str) -> None:
        from ..killpoints import categories

        self.reports.append(report)
        self.explored += max((len(r.explored) for r in report.runs), default=0)
        first = report.runs[0] if report.runs else None
        entry = {
            "mode": mode, "nodeid": self._request.node.nodeid,
            "rerun": rerun_id(self._request.node),
            "command": rerun_command(self._request.node, self._state.options),
            "group": group_of(self._request.node),
            "scenario": first.scenario.id if first else None,
            "agent": first.agent if first else None,
            "kill_points_total": len(first.kill_points) if first else 0,
            "models": {r.crash_model: {
                "kill_points": len(r.explored),
                "categories": {k: n for k, n in categories(r.explored).items() if n},
                # faultsim.reports.counts: the figures every report shows
                "crash_states": len(r.verdicts), "violating": r.counts().crash_states_failed,
                "resumed": r.judged,
                "pairs": {"total": r.depth(2).total, "explored": r.depth(2).explored,
                          "resumed": r.depth(2).resumed,
                          "violating": r.counts().schedules_failed.get("2", 0)}
                if r.crashes >= 2 else None,
                "probes": [p.ok for p in r.probes],
                "seconds": round(r.seconds, 3)} for r in report.runs},
            "failures": [{"crash_model": r.crash_model, "rank": r.rank(v),
                          "schedule": [p.id for p in v.schedule],
                          "invariants": [x.invariant for x in v.violations],
                          "replay": r.replay_command(v)}
                         for r in report.runs for v in r.failures],
        }
        if mode == "kill point" and self.settings.crashes > 2:
            entry["note"] = (f"{group_of(self._request.node)}: kill-point items explore "
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
            {"mode": "skipped", "nodeid": node.nodeid, "group": group_of(node)})))
        pytest.skip(f"faultsim: the budget of {self._state.options.budget:g} s is spent")
