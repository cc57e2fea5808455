"""The oracle: one guard per protocol rule, each judging one crash run against the golden
run. A guard returns a `Violation` (with a sentence a person can read) or None."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from ..agent import Outcome
from ..core.checkpoints import DEFAULT, CheckpointSpec, progress, settled, whole
from ..core.crashmodel import CrashState
from ..killpoints import KillPoint, kill_points, torn_bounded
from ..world import World, effect_difference
from ..world.ledger import RECOGNISED, Ledger, canonical

EFFECT_OPS = ("submit", "apply", "send")  # attempts that may change the world
OUTPUTS = "workspace/"  # the agent's outputs, compared with the golden run's at the end


@dataclass(frozen=True)
class Rule:
    """One invariant the oracle guards: the PROTOCOL.md rule(s) it stands for, when it is
    judged, and when it fails (one line; docs/reference/invariants.md's table is this
    registry, written by registry_table())."""

    invariant: str
    rule: str
    stage: str  # "state": every crash state; "resume": the resumed run; "kill": the dead
    #             incarnation; "probe": the tampered-checkpoint probe; "pause": both
    #             incarnations of a pause schedule (faultsim.inprocess.pause)
    summary: str  # fails when ...


# The one registry of rules, in severity order: which failures a person should see first
# (a duplicated payment before a miscount). report.SEVERITY and report.RULES, the JUnit
# cases and the docs' invariants table (registry_table) follow it.
REGISTRY: tuple[Rule, ...] = (
    Rule("effects_exactly_once", "P8/P11", "resume", "an effect is applied more often than "
         "in the golden run, or (for a completed run) never"),
    Rule("unknown_version_refused", "P4", "probe", "the version probe: every "
         "`checkpoint.json` rewritten with version 999 must be refused loudly and left "
         "untouched"),
    Rule("completes_or_escalates", "P5", "resume", "the resumed run raises, hangs, or ends "
         "with another answer (an explicit escalation is a legal stop)"),
    Rule("api_valid", "P5", "resume", "the fake API answered 400 `invalid_request_error`"),
    Rule("checkpoint_whole", "P3", "state", "a `checkpoint.json` on disk at the kill is not "
         "one whole JSON document"),
    Rule("no_silent_restart", "P1/P5", "state", "the checkpoint held a conversation in "
         "progress (or one of the model's answers) but the resume asked for turn 1"),
    Rule("outputs_match", "P9/P10", "resume", "files under `workspace/` differ from the "
         "golden run's at the end"),
    Rule("no_work_after_kill", "sandbox", "kill", "the killed incarnation caught the kill and "
         "went on: asked the model, applied an effect or returned from `run()` (cleanup "
         "that re-raises is no finding: what it writes never lands)"),
    Rule("no_sandbox_escape", "sandbox", "resume", "the agent wrote outside its workdir "
         "(refused with a PermissionError before it landed, in both modes; in subprocess "
         "mode, a process it started too: the write failed against the read-only mount)"),
    Rule("no_stray_thread", "sandbox", "resume", "a thread the agent started was still "
         "working after `run()` returned (stopped; nothing it did after landed)"),
    Rule("no_unrouted_effect", "sandbox", "resume", "the agent reached for a network "
         "address faultsim does not serve (refused before it connected)"),
    Rule("no_uncontained_process", "sandbox", "resume", "the agent started a process "
         "faultsim cannot contain (in-process mode; subprocess mode where the kernel gives "
         "no namespace): refused before it ran"),
    Rule("no_process_left_behind", "sandbox", "resume", "a process the agent started "
         "left its incarnation's process group and outlived it (subprocess mode; then "
         "SIGKILLed)"),
    Rule("one_step_repeated_per_crash", "P2/P5", "resume", "repeated steps exceed the "
         "number of crashes: each re-asked model turn (with the calls it re-sent that the "
         "receiver recognised) and each other extra effect attempt, beyond the clean run's "
         "own"),
    Rule("counters_continue", "P1/P5", "resume", "final `turns` differ from the golden "
         "run's, or `tokensUsed` is below the golden spend or above what was billed"),
    Rule("progress_recorded_once", "P7/P9", "resume", "the agent reports a different number "
         "of completed steps"),
    Rule("checkpoint_not_rolled_back", "P13", "pause", "under the pause model, a save of "
         "the woken incarnation replaced the new incarnation's checkpoint with one holding "
         "a shorter conversation: a lost update (a lease with a fencing token checked on "
         "save, or a compare-and-set on the checkpoint's version, refuses it)"),
    Rule("one_owner_completes", "P13", "pause", "under the pause model, both incarnations "
         "reported the task done with different outcomes (answer, turns, steps): two "
         "owners finished two runs of one task"),
    Rule("kill_point_judged", "harness", "point", "faultsim could not judge the kill point: "
         "its crash run took another course there twice (the agent is not deterministic "
         "there), its kill could not be proven landed twice, the process judging it died "
         "without a verdict (twice in subprocess mode; the agent ended its process, a "
         "signal), or the in-process "
         "kill did not unwind and its process had to be stopped (try `--mode subprocess`); "
         "the explanation says which, and the sweep went on"),
)
RULE_OF = {r.invariant: r for r in REGISTRY}


def registry_table() -> str:
    """The registry as the Markdown table of docs/reference/invariants.md (a test keeps the
    page equal to it)."""
    rows = ["| invariant | rule | judged on | fails when |", "|---|---|---|---|"]
    rows += [f"| `{r.invariant}` | {r.rule} | {r.stage} | {r.summary} |" for r in REGISTRY]
    return "\n".join(rows)


@dataclass(frozen=True)
class Violation:
    invariant: str
    rule: str
    explanation: str  # for people
    # for programs: what the explanation says, as data (e.g. effects_exactly_once's
    # `extra` and `missing` counts by effect), so no consumer parses the prose
    facts: tuple[tuple[str, Any], ...] = field(default=(), compare=False)  # not hashed

    @classmethod
    def of(cls, invariant: str, explanation: str, **facts: Any) -> "Violation":
        """A violation of a registered invariant (its rule code from the registry)."""
        return cls(invariant, RULE_OF[invariant].rule, explanation,
                   tuple(sorted(facts.items())))

    def fact(self, name: str, default: Any = None) -> Any:
        return dict(self.facts).get(name, default)


_violated = Violation.of  # the guards' short name for it


@dataclass
class Golden:
    """The clean run every crash run is judged against."""

    outcome: Outcome
    ledger: Ledger
    outputs: dict[str, bytes]
    effect_attempts: int
    trace: list  # events
    checkpoint: CheckpointSpec = DEFAULT  # where the agent keeps its state (the scenario's)
    # The tool-use ids the model answered with in the clean run: unique strings that any
    # record of the conversation holds, whatever its format or field names.
    answers: tuple[bytes, ...] = ()
    # (script, position) -> the conversation the clean run sent for that turn, abridged
    # (its first answered request there): what a resumed run's first request is shown beside
    sent: dict = field(default_factory=dict)
    # (script, position) -> how many times the clean run had that turn answered again: a
    # conversation that asks a turn twice by design (a user message the fake places at the
    # same turn) repeats it in every run, and no crash is to blame for that
    answered: dict = field(default_factory=dict)
    torn_cuts: str = "bounded"  # the scenario's: a large write's cuts bounded, or "all"

    @classmethod
    def of(cls, outcome: Outcome, world: World, final: dict, trace: list,
           checkpoint: CheckpointSpec = DEFAULT, torn_cuts: str = "bounded") -> "Golden":
        answers = tuple(i.encode() for q in world.model.requests if q.ok
                        for i in q.tool_use_ids)
        sent: dict = {}
        for q in world.model.requests:
            if q.ok and q.position is not None and not getattr(q, "reaction", None):
                sent.setdefault((q.script, q.position), tuple(q.sent))
        return cls(outcome, world.ledger, outputs_of(final), effect_attempts(world.ledger),
                   trace, checkpoint, answers, sent, turns_answered(world.model.requests),
                   torn_cuts)

    def kill_points(self, trace: Sequence | None = None) -> list[KillPoint]:
        """The kill points of the clean run (or of `trace`, a resumed run's course), its
        checkpoint saves named by the scenario's declaration, a large write's torn cuts
        bounded unless it asks for all (killpoints.torn_offsets)."""
        return kill_points(self.trace if trace is None else trace, self.checkpoint,
                           self.torn_cuts)

    def torn_bounded(self) -> list[dict]:
        """The clean run's writes whose torn cuts are bounded (killpoints.torn_bounded)."""
        return torn_bounded(self.trace, self.torn_cuts)


@dataclass
class CrashRun:
    """One explored crash state and what the resumed agent did from it."""

    kill_points: list[KillPoint]  # one per crash (the schedule)
    state: CrashState  # what the last resume found on disk
    world: World
    outcome: Outcome | None = None
    error: str | None = None  # what the resume raised, if it did not finish
    timed_out: bool = False
    final: dict = field(default_factory=dict)  # the sandbox at the end
    after_kill: list[str] = field(default_factory=list)  # how it went on after the kill
    escapes: list[str] = field(default_factory=list)
    # processes of the agent alive after an incarnation ended (subprocess mode)
    left_behind: list[str] = field(default_factory=list)
    strays: list[str] = field(default_factory=list)  # its threads working after run()
    resume_positions: list[int] = field(default_factory=list)  # first model position asked
    events: list = field(default_factory=list)  # the last resumed run's trace

    @property
    def crashes(self) -> int:
        return len(self.kill_points)


def outputs_of(files: dict) -> dict[str, bytes]:
    return {p: d for p, d in files.items() if p.startswith(OUTPUTS) and d is not None}


def effect_attempts(ledger: Ledger) -> int:
    return sum(1 for e in ledger.entries if e.op in EFFECT_OPS)


def checkpoints_in(files: dict, spec: CheckpointSpec = DEFAULT) -> dict[str, bytes]:
    """The checkpoints among a crash state's files, as the scenario declares them (Redis
    values appear as @redis/KEY in subprocess mode): faultsim.core.checkpoints."""
    return {p: d for p, d in files.items() if d is not None and spec.matches(p)}


# -- the guards --------------------------------------------------------------------------
def completes_or_escalates(g: Golden, r: CrashRun) -> Violation | None:
    # `cause`: how it failed, in a word or two (faultsim compare says when it changed)
    if r.timed_out:
        return _violated("completes_or_escalates", f"the resumed agent hung: {r.error}",
                         cause="hang")
    if r.error is not None:
        return _violated("completes_or_escalates",
                         f"the resumed run failed instead of completing: {r.error}",
                         cause=_raised(r.error))
    out = r.outcome
    if out.status == "escalated":
        return None  # an explicit escalation (P11) is a legal stop
    if out.status != "completed":
        return _violated("completes_or_escalates", f"the run ended as {out.status!r}",
                         cause=f"ended as {out.status}")
    if out.final_answer != g.outcome.final_answer:
        return _violated("completes_or_escalates",
                         f"final answer {_short(out.final_answer)} differs from the clean "
                         f"run's {_short(g.outcome.final_answer)}", cause="another answer")
    return None


def _raised(error: str) -> str:
    """`raised KeyError` for an error written `KeyError: ...`, else its first words."""
    name = error.partition(":")[0]
    return f"raised {name}" if name.isidentifier() else error[:40]


def no_silent_restart(g: Golden, r: CrashRun) -> Violation | None:
    """What the model was asked against what the crash state holds: a resumed agent that
    asks for turn 1 although a whole checkpoint holds an answer the model gave (one of its
    tool-use ids, in any format), or a conversation under way (`checkpoints.progress`),
    threw its progress away."""
    if not r.resume_positions or r.resume_positions[0] != 0:
        return None
    for path, data in checkpoints_in(r.state.as_dict(), g.checkpoint).items():
        if progress(g.checkpoint, path, data):
            why = "held a conversation in progress"
        else:
            kept = settled(g.checkpoint, path, data)  # not a JSONL's torn tail
            answer = next((a for a in g.answers if a in kept), None)
            if answer is None or whole(g.checkpoint, path, data) is not None:
                continue
            why = f"held the model's answer {answer.decode()}"
        return _violated("no_silent_restart",
                         f"{path} {why}, yet the resumed agent asked the model for turn 1 "
                         "again: it restarted from zero")
    return None


def effects_exactly_once(g: Golden, r: CrashRun) -> Violation | None:
    diff = effect_difference(g.ledger, r.world.ledger)
    extra, missing = diff["extra"], diff["missing"]
    escalated = r.outcome is not None and r.outcome.status == "escalated"
    if not r.outcome or r.error:
        missing = {}  # the run did not finish: what is missing is the other guard's story
    if escalated:
        missing = {}  # stopping for a person may leave later effects undone
    if not extra and not missing:
        return None
    parts = [f"{effect} applied {n + _golden_count(g, effect)} times, the clean run "
             f"{_golden_count(g, effect)}" for effect, n in sorted(extra.items())]
    parts += [f"{effect} never applied (the clean run applied it {n} time(s))"
              for effect, n in sorted(missing.items())]
    return _violated("effects_exactly_once", "; ".join(parts), extra=dict(extra),
                     missing=dict(missing))


def turns_answered(requests: Sequence) -> dict:
    """(script, position) -> how many times that scripted turn was answered again (`repeat`
    > 0; a reaction to a tool's error, such as a retry, is a new turn of the model's, not a
    re-ask; an answer cut short and its continuation are one answer, as the fake counts)."""
    out: dict = {}
    for q in requests:
        if q.ok and q.repeat > 0 and q.position is not None and \
                not getattr(q, "reaction", None):
            out[(q.script, q.position)] = out.get((q.script, q.position), 0) + 1
    return out


def reasks(g: Golden, requests: Sequence) -> set[int]:
    """The indices of the requests that asked a model turn again beyond what the clean run
    asked it again: per turn, the re-asks past the clean run's own (the later ones). With a
    clean run that re-asks nothing these are the answers with `repeat > 0`."""
    seen: dict = {}
    out = set()
    for q in requests:
        if q.ok and q.repeat > 0 and q.position is not None and \
                not getattr(q, "reaction", None):
            slot = (q.script, q.position)
            seen[slot] = seen.get(slot, 0) + 1
            if seen[slot] > g.answered.get(slot, 0):
                out.add(q.index)
    return out


def reasked_turns(g: Golden, requests: Sequence) -> int:
    """How many model turns were asked again beyond the clean run's own re-asks."""
    return len(reasks(g, requests))


def resent_by_reasked_turns(ledger: Ledger, reasked: set[int]) -> int:
    """Effect attempts that are part of a re-asked turn's repeat: each carries out a
    re-asked answer (the last request before it is one of `reasked`), repeats an attempt
    an earlier incarnation made (same service, operation and arguments), and was
    recognised by the receiver (deduplicated by its key, or a set the record already
    held), so it did nothing new. A turn is one step: its answer and the calls it names,
    redone together (docs/reference/invariants.md). A re-sent call the receiver applied
    again stays a step of its own (and a duplicate, `effects_exactly_once`).
    Bound: the turn an attempt belongs to is the last one asked before it, which holds for
    a loop that asks one turn at a time; a call of a sub-agent interleaved with its
    parent's turns may be given to the wrong turn, and then counts as a step of its own
    (stricter, never laxer)."""
    first_seen: dict = {}  # (service, op, arguments) -> the first incarnation that tried it
    n = 0
    for e in ledger.entries:
        if e.op not in EFFECT_OPS:
            continue
        first = first_seen.setdefault((e.service, e.op, canonical(e.params)), e.incarnation)
        if e.after_request in reasked and first < e.incarnation and e.outcome in RECOGNISED:
            n += 1
    return n


def one_step_repeated_per_crash(g: Golden, r: CrashRun) -> Violation | None:
    """At most one step redone per crash. A step is a model turn: a re-asked turn counts
    once, with the calls it re-sent that the receiver recognised
    (`resent_by_reasked_turns`); every other extra effect attempt (a call re-run without
    asking its turn again, or re-sent and applied again) counts once."""
    asked_again = reasks(g, r.world.model.requests)
    resent = resent_by_reasked_turns(r.world.ledger, asked_again)
    extra = max(0, effect_attempts(r.world.ledger) - g.effect_attempts - resent)
    repeated = extra + len(asked_again)
    if repeated > r.crashes:
        with_resent = f", which re-sent {resent} of their calls" if resent else ""
        return _violated("one_step_repeated_per_crash",
                         f"{repeated} steps were repeated ({extra} extra effect "
                         f"attempts, {len(asked_again)} re-asked model turns{with_resent}) "
                         f"after {r.crashes} crash(es); at most one per crash is allowed",
                         extra_attempts=extra, reasked=len(asked_again), resent=resent,
                         crashes=r.crashes)
    return None


def counters_continue(g: Golden, r: CrashRun) -> Violation | None:
    out = r.outcome
    if out is None or out.status != "completed":
        return None
    problems = []
    if out.turns is not None and g.outcome.turns is not None and out.turns != g.outcome.turns:
        problems.append(f"turns ended at {out.turns}, the clean run at {g.outcome.turns}")
    if out.tokens_used is not None and g.outcome.tokens_used is not None:
        billed = sum(q.input_tokens + q.output_tokens for q in r.world.model.requests if q.ok)
        if not g.outcome.tokens_used <= out.tokens_used <= billed:
            problems.append(f"tokensUsed ended at {out.tokens_used}; the clean run spent "
                            f"{g.outcome.tokens_used} and this run was billed {billed}")
    if problems:
        return _violated("counters_continue", "; ".join(problems) +
                         " (counters must continue from the stored values)")
    return None


def progress_recorded_once(g: Golden, r: CrashRun) -> Violation | None:
    out = r.outcome
    if out is None or out.status != "completed" or out.steps is None or g.outcome.steps is None:
        return None
    if out.steps != g.outcome.steps:
        return _violated("progress_recorded_once",
                         f"the run reports {out.steps} completed steps, the clean run "
                         f"{g.outcome.steps}: a step was logged twice or lost")
    return None


def checkpoint_whole(g: Golden, r: CrashRun) -> Violation | None:
    for path, data in checkpoints_in(r.state.as_dict(), g.checkpoint).items():
        why = whole(g.checkpoint, path, data)
        if why:
            return _violated("checkpoint_whole",
                             f"at the kill, {path} on disk was not one whole version: {why} "
                             f"({len(data)} bytes: {_bytes(data)})", path=path)
    return None


def no_work_after_kill(g: Golden, r: CrashRun) -> Violation | None:
    if r.after_kill:
        return _violated("no_work_after_kill",
                         "the killed incarnation caught the kill and went on: " +
                         r.after_kill[0] + " (a killed process does nothing further; catch "
                         "`Exception`, or re-raise a `BaseException`)")
    return None


def api_valid(g: Golden, r: CrashRun) -> Violation | None:
    bad = r.world.model.invalid_requests
    if bad:
        return _violated("api_valid", f"the API refused {len(bad)} request(s) with 400 "
                         f"invalid_request_error: {bad[0].message}", cause="HTTP 400")
    return None


def outputs_match(g: Golden, r: CrashRun) -> Violation | None:
    if r.outcome is None or r.outcome.status != "completed":
        return None
    got = outputs_of(r.final)
    if got == g.outputs:
        return None
    changed = sorted(p for p in set(got) | set(g.outputs) if got.get(p) != g.outputs.get(p))
    return _violated("outputs_match", "outputs differ from the clean run's: " +
                     ", ".join(f"{p} ({_size(got.get(p))} vs {_size(g.outputs.get(p))} bytes)"
                               for p in changed[:5]))


def no_sandbox_escape(g: Golden, r: CrashRun) -> Violation | None:
    if r.escapes:
        return _violated("no_sandbox_escape", "the agent wrote outside its "
                         "workdir (refused): " + "; ".join(r.escapes[:5]))
    return None


def no_stray_thread(g: Golden, r: CrashRun) -> Violation | None:
    if r.strays:
        return _violated("no_stray_thread", "; ".join(r.strays[:3]) + " (faultsim stopped "
                         "it: nothing it did after run() returned landed; join the threads "
                         "you start before run() returns)", threads=tuple(r.strays))
    return None


def no_unrouted_effect(g: Golden, r: CrashRun) -> Violation | None:
    refused = getattr(r.world, "unrouted", [])
    if refused:
        return _violated("no_unrouted_effect", "the agent reached for a network address "
                         "faultsim does not serve (refused before it connected; an effect "
                         "not routed with faultsim.effect would fire for real once per "
                         "crash run): " + "; ".join(refused[:3]), refused=tuple(refused))
    return None


def no_uncontained_process(g: Golden, r: CrashRun) -> Violation | None:
    refused = getattr(r.world, "processes", [])
    if refused:
        why = getattr(r.world, "processes_why", "")
        return _violated("no_uncontained_process", "the agent started a process faultsim "
                         "cannot contain here (refused before it ran; a tool's `curl`, "
                         "`git push` or helper would act on the real machine once per crash "
                         "run): " + "; ".join(refused[:3]) + (f". {why}" if why else ""),
                         refused=tuple(refused))
    return None


def no_process_left_behind(g: Golden, r: CrashRun) -> Violation | None:
    left = r.left_behind
    if left:
        return _violated("no_process_left_behind", "processes the agent started left "
                         "their incarnation's process group and outlived it (after a real "
                         "crash they would go on acting on a state nobody owns; faultsim "
                         "SIGKILLed them): " +
                         "; ".join(left[:3]), left=tuple(left))
    return None


# Guards that depend on the crash state itself (checked for every state, even when the
# resumed run is known from an equivalent state) and guards on what the resume did.
STATE_GUARDS = (checkpoint_whole, no_silent_restart)
RESUME_GUARDS = (completes_or_escalates, effects_exactly_once, one_step_repeated_per_crash,
                 counters_continue, progress_recorded_once, api_valid, outputs_match,
                 no_sandbox_escape, no_stray_thread, no_unrouted_effect,
                 no_uncontained_process, no_process_left_behind)
GUARDS: tuple[Callable[[Golden, CrashRun], Violation | None], ...] = (
    *STATE_GUARDS, *RESUME_GUARDS, no_work_after_kill)


def judge(g: Golden, r: CrashRun, guards=GUARDS) -> list[Violation]:
    return [v for v in (guard(g, r) for guard in guards) if v is not None]


def unknown_version_refused(r: CrashRun, version: int, changed: dict[str, bytes],
                            applied: int, asked: int) -> Violation | None:
    """P4, judged on the version probe's resumed run: a checkpoint of unknown `version`
    (`changed`: the files rewritten so) must be refused loudly and left untouched; `applied`
    effects and `asked` model turns are what the run did on the strength of it."""
    problems = []
    if r.error is None:
        problems.append(f"the agent resumed from a checkpoint of unknown version "
                        f"{version} instead of refusing it (it ended "
                        f"{r.outcome.status if r.outcome else 'without an outcome'})")
    overwritten = [p for p, d in changed.items() if r.final.get(p) != d]
    if overwritten:
        problems.append(f"{overwritten[0]} was overwritten while being refused or parsed")
    if problems and (applied or asked):
        problems.append(f"{applied} effect(s) applied and {asked} model turn(s) asked on "
                        "the strength of it")
    return _violated("unknown_version_refused", "; ".join(problems)) if problems else None


def _golden_count(g: Golden, effect: str) -> int:
    return g.ledger.effect_counts()[effect]


def _short(text: Any) -> str:
    text = repr(text)
    return text if len(text) < 70 else text[:66] + "...'"


def _size(data: bytes | None) -> str:
    return "missing" if data is None else str(len(data))


def _bytes(data: bytes) -> str:
    if not data:
        return "empty"
    if data.strip(b"\0") == b"":
        return "all NUL bytes"
    shown = data[-60:]
    return f"ends with {shown!r}"
