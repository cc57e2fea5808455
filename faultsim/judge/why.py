"""Why a crash state failed, where the trace can tell: a duplicated effect that is the
at-least-once window a framework documents, told apart from one the framework should have
prevented (an ordering bug in its saves). A counterexample prints the sentence after its
VIOLATED lines; the JSON counterexample carries it as `why`.

LangGraph documents that a node or task that had not finished when the process died runs
again on resume (its durable-execution guide: side effects belong in tasks and must be
idempotent, since an unfinished one is re-run; a long tool re-run after SIGKILL is what
langgraph issue #7417 reports). Its tool runs between the
adapter's `tool.start` and `lg.tool.end` marks, so an effect applied in there, with the kill
before the end mark, is that window: no ordering of saves can close it, only the effect's
own protection can (an idempotency key the receiver honours, or an intent record written
before the call and read on the re-run, P11). An effect whose tool had *finished* before the
kill, yet ran again, lost a finished task's result: LangGraph saves a finished task's writes
so that a resume does not run it again, and a crash between the task's end and the save
that keeps its result is an ordering bug of the checkpointer's saves (the langgraph #8039
class), not the documented window.

DBOS and CrewAI flows with `@persist` are step runners of the same kind, told apart by the
tables their SQLite stores leave in the crash state (`tables`: DBOS's system database has
`operation_outputs` and `workflow_status`, CrewAI's SQLiteFlowPersistence `flow_states`).
DBOS records a step's output in a transaction committed after the step returns, and
re-runs on recovery a step whose output it has not recorded (its docs: steps run at least
once); CrewAI's `@persist` saves the flow's state after a method returns, never inside one,
and a restarted flow runs again a method whose state was not saved. So a duplicated effect
whose tool had not returned at the kill, or had returned with no commit since, is that
documented window: nothing could have recorded the step's result. After a commit following
the tool's end faultsim cannot tell from the trace whether that commit held the step's
output, so it says nothing.

Reads the trace and the names of the crash state's SQLite tables only (events:
`faultsim.core.trace.Event`); standard library only.
"""
from __future__ import annotations

from typing import Any, Sequence

LANGGRAPH_WINDOW = (
    "at-least-once by design: LangGraph re-runs a node or task that had not finished when "
    "the process died (the window its durable-execution docs describe; langgraph #7417), "
    "and {tool} was still running at the kill, after {effect} had gone out. No ordering of "
    "saves closes this window: give the call an idempotency key the receiver honours (a "
    "keyed service, `effect(\"{service}\", key=...)`), or record an intent before the call "
    "and look it up on the re-run (P11).")
LANGGRAPH_LOST = (
    "not the documented window: {tool} had finished before the kill, and LangGraph keeps a "
    "finished task's result (its pending writes) so that a resume does not run it again; "
    "here the result was not yet saved and the task ran twice, an ordering bug of the "
    "checkpointer's saves (the langgraph #8039 class: the task's writes saved after, or "
    "together with, the next checkpoint).")


STEP_WINDOW = (
    "at-least-once by design: {runner}, and {tool} {when} at the kill, after {effect} had "
    "gone out, so nothing had recorded its result. No ordering of saves closes this window: "
    "give the call an idempotency key the receiver honours (a keyed service, "
    "`effect(\"{service}\", key=...)`), or record an intent before the call and look it up "
    "on the re-run (P11).")
# a step runner known by its store's tables: (the tables, what it documents)
STEP_RUNNERS = (
    (frozenset({"operation_outputs", "workflow_status"}),
     "DBOS runs a step again on recovery when its output was not recorded (steps run at "
     "least once, as its docs say)"),
    (frozenset({"flow_states"}),
     "CrewAI's @persist saves a flow's state after a method returns, never inside one, and "
     "a restarted flow runs again a method whose state was not saved"),
)


def why(trace: Sequence[Any], kill_index: int, violations: Sequence[Any],
        tables: frozenset[str] = frozenset()) -> str | None:
    """The sentence for a crash state killed after event `kill_index` of `trace`, or None."""
    found = classify(trace, kill_index, violations, tables)
    return found[1] if found else None


def classify(trace: Sequence[Any], kill_index: int, violations: Sequence[Any],
             tables: frozenset[str] = frozenset()) -> tuple[str, str] | None:
    """(`by-design` or `ordering`, the sentence), or None when the trace does not tell.
    Counterexamples of the two are shown apart, as different kinds of failure. `tables`:
    the names of the tables in the crash state's SQLite databases (faultsim.judge.dbview)."""
    dup = next((v for v in violations if v.invariant == "effects_exactly_once"
                and v.fact("extra")), None)
    if dup is None:
        return None
    services = {name.split("(", 1)[0] for name in dup.fact("extra")}
    before = [e for e in trace if e.index <= kill_index]
    if not any(e.kind.startswith("mark.lg.") for e in trace):
        runner = next((says for known, says in STEP_RUNNERS if known <= tables), None)
        return None if runner is None else _step_window(runner, before, services)
    start = next((e for e in reversed(before) if e.kind == "mark.tool.start"), None)
    if start is not None:
        ended = any(e.kind in ("mark.lg.tool.end", "mark.tool.end") and e.index > start.index
                    for e in before)
        applied = [e for e in before if e.index > start.index and e.kind == "effect.applied"
                   and e.subject in services]
        if applied and not ended:
            effect = applied[-1].subject
            return "by-design", LANGGRAPH_WINDOW.format(
                tool=start.subject, effect=effect, service=effect.split(".", 1)[0])
    # the last tool that applied a duplicated effect and ended before the kill, with no
    # checkpoint saved after its end (else the resume started past it: another story)
    for end in reversed(before):
        if end.kind not in ("mark.lg.tool.end", "mark.tool.end"):
            continue
        opened = next((e for e in reversed(before) if e.index < end.index
                       and e.kind == "mark.tool.start"), None)
        if opened is None or not any(opened.index < e.index < end.index
                                     and e.kind == "effect.applied" and e.subject in services
                                     for e in before):
            continue
        if any(e.index > end.index and e.kind == "mark.lg.put" for e in before):
            return None
        return "ordering", LANGGRAPH_LOST.format(tool=end.subject)
    return None


def _step_window(runner: str, before: list, services: set) -> tuple[str, str] | None:
    """The step runner's window, where the trace shows that nothing recorded the step: the
    last tool before the kill applied a duplicated effect and had not returned, or had
    returned with no commit since (a record of its result needs one)."""
    start = next((e for e in reversed(before) if e.kind == "mark.tool.start"), None)
    if start is None:
        return None
    applied = [e for e in before if e.index > start.index and e.kind == "effect.applied"
               and e.subject in services]
    if not applied:
        return None
    end = next((e for e in before if e.index > start.index and e.kind == "mark.tool.end"),
               None)
    if end is None:
        when = "was still running"
    elif not any(e.index > end.index and e.kind == "sqlite.commit" for e in before):
        when = "had returned, its result not yet committed,"
    else:
        return None
    effect = applied[-1].subject
    return "by-design", STEP_WINDOW.format(runner=runner, tool=start.subject, when=when,
                                           effect=effect, service=effect.split(".", 1)[0])
