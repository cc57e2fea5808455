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

Reads the trace only (events: `faultsim.trace.Event`); standard library only.
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


def why(trace: Sequence[Any], kill_index: int, violations: Sequence[Any]) -> str | None:
    """The sentence for a crash state killed after event `kill_index` of `trace`, or None."""
    found = classify(trace, kill_index, violations)
    return found[1] if found else None


def classify(trace: Sequence[Any], kill_index: int, violations: Sequence[Any]
             ) -> tuple[str, str] | None:
    """(`by-design` or `ordering`, the sentence), or None when the trace does not tell.
    Counterexamples of the two are shown apart, as different kinds of failure."""
    dup = next((v for v in violations if v.invariant == "effects_exactly_once"
                and v.fact("extra")), None)
    if dup is None or not any(e.kind.startswith("mark.lg.") for e in trace):
        return None
    services = {name.split("(", 1)[0] for name in dup.fact("extra")}
    before = [e for e in trace if e.index <= kill_index]
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
