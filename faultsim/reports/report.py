"""Verdicts and reports: what a person reads, and what CI parses."""
from __future__ import annotations

import json
import shlex
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from . import text
from .counts import Counts, all_failing_in_words, count
from .crashmap import counterexamples, crash_map, first_of_each_kind, why_of
from .text import first_request, horizon_line_of, states
from ..killpoints import KillPoint, categories
from ..judge.oracle import REGISTRY
from ..scenario import MAIN_TAG
# imported here, not in Verdict.token: a first import there can happen under pyfakefs (a
# token made inside a sweep), which left faultsim.token's `os` the fake one for good
from ..token import ReplayToken, Step, scenario_fingerprint

if TYPE_CHECKING:
    from ..core.crashmodel import CrashState
    from ..judge.oracle import CrashRun, Golden, Violation
    from ..scenario import Scenario

# Which failures a person should see first, and the protocol rule each invariant guards:
# both from the oracle's registry.
SEVERITY = tuple(r.invariant for r in REGISTRY)
RULES = {r.invariant: r.rule for r in REGISTRY}


@dataclass
class ResumeSummary:
    """What a counterexample shows of the resumed run (small, and picklable across the
    explorer's forked workers)."""

    ledger: Any
    outcome: Any
    error: str | None
    asked: tuple[str, ...] = ()  # the model turns the resumed incarnations asked for
    # the last resumed incarnation's first request: (incarnation, script, position, what
    # `_asked` calls it, the conversation it sent, abridged); () when it asked nothing
    first: tuple = ()

    @classmethod
    def of(cls, crash_run: "CrashRun") -> "ResumeSummary":
        requests = crash_run.world.model.requests
        asked = tuple(_asked(q) for q in requests if q.incarnation > 1)
        last = max((q.incarnation for q in requests), default=0)
        firsts = [q for q in requests if q.incarnation == last > 1]
        first = () if not firsts else (last, firsts[0].script, firsts[0].position,
                                       _asked(firsts[0]), tuple(firsts[0].sent))
        return cls(crash_run.world.ledger, crash_run.outcome, crash_run.error, asked, first)


def _asked(q: Any) -> str:
    """One request of a resumed run, as a counterexample names it."""
    if q.position is None:
        return f"(unplaced: {q.error or q.status})"
    what = f"turn {q.position + 1}" + (f" of {q.script}" if q.script not in (None, MAIN_TAG) else "")
    if q.repeat:
        what += " again"
    if getattr(q, "reaction", None):  # the model's answer to a tool's error result
        what += f" ({q.reaction.replace('_', ' ')} after an error)"
    if not q.ok:
        what += f" ({q.error or q.status})"
    return what


@dataclass
class Verdict:
    kill_point: KillPoint
    crash_model: str
    persisted: str  # which subset of unsynced state survived (power) or "every completed …"
    violations: list["Violation"]
    state: "CrashState"
    resume: "ResumeSummary | None"  # what the resumed run did (kept for failures only)
    golden: "Golden"
    order: int = 0  # among the crash states of one kill point
    earlier: tuple = ()  # the schedule's crashes before this one (`explore.Earlier`)
    resumed_at: int | None = None  # the model turn the resumed run asked first (0: turn 1)
    escalated: bool = False  # its resumed run escalated to a person (legal, P11)

    @property
    def ok(self) -> bool:
        return not self.violations

    @property
    def schedule(self) -> list[KillPoint]:
        """One kill point per killed incarnation, in order; the last is this verdict's."""
        return [e.point for e in self.earlier] + [self.kill_point]

    def token(self, run: "ModelRun") -> str:
        from .._version import __version__

        steps = [Step(e.point.index, e.point.offset, e.order) for e in self.earlier]
        steps.append(Step(self.kill_point.index, self.kill_point.offset, self.order))
        return ReplayToken(run.scenario.path, run.agent, self.crash_model, run.seed,
                           tuple(steps), run.mode, __version__,
                           scenario_fingerprint(run.scenario.path)).encode()


@dataclass
class DepthStats:
    """Schedules of one length (2 crashes, 3 ...) beyond the single-crash sweep."""

    crashes: int
    total: int = 0  # schedules of this length over every explored first crash
    explored: int = 0  # crash states judged after pruning (the others equal judged ones)
    resumed: int = 0  # of those, resumed afresh (the rest shared an equivalent's verdict)
    converged: int = 0  # of the resumed, those cut where they reached the clean run's state
    # of the resumed, those cut where they reached an earlier resumed run's state
    # (faultsim.inprocess.leads): in the JSON only in `shortcuts` (it varies with the
    # scheduling)
    met: int = 0
    # of the explored, last crashes after the previous crash's resumed run had met the
    # clean run: the clean run's own first crashes there, their verdicts composed from the
    # single-crash sweep's, not resumed (faultsim.inprocess.after_convergence); in a
    # searched length, of the searched schedules, those composed from a known resumed run
    # (faultsim.inprocess.search_after_convergence)
    after_convergence: int = 0
    # of the explored, last crashes whose crash state and observable world equal those of
    # a last crash resumed after an earlier first crash: composed from that run, not
    # resumed (faultsim.inprocess.after_convergence)
    composed: int = 0
    resume_seconds: float = 0.0
    seconds: float = 0.0
    searched: int = 0  # schedules tried by the hypothesis search (not exhaustive)
    at_horizon: int = 0  # of the resumed, those cut past the horizon (--horizon)
    # kill points of the first crashes' courses past their run's horizon cut (--horizon,
    # representative pairs): taken as the clean run's crashes there, not crashed
    # (convergence.py, "The horizon")
    past_horizon: int = 0


@dataclass
class ModelRun:
    """One scenario × agent × crash model."""

    scenario: "Scenario"
    agent: str
    crash_model: str
    kill_points: list[KillPoint]
    explored: list[KillPoint]
    verdicts: list[Verdict] = field(default_factory=list)
    seconds: float = 0.0
    resume_seconds: float = 0.0  # summed time of the bare resumed runs it contains
    judged: int = 0  # crash states resumed and judged
    reused: int = 0  # crash states equal to one already judged
    # of the `judged`, those whose resumed run reached the clean run's state at a model
    # request and was completed from its remainder (faultsim.inprocess.convergence)
    converged: int = 0
    # of the `judged`, those cut where they reached an earlier resumed run's state at its
    # first model request (faultsim.inprocess.leads); in the JSON report only as the
    # `shortcuts` block's `leads`: which runs find one depends on the worker count and on
    # which finished first
    met: int = 0
    convergence: str | None = None  # why no resumed run could be cut (None: it was tried)
    # --horizon H: resumed runs cut past their H-th model request after recovery, the rest
    # of their course taken from the clean run's (None: every run to its end or its cut)
    horizon: int | None = None
    at_horizon: int = 0  # of the `judged`, those cut past the horizon
    # why resumed runs (of any schedule length) were not cut, each run's first reason:
    # {"convergence": {reason: runs}, "leads": {reason: runs}} (faultsim.reports.shortcuts)
    refused: dict[str, dict[str, int]] = field(default_factory=dict)
    escalated: int = 0  # crash states whose resumed run escalated to a person (legal, P11)
    # first crash states killed in process whose kill's aftermath is read from the code
    # (faultsim.inprocess.unwind); the others are counted by reason in `refused["unwind"]`
    unwind_read: int = 0
    probes: list[Verdict] = field(default_factory=list)  # checks beyond kill points (P4)
    seed: str = "0"
    crashes: int = 1  # the most crashes in one schedule
    depths: dict[int, DepthStats] = field(default_factory=dict)
    deep_failures: list[Verdict] = field(default_factory=list)  # schedules of 2+ crashes
    # --shard: the first crash state 0 at each boundary (by event index) that another shard
    # judges: a counterexample shows the clean run's disk from it (crashmap._clean_state),
    # as the whole run's does from its own verdict there
    clean_states: dict = field(default_factory=dict)
    mode: str = "in-process"  # or "subprocess": real processes, real files, SIGKILL
    # an incarnation's limit as asked: seconds, None, or "auto" (derived from the clean runs)
    timeout: float | str | None = "auto"
    # the limit a resumed incarnation had (under "auto", derived from how long the clean
    # runs took: pipeline.incarnation.resumed_limit); None: no limit, or not known
    timeout_seconds: float | None = None
    # the measured wall time of the whole exploration this run came from (clean runs, every
    # crash model, the search), on its first run; 0 on the others (the crash models are
    # swept together, not timed apart); None: not measured (`seconds` is apportioned)
    wall_seconds: float | None = None
    # --shard (i, n), and what the shards split: "crash state" (in-process) or "kill point"
    shard: tuple[int, int] | None = None
    shard_by: str = "crash state"
    # lines a backend adds to the console summary after this run (not in the JSON report):
    # what only it can say, e.g. how many of its kills landed
    notes: list[str] = field(default_factory=list)
    # the clean run's writes whose torn cuts were bounded (killpoints.torn_bounded):
    # {"file", "bytes", "cuts", "of"} each
    torn_bounded: list[dict] = field(default_factory=list)
    # the kill points' classes and which of them the run's coverage crashes at
    # (faultsim.core.classes.Coverage); None from a backend that does not class them
    coverage: Any = None
    # representative coverage's pair stage: the classes of the resumed courses and what
    # was judged of them (classes.PairCoverage.to_json); None: no pair stage, or every
    # kill point of every course
    pair_coverage: dict | None = None

    def depth(self, crashes: int) -> DepthStats:
        return self.depths.setdefault(crashes, DepthStats(crashes))

    def unwound(self, loud: str | None) -> None:
        """Count a first crash state's kill: read (`loud` None) or why not (unwind.py)."""
        if loud is None:
            self.unwind_read += 1
        else:
            into = self.refused.setdefault("unwind", {})
            into[loud] = into.get(loud, 0) + 1

    def refusal(self, refused: tuple) -> None:
        """Count a resumed run's reasons for not being cut (`ResumeResult.refused`)."""
        for name, why in zip(("convergence", "leads"), refused):
            if why is not None:
                into = self.refused.setdefault(name, {})
                into[why] = into.get(why, 0) + 1

    @property
    def failures(self) -> list[Verdict]:
        return [v for v in self.verdicts + self.probes + self.deep_failures if not v.ok]

    @property
    def ok(self) -> bool:
        return not self.failures

    def run_command(self) -> str:
        mode = " --mode subprocess" if self.mode == "subprocess" else ""
        return (f"faultsim run {shlex.quote(self.scenario.path)} --agent "
                f"{shlex.quote(self.agent)}{mode}")

    def _timeout_option(self) -> str:
        # only when not the default: it decides whether a slow resumed run counts as hung
        # (derived again from the clean runs, a replay gets the same limit)
        if self.timeout == "auto":
            return ""
        return f" --timeout {self.timeout or 0:g}"

    def replay_command(self, verdict: Verdict) -> str:
        """Everything that decides the verdict is in the command: the token carries the
        scenario file (with its downtime), agent, crash model, seed and schedule; the
        worker count decides nothing (the same report for any)."""
        if verdict.kill_point.category == "version-probe":
            return self.run_command()  # the probe runs with every full run
        return f"faultsim replay {verdict.token(self)}{self._timeout_option()}"  # its mode

    def rerun_command(self, verdict: Verdict) -> str | None:
        """For a single crash: the run narrowed to its kill point (every crash state)."""
        if verdict.earlier or verdict.kill_point.category == "version-probe":
            return None
        return (f"{self.run_command()} --crash-model {self.crash_model} --crashes 1 "
                f"--seed {shlex.quote(self.seed)}{self._timeout_option()} "
                f"--kill-point {verdict.kill_point.id}")

    def rank(self, verdict: Verdict) -> list[int]:
        """Where `verdict` stands among the run's failures (their order): single crashes by
        kill point and crash state, then the probes, then longer schedules crash by crash.
        In the JSON report, so `faultsim report merge` can interleave shards' failures."""
        if verdict.kill_point.category == "version-probe":
            return [1]
        position = self.__dict__.get("_positions")
        if position is None:
            position = {p.id: n for n, p in enumerate(self.kill_points)}
            self.__dict__["_positions"] = position
        if not verdict.earlier:
            return [0, position.get(verdict.kill_point.id, -1), verdict.order]
        key = [2]
        for k, e in enumerate(verdict.earlier):
            key += [position.get(e.point.id, -1) if k == 0 else e.point.index, e.order]
        return key + [verdict.kill_point.index, verdict.kill_point.offset or 0, verdict.order]

    def counts(self) -> Counts:
        """The run's counts (faultsim.reports.counts), computed as from its JSON report: from the
        crash map and the failing verdicts. Kept until the run judges more."""
        key = (len(self.verdicts), len(self.deep_failures), len(self.probes),
               len(self.explored), self.crashes)
        kept = self.__dict__.get("_counts")
        if kept is None or kept[0] != key:
            kept = (key, count(self._for_counts(crash_map(self, SEVERITY),
                                                len(first_of_each_kind(self, SEVERITY)))))
            self.__dict__["_counts"] = kept
        return kept[1]

    def _for_counts(self, found_map: dict[str, Any], counterexamples: int) -> dict[str, Any]:
        """What faultsim.reports.counts reads of a JSON run, as `to_json` writes it."""
        return {"kill_points_total": len(self.kill_points),
                "kill_points_explored": len(self.explored), "crash_states": len(self.verdicts),
                "crashes": self.crashes, "map": found_map,
                "counterexamples": [None] * counterexamples,
                "violations": [{"rank": self.rank(verdict),
                                "schedule": [p.id for p in verdict.schedule]}
                               for verdict in self.failures]}

    def to_json(self, sparse_map: bool = False) -> dict[str, Any]:
        """`sparse_map`: the map's explored kill points only (faultsim.reports.crashmap)."""
        found = self._json(sparse_map)
        found["counts"] = count(found).to_json()  # faultsim.reports.counts: each count defined once
        return found

    def _json(self, sparse_map: bool) -> dict[str, Any]:
        return {
            "scenario": self.scenario.id, "path": self.scenario.path, "agent": self.agent,
            "crash_model": self.crash_model, "mode": self.mode,
            "kill_points_total": len(self.kill_points),
            "kill_points_explored": len(self.explored),
            "torn_bounded": self.torn_bounded,
            "categories": categories(self.explored), "seconds": round(self.seconds, 3),
            "crash_states": len(self.verdicts), "crash_states_resumed": self.judged,
            "crash_states_escalated": self.escalated,
            "crash_states_converged": self.converged, "convergence": self.convergence,
            "shortcuts": self.shortcuts(),
            "probes": [{"id": p.kill_point.id, "ok": p.ok} for p in self.probes],
            "seed": self.seed, "crashes": self.crashes,
            "timeout": self.timeout, "timeout_seconds": self.timeout_seconds,
            "wall_seconds": None if self.wall_seconds is None
            else round(self.wall_seconds, 3),
            "fingerprint": scenario_fingerprint(self.scenario.path),
            "shard": None if self.shard is None else {"index": self.shard[0],
                                                      "of": self.shard[1], "by": self.shard_by},
            "violating": len(self.failures),
            "schedules": {str(n): {"total": d.total, "explored": d.explored,
                                   "resumed": d.resumed, "converged": d.converged,
                                   "after_convergence": d.after_convergence,
                                   "composed": d.composed,
                                   "searched": d.searched,
                                   "seconds": round(d.seconds, 3)}
                          for n, d in sorted(self.depths.items())},
            "violations": [
                {"invariant": v.invariant, "rule": v.rule,
                 "schedule": [p.id for p in verdict.schedule],
                 "persisted": verdict.persisted,
                 "persisted_each": [e.persisted for e in verdict.earlier] + [verdict.persisted],
                 "replay": self.replay_command(verdict),
                 "token": None if verdict.kill_point.category == "version-probe"
                 else verdict.token(self),
                 "explanation": v.explanation, "rank": self.rank(verdict)}
                for verdict in self.failures for v in verdict.violations],
            # for the HTML page (faultsim.reports.crashmap): every kill point's verdict, compactly,
            # and each counterexample's details
            "map": crash_map(self, SEVERITY, sparse=sparse_map),
            # every crash state by its stable identity, for `faultsim compare`
            "states": states(self),
            "counterexamples": counterexamples(self, SEVERITY, RULES),
            # exhaustive or representative, the kill points' classes and what was judged
            # of each (faultsim.core.classes)
            "coverage": None if self.coverage is None else self.coverage.to_json(
                self._judged_positions()) | (
                {} if self.pair_coverage is None else {"pairs": self.pair_coverage}),
        } | ({} if self.horizon is None else {"horizon": self._horizon_block()})

    def _horizon_block(self) -> dict[str, Any]:
        """--horizon: what was assumed, not seen (docs/explanation/guarantees.md)."""
        return {"requests": self.horizon, "crash_states_cut": self.at_horizon,
                "schedules_cut": {str(n): d.at_horizon
                                  for n, d in sorted(self.depths.items())},
                "schedules_past_cut": {str(n): d.past_horizon
                                       for n, d in sorted(self.depths.items())}}

    def horizon_line(self) -> str | None:
        """What --horizon assumed, in one line (None: no horizon)."""
        if self.horizon is None:
            return None
        return horizon_line_of(self._horizon_block(), self.judged)

    def shortcuts(self) -> dict[str, Any]:
        """How often each shortcut applied, and why not where it never did (the JSON
        report's `shortcuts`, faultsim.reports.shortcuts), over every schedule length."""
        from .shortcuts import block

        depths = self.depths.values()
        return block(
            resumed=self.judged + sum(d.resumed for d in depths),
            converged=self.converged + sum(d.converged for d in depths),
            met=self.met + sum(d.met for d in depths), refused=self.refused,
            aftermath=sum(d.after_convergence + d.composed for d in depths),
            later=sum(d.explored + d.searched for d in depths),
            # an exhaustive length's explored last crashes: resumed, composed or shared
            shared=self.reused + sum(d.explored - d.resumed - d.after_convergence - d.composed
                                     for d in depths if not d.searched),
            states=len(self.verdicts) + sum(d.explored for d in depths),
            crashes=self.crashes, off=self.convergence, unwind=self.unwind_read)

    def _judged_positions(self) -> set[int]:
        """Positions (in `kill_points`) of the kill points with a verdict here."""
        position = {p.id: n for n, p in enumerate(self.kill_points)}
        return {position[v.kill_point.id] for v in self.verdicts
                if v.kill_point.id in position}

    def coverage_line(self) -> str | None:
        """What a representative run covered, in one line (None: exhaustive)."""
        if self.coverage is None or not self.coverage.representative:
            return None
        from ..core.classes import pairs_line_of

        line = self.coverage.line()  # faultsim.core.classes.line_of, as a merged report's
        pairs = pairs_line_of(self.pair_coverage)
        return line if pairs is None else f"{line}; {pairs}"

    def first_request(self, verdict: Verdict) -> dict[str, Any] | None:
        return first_request(verdict)

    def counterexample(self, verdict: Verdict) -> str:
        """One failing crash state or schedule as a person reads it (`text.counterexample`)."""
        return text.counterexample(self, verdict)

@dataclass(frozen=True)
class Refusal:
    """A scenario faultsim stopped before any verdict (the clean run failed, escaped, was
    not deterministic; the scenario or an option cannot work; faultsim's own machinery
    failed): what the one-line error said, kept for the reports CI reads."""

    scenario: str  # the scenario file
    agent: str
    kind: str  # the error's class, e.g. AgentFailedCleanly
    category: str  # "finding" (exit 1), "usage" (exit 2) or "harness" (exit 3)
    message: str
    details: str = ""  # the agent's traceback and output, when it raised

    def to_json(self) -> dict[str, Any]:
        return {"scenario": self.scenario, "agent": self.agent, "kind": self.kind,
                "category": self.category, "message": self.message,
                "details": self.details}


@dataclass
class Report:
    runs: list[ModelRun] = field(default_factory=list)
    golden_seconds: float = 0.0  # the two clean runs and set-up
    sweep_seconds: float = 0.0  # the crash runs (all crash models together)
    refused: list[Refusal] = field(default_factory=list)
    # an interrupted run's report (faultsim.reports.interrupted.Partial): never ok, whatever it
    # judged, since what it did not judge is unknown
    partial: Any = None

    @property
    def ok(self) -> bool:
        return all(run.ok for run in self.runs) and not self.refused and not self.partial

    def to_json(self) -> dict[str, Any]:
        from .._version import __version__

        found = {"ok": self.ok, "version": __version__,
                 "runs": [run.to_json() for run in self.runs]}
        if self.refused:  # a run stopped before its verdicts: what stopped it
            found["refused"] = [r.to_json() for r in self.refused]
        if self.partial:  # cut short: what it judged, of what it planned
            found["partial"] = self.partial.to_json()
        return found

    def dumps(self) -> str:
        return json.dumps(self.to_json(), indent=2)

    def counterexamples(self, limit: int = 3) -> list[str]:
        """The earliest crash state for each kind of failure, the worst kinds first."""
        found = []
        for r, run in enumerate(self.runs):
            shown = set()
            for n, verdict in enumerate(run.failures):
                kinds = tuple(v.invariant for v in verdict.violations)
                reason = why_of(verdict)  # a by-design window and an ordering bug apart
                if reason:
                    kinds += (reason[0],)
                if kinds in shown:
                    continue
                shown.add(kinds)
                worst = min(SEVERITY.index(k) if k in SEVERITY else len(SEVERITY)
                            for k in kinds)
                found.append((worst, r, n, run, verdict))
        found.sort(key=lambda f: f[:3])
        return [run.counterexample(verdict) for *_, run, verdict in found[:limit]]

    def rows(self) -> list[tuple[str, ...]]:
        """Per run, the cells of the summary table (`text.TABLE_HEAD`)."""
        return text.rows(self)

    def summary(self) -> str:
        """The table `faultsim run` ends with (`text.summary`)."""
        return text.summary(self)

    def assert_ok(self) -> None:
        if not self.ok:
            failing = all_failing_in_words([r.counts() for r in self.runs])
            raise AssertionError(f"faultsim: {failing} the protocol; "
                                 "the first of each kind:\n\n" +
                                 "\n\n".join(self.counterexamples()))
