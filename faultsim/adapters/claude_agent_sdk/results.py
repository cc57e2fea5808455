"""What the Claude Agent SDK backend's exploration gives back: each crash state's `Verdict`,
the `Exploration` of a scenario and the `Survey` of its budget (`faultsim list`). Their own
module, so that the sweep (which makes them) and the report (which turns them into
faultsim's `ModelRun`) both import them and neither imports the other."""
from __future__ import annotations

from dataclasses import dataclass, field

from ...core.crashmodel import CrashState
from ...judge.oracle import Golden, Violation
from ...pipeline.crashes import Judged
from ...reports.report import ResumeSummary
from ...scenario import Scenario
from .control import KillPoint
from .states import orphaned
from .writes import HOLD


@dataclass
class Verdict:
    kill_point: KillPoint
    state: str  # which crash state, in words
    violations: list[Violation]
    resumed_at: int | None  # the first turn the resume asked for (0: the first)
    error: str | None
    orphaned: bool  # the transcript held a tool_use without its tool_result
    seconds: float
    effects_before: int = 0  # effects applied before the kill
    order: int = 0  # among the kill point's crash states (a replay token names it)
    crash_state: CrashState | None = None  # what the guards read
    summary: ResumeSummary | None = None  # what the resumed run did (for the report)
    # the state whose resumed run this one shares ("k3-...#1 [as written]": equal to it,
    # `memo.py`), None when resumed for this very state
    shared: str | None = None
    key: tuple | None = None  # its memo key (equal states share it; None: no memo)
    # the pipeline's record it was made of (`faultsim.pipeline.crashes`): what the report
    # is made of, as the command backend's is
    judged: Judged | None = None

    @property
    def ok(self) -> bool:
        return not self.violations

    @classmethod
    def of(cls, j: Judged) -> "Verdict":
        """The adapter's verdict of a state the pipeline judged: what the findings table
        counts too (whether the transcript holds an orphaned tool call, how many effects
        were applied before the kill)."""
        files, killed, summary = j.found.given, j.kill.world, j.result.summary
        return cls(j.point, j.found.label, j.violations, j.result.first_position,
                   summary.error if summary is not None else None, orphaned(files),
                   j.result.seconds if j.shared is None else 0.0,
                   sum(len(killed.ledger.applied(n)) for n in killed.services)
                   if killed is not None else 0,  # a point not judged: no kill landed
                   j.orders["power"], j.found.state, summary, shared=j.shared, key=j.key,
                   judged=j)


@dataclass
class Exploration:
    scenario: Scenario
    golden: Golden
    kill_points: list[KillPoint]
    verdicts: list[Verdict] = field(default_factory=list)
    kills_landed: int = 0
    # of those, the points where one run was stopped, its crash state read, and let go on
    # (`Controller._stop`): what a kill there leaves, without a crash run of its own
    stopped: int = 0
    incarnations: int = 0
    seconds: float = 0.0
    writes: int | None = None  # transcript writes of the clean run under strace (None: not traced)
    writes_missed: list[KillPoint] = field(default_factory=list)  # write N never came
    untraced: str | None = None  # why the transcript's writes were not traced, if not

    @property
    def resumed(self) -> int:
        """Crash states resumed (the others shared the resumed run of an equal state)."""
        return sum(1 for v in self.verdicts if v.shared is None)

    @property
    def failures(self) -> list[Verdict]:
        return [v for v in self.verdicts if v.violations]

    def assert_ok(self, agent: str = "claude-agent-sdk:agent") -> None:
        """For a test: fail with faultsim's counterexamples (and their replay commands,
        when `agent` is the spec `claude-agent-sdk:FILE.py:ATTR`) when a crash state
        violates the protocol, and when nothing was tested (no kill landed)."""
        from .report import assert_ok

        assert_ok(self, agent)


@dataclass
class Survey:
    """What a sweep will cost, from one clean run (`faultsim list`)."""

    kill_points: list[KillPoint]  # the transcript writes' last
    crash_states: int  # estimated, prefixes="messages"
    seconds_per_incarnation: float  # the clean run's, measured here
    writes: int | None = None  # the clean run's transcript writes (None: not traced)
    untraced: str | None = None  # why not, when strace could have traced them

    @property
    def incarnations(self) -> int:
        """The clean run(s), one run stopped at every kill point where the CLI waits on
        faultsim and one stopped in every transcript write (`Controller._stop`; crash runs
        of their own only where a stop cannot be kept), one resume per crash state (at
        most: equal states share one, which only the sweep can tell)."""
        writes = self.writes or 0
        return (1 + (self.writes is not None) + (len(self.kill_points) > writes)
                + (writes > 0) + self.crash_states)

    @property
    def seconds(self) -> float:
        """Each incarnation at the clean run's pace; the run stopped in the transcript
        writes also waits while strace holds each."""
        held = (self.writes or 0) * HOLD
        return self.incarnations * self.seconds_per_incarnation + held
