"""The report in words: a counterexample as a person reads it, the table `faultsim run`
ends with and the lines under it, and each crash state's verdict in a row (what `compare`
and the adapters' tables read). The report's data (`report`) knows nothing of this module
but delegates its text methods to it; this module reads the data by its attributes only.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .counts import HEADER
from .crashmap import why_of
from .identity import identities, identity

if TYPE_CHECKING:
    from ..killpoints import KillPoint
    from .report import ModelRun, Report, Verdict

TRACE_CONTEXT = 3  # events shown on each side of a kill


def first_request(verdict: "Verdict") -> dict[str, Any] | None:
    """What the resumed run first sent the model, beside what the clean run sent for the
    same turn: `{"incarnation", "turn", "messages", "clean", "diff"}` (`clean` None when
    the clean run never asked for that turn; `diff` the lines that differ, `-` the clean
    run's, `+` the resumed run's)."""
    import difflib

    run = verdict.resume
    first = getattr(run, "first", ()) if run is not None else ()
    if not first:
        return None
    incarnation, script, position, turn, sent = first
    clean = getattr(verdict.golden, "sent", {}).get((script, position))
    diff = None if clean is None else [
        line for line in difflib.unified_diff(list(clean), list(sent), lineterm="", n=0)
        if line[:1] in "-+" and not line.startswith(("---", "+++"))]
    return {"incarnation": incarnation, "turn": turn, "messages": list(sent),
            "clean": None if clean is None else list(clean), "diff": diff}


def counterexample(model_run: "ModelRun", verdict: "Verdict") -> str:
    """One failing crash state or schedule as a person reads it: the schedule, each rule
    broken and why, the traces around each kill, what was on disk, what the resumed run did
    differently, and the commands that replay it."""
    point, golden = verdict.kill_point, verdict.golden
    lines = [f"{model_run.scenario.id} / {model_run.agent} / crash model "
             f"{model_run.crash_model}"]
    crashes = [(e.point, e.persisted) for e in verdict.earlier]
    crashes.append((point, verdict.persisted))
    # crash k killed the first run (k = 1) or the run resumed after crash k - 1
    traces = [golden.trace] + [list(e.next_trace) for e in verdict.earlier]
    if len(crashes) == 1:
        lines.append(f"kill point {point.describe()}")
        if model_run.crash_model == "power":
            lines.append(f"after power loss: {verdict.persisted}")
    else:
        lines.append(f"schedule of {len(crashes)} crashes:")
        for k, (p, persisted) in enumerate(crashes, 1):
            who = "the first run" if k == 1 else f"resumed run {k - 1}"
            lines.append(f"  crash {k}, in {who}: {p.describe()}")
            if model_run.crash_model == "power":
                lines.append(f"    after power loss: {persisted}")
    downtime = getattr(getattr(model_run.scenario, "profile", None), "downtime", 0)
    if downtime:
        from ..scenario import format_duration

        lines.append(f"downtime before each restart: {format_duration(downtime)} "
                     "(the scenario's fault profile)")
    for v in verdict.violations:
        lines.append(f"VIOLATED {v.invariant} ({v.rule}): {v.explanation}")
    reason = why_of(verdict)
    if reason:
        lines.append(f"why: {reason[1]}")
    for k, ((p, _), trace) in enumerate(zip(crashes, traces), 1):
        who = ("the clean run" if k == 1 else
               f"resumed run {k - 1} (its clean course)")
        lines.append(f"trace of {who} around {'the kill' if len(crashes) == 1 else f'crash {k}'}:")
        lines += _excerpt(trace, p)
    files = verdict.state.as_dict()
    from ..judge.oracle import checkpoints_in

    spec = getattr(verdict.golden, "checkpoint", None)
    checkpoints = checkpoints_in(files, spec) if spec is not None else checkpoints_in(files)
    at = "the kill" if len(crashes) == 1 else "the last kill"
    from ..judge import dbview

    dbs = dbview.databases(files)  # a database store shows what it holds, not bytes
    lines.append(f"checkpoint on disk at {at}:" if checkpoints or dbs
                 else f"checkpoint on disk at {at}: none")
    for path, data in checkpoints.items():
        if path in dbs:
            continue
        lines.append(f"    {path} ({len(data)} bytes): {_preview(data)}")
    for path in dbs:
        lines.append(f"    {path} ({len(files[path])} bytes, SQLite"
                     + "".join(f", {s} {len(files[path + s])} bytes"
                               for s in dbview.SIDE_FILES
                               if isinstance(files.get(path + s), bytes)) + "):")
        lines += [f"      {line}" for line in dbview.describe(files, path)]
    keys = [p for p in files if p.startswith("@redis/") and p not in checkpoints]
    if any(p.startswith("@redis") for p in files):
        lines.append(f"redis keys at {at}: " + (", ".join(
            f"{p[len('@redis/'):]} ({len(files[p])} bytes)" for p in keys[:6])
            or "no others"))
    run = verdict.resume
    if run is not None:
        from ..world import effect_difference

        diff = effect_difference(golden.ledger, run.ledger)
        if run.outcome is None or run.outcome.status != "completed":
            diff["missing"] = {}  # a run that stopped early misses the rest: no news
        if diff["extra"] or diff["missing"]:
            lines.append(f"ledger difference: extra {diff['extra'] or '{}'}, "
                         f"missing {diff['missing'] or '{}'}")
        if getattr(run, "asked", ()):
            lines.append("the resumed run asked the model for: " + ", ".join(run.asked[:12])
                         + (" ..." if len(run.asked) > 12 else ""))
        lines += _first_request_lines(verdict)
        resumed = [e for e in run.ledger.entries if e.incarnation > 1]
        if resumed:
            lines.append("the resumed incarnations' calls to the world:"
                         if len(crashes) > 1 else
                         "the resumed incarnation's calls to the world:")
            lines += [f"    {e.describe()}" for e in resumed[:10]]
        if run.error is not None:
            lines.append(f"resumed run failed: {run.error}")
        if run.outcome is not None:
            lines.append(f"resumed run ended: {run.outcome.status}, final answer "
                         f"{(run.outcome.final_answer or '')[:80]!r}")
    rerun = model_run.rerun_command(verdict)
    lines.append(f"replay: {model_run.replay_command(verdict)}")
    if rerun and rerun != model_run.replay_command(verdict):
        lines.append(f"   or: {rerun}" + (" (every wake point of this pause point)"
                                          if verdict.crash_model == "pause" else ""))
    return "\n".join(lines)


def states(run: "ModelRun") -> list[list[str]]:
    """`[identity, kill point id, verdict, how]` per crash state of `run` (verdict:
    `passed`, `escalated`, or the invariants violated joined with `+`; how: a failure in
    words, each invariant's cause where its guard names one, "" for a pass), then each
    failing schedule of several crashes, its crashes' identities joined with ` then ` (a
    crash after the first named on the course of the run it killed, where the sweep kept
    it)."""
    def verdict_of(v: "Verdict") -> str:
        if v.violations:
            return "+".join(dict.fromkeys(x.invariant for x in v.violations))
        return "escalated" if v.escalated else "passed"

    def how(v: "Verdict") -> str:  # "hang", "HTTP 400, raised BadRequestError": compare's
        return ", ".join(dict.fromkeys(x.fact("cause") or x.invariant for x in v.violations))

    if not run.verdicts:
        names = []
    else:
        names = identities([(v.kill_point, v.order) for v in run.verdicts],
                           run.verdicts[0].golden.trace, run.crash_model)
    out = [[n, v.kill_point.id, verdict_of(v), how(v)] for n, v in zip(names, run.verdicts)]
    for v in run.deep_failures:
        traces = [v.golden.trace] + [e.next_trace for e in v.earlier]
        steps = [(e.point, e.order) for e in v.earlier] + [(v.kill_point, v.order)]
        parts = [identity(p, t, run.crash_model, o) for (p, o), t in zip(steps, traces)]
        out.append([" then ".join(parts), " ".join(p.id for p, _ in steps), verdict_of(v),
                    how(v)])
    return out


def _first_request_lines(verdict: "Verdict") -> list[str]:
    found = first_request(verdict)
    if found is None:
        return []
    who = "the resumed run" if not verdict.earlier else f"resumed run {found['incarnation'] - 1}"
    lines = [f"{who}'s first request to the model ({found['turn']}; abridged):"]
    lines += [f"    {m}" for m in found["messages"]]
    if found["clean"] is None:
        lines.append("  the clean run sent no request for that turn")
    elif not found["diff"]:
        lines.append("  the same as the clean run's request for that turn")
    else:
        lines.append("  differs from the clean run's request for that turn "
                     "(- clean, + resumed):")
        lines += [f"    {d}" for d in found["diff"][:12]]
    return lines


def _excerpt(trace: list, point: "KillPoint") -> list[str]:
    lines = []
    lo, hi = max(1, point.index - TRACE_CONTEXT), point.index + TRACE_CONTEXT
    for event in trace[lo - 1:hi]:
        here = ("  >> killed inside this write" if point.torn and event.index == point.index
                else "")
        lines.append(f"    {event.describe()}{here}")
        if not point.torn and event.index == point.index:
            lines.append("    ---- KILL ----")
    if point.index == 0:
        lines.insert(0, "    ---- KILL (before the first event) ----")
    return lines


def _preview(data: bytes | None) -> str:
    if data is None:
        return "(a directory)"
    if not data:
        return "empty"
    if len(data) <= 160:
        return repr(data)
    return f"{data[:80]!r} ... {data[-60:]!r}"


# the summary table's columns (text, Markdown and HTML alike)
TABLE_HEAD = ("scenario", "crash model", *HEADER, "time")


def horizon_line_of(block: dict | None, resumed: int) -> str | None:
    """A run's `horizon` block (--horizon) in one line: what was assumed, not run."""
    if not block:
        return None
    deep = sum(block.get("schedules_cut", {}).values())
    past = sum(block.get("schedules_past_cut", {}).values())
    h = block["requests"]
    return (f"horizon {h}: {block['crash_states_cut']} of {resumed} resumed runs"
            + (f" (and {deep} after two crashes)" if deep else "")
            + f" were cut past their first {h} model request(s) after recovery, the rest of "
            "each course taken from the clean run's, not run: a violation that would show "
            "only later is not seen"
            + (f"; {past} second-crash kill point(s) past such cuts were taken as the "
               "clean run's crashes there, not crashed" if past else ""))


def coverage_lines(runs: list) -> list[str]:
    """What each representative run covered, said under the table (faultsim.core.classes): a
    representative run never passes for an exhaustive one; nor does a run cut at a
    horizon (--horizon) pass for one that ran every resumed run to its end."""
    out = []
    for run in runs:
        for line in (run.coverage_line(), run.horizon_line()):
            if line is not None:
                out.append(f"{run.scenario.id} [{run.crash_model}]: {line}")
    return out


def shard_lines(runs: list) -> list[str]:
    """What a shard's table counts, said under it (a shard judges part of the run)."""
    shards = sorted({tuple(run.shard) for run in runs if getattr(run, "shard", None)})
    return [f"shard {i}/{n}: each row counts the kill points where this shard judged a "
            "crash state; `faultsim report merge` joins the shards' --json reports"
            for i, n in shards]


def rows(report: "Report") -> list[tuple[str, ...]]:
    """Per run, the cells of the summary table (`TABLE_HEAD`): scenario, crash model,
    the counts of faultsim.reports.counts.TABLE, seconds."""
    rows = []
    for run in report.runs:
        name = run.scenario.id + (f" [{run.agent.partition(':')[2]}]"
                                  if run.agent.startswith("langgraph:") else "")
        rows.append((name, run.crash_model, *run.counts().cells(),
                     f"{run.seconds:.1f}s"))
    return rows


def summary(report: "Report") -> str:
    """The table `faultsim run` ends with: per scenario and crash model, its kill points
    by verdict (faultsim.reports.counts: judged, then passed, failed with one crash, failed
    only with 2 or more) and the seconds; the failing crash states and schedules are
    counted in each run's header above it."""
    head, body = TABLE_HEAD, rows(report)
    widths = [max(len(r[i]) for r in [head, *body]) for i in range(len(head))]
    lines = [report.partial.headline()] if report.partial else []
    for row in [head, *body]:
        cells = [c.ljust(w) if i < 2 else c.rjust(w)
                 for i, (c, w) in enumerate(zip(row, widths))]
        lines.append("  ".join(cells).rstrip())
    lines += shard_lines(report.runs)
    lines += coverage_lines(report.runs)
    failed = sum(1 for run in report.runs if not run.ok)
    scenarios = len({run.scenario.path for run in report.runs})
    lines.append(f"{scenarios} scenario{'s' if scenarios != 1 else ''}, "
                 f"{len(report.runs)} run{'s' if len(report.runs) != 1 else ''}: "
                 + ("partial: " if report.partial else "")
                 + ("all passed" if not failed else f"{failed} with violations")
                 + (" so far" if report.partial else ""))
    return "\n".join(lines)
