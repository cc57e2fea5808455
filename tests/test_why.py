"""A duplicated effect that is the at-least-once window LangGraph documents, told apart from
one a finished task should not have had (faultsim.judge.why), on hand-made traces."""
from __future__ import annotations

from faultsim.judge.oracle import Violation
from faultsim.core.trace import Event
from faultsim.judge.why import classify

DUP = [Violation.of("effects_exactly_once", "email twice", extra={'email.send({"to":"a"})': 1},
                    missing={})]


def trace(*kinds: tuple[str, str]) -> list[Event]:
    return [Event(n, kind, subject) for n, (kind, subject) in enumerate(kinds, 1)]


LANGGRAPH = trace(("mark.lg.put", "step 5"), ("mark.tool.start", "send_email"),
                  ("effect.applied", "email.send"), ("mark.lg.writes", "messages"),
                  ("mark.lg.tool.end", "send_email"), ("mark.lg.put", "step 6"))


def test_a_kill_while_the_tool_still_runs_is_the_documented_window():
    for kill in (3, 4):  # after the effect; after an unrelated save inside the tool
        kind, text = classify(LANGGRAPH, kill, DUP)
        assert kind == "by-design" and "#7417" in text and 'effect("email", key=' in text


def test_a_kill_after_the_tool_finished_and_before_the_next_save_is_an_ordering_bug():
    kind, text = classify(LANGGRAPH, 5, DUP)
    assert kind == "ordering" and "#8039" in text and "send_email had finished" in text


def test_no_reason_is_made_up():
    assert classify(LANGGRAPH, 6, DUP) is None  # saved after the tool: another story
    assert classify(LANGGRAPH, 3, [Violation.of("api_valid", "400")]) is None
    plain = trace(("mark.tool.start", "send_email"), ("effect.applied", "email.send"))
    assert classify(plain, 2, DUP) is None  # not a LangGraph run: nothing documented
    other = [Violation.of("effects_exactly_once", "x", extra={"pay.submit({})": 1}, missing={})]
    assert classify(LANGGRAPH, 3, other) is None  # the tool in flight applied another effect


# -- step runners known by their store's tables: DBOS, CrewAI's @persist -------------------

DBOS = frozenset({"operation_outputs", "workflow_status", "dbos_migrations"})
STEP = trace(("sqlite.commit", ""), ("mark.tool.start", "send_email"),
             ("effect.applied", "email.send"), ("mark.tool.end", "send_email"),
             ("sqlite.exec", "INSERT main"), ("sqlite.commit", ""))


def test_a_dbos_step_killed_before_its_output_was_committed_is_its_documented_window():
    for kill, when in ((3, "was still running"), (4, "had returned"), (5, "had returned")):
        kind, text = classify(STEP, kill, DUP, DBOS)
        assert kind == "by-design" and "DBOS" in text and when in text, (kill, text)
        assert 'effect("email", key=' in text


def test_a_crewai_method_killed_before_its_state_was_saved_is_its_documented_window():
    kind, text = classify(STEP, 3, DUP, frozenset({"flow_states"}))
    assert kind == "by-design" and "@persist" in text


def test_a_step_runner_is_named_only_where_the_trace_shows_nothing_recorded_the_step():
    assert classify(STEP, 6, DUP, DBOS) is None  # a commit after the step: may be its output
    assert classify(STEP, 3, DUP, frozenset({"operation_outputs"})) is None  # not DBOS's
    assert classify(STEP, 3, DUP) is None  # no store known: nothing documented
    assert classify(STEP, 1, DUP, DBOS) is None  # no tool had started
    other = [Violation.of("effects_exactly_once", "x", extra={"pay.submit({})": 1}, missing={})]
    assert classify(STEP, 3, other, DBOS) is None  # the step in flight applied another effect


def test_the_tables_are_read_from_the_crash_states_databases(tmp_path):
    import sqlite3

    from faultsim.judge import dbview

    path = tmp_path / "dbos.sqlite"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE operation_outputs (id)")
        conn.execute("CREATE TABLE workflow_status (id)")
    conn.close()
    files = {"dbos.sqlite": path.read_bytes(), "notes.json": b"{}", "sub": None,
             "torn.db": dbview.HEADER + b"\0" * 10}  # a torn database: skipped, not fatal
    assert dbview.tables(files) == {"operation_outputs", "workflow_status"}
    assert dbview.tables({"notes.json": b"{}"}) == frozenset()
