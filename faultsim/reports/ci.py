"""What `faultsim run` tells a CI service besides its exit status: a Markdown summary
(`--summary-md`, for `$GITHUB_STEP_SUMMARY`) and GitHub workflow-command annotations
(`--annotations`, on by itself when `GITHUB_ACTIONS=true`), one `::error` per failing
scenario × crash model × invariant, pointing at the scenario file, with the replay command.
"""
from __future__ import annotations

import os
from pathlib import Path

from .counts import failing_in_words
from .report import RULES, SEVERITY, ModelRun, Report, Verdict
from .text import TABLE_HEAD, coverage_lines, shard_lines


def escape_data(text: str) -> str:
    """A workflow command's message, as GitHub reads it (`%`, CR and LF encoded)."""
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(text: str) -> str:
    """A workflow command's property value (`file=`, `title=`): also `:` and `,`, which
    would end the value."""
    return escape_data(text).replace(":", "%3A").replace(",", "%2C")


def _workspace_path(path: str) -> str:
    """The scenario file as GitHub names files: relative to the checkout when inside it."""
    root = os.environ.get("GITHUB_WORKSPACE")
    absolute = Path(path).resolve()
    for base in ([Path(root).resolve()] if root else []) + [Path.cwd().resolve()]:
        try:
            return absolute.relative_to(base).as_posix()
        except ValueError:
            continue
    return path


def _failing(run: ModelRun, invariant: str) -> list[Verdict]:
    return [v for v in run.failures if any(x.invariant == invariant for x in v.violations)]


def annotations(report: Report) -> list[str]:
    """One `::error file=...,title=...::message` line per failing scenario × crash model ×
    invariant: how many crash states (or schedules) break it, the first one's explanation,
    and the command that replays it."""
    lines = []
    for run in report.runs:
        for invariant in SEVERITY:
            failing = _failing(run, invariant)
            if not failing:
                continue
            first = failing[0]
            explanation = next(x.explanation for x in first.violations
                               if x.invariant == invariant)
            title = (f"faultsim: {run.scenario.id} [{run.crash_model}] violates {invariant} "
                     f"({RULES[invariant]})")
            message = (f"{failing_in_words(run, failing)} {invariant} "
                       f"({RULES[invariant]}), "
                       f"agent {run.agent}: {explanation}\n"
                       f"replay: {run.replay_command(first)}")
            lines.append(f"::error file={escape_property(_workspace_path(run.scenario.path))},"
                         f"title={escape_property(title)}::{escape_data(message)}")
    return lines


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _fence(text: str) -> str:
    """A fence longer than any backtick run inside `text`."""
    longest = run = 0
    for c in text:
        run = run + 1 if c == "`" else 0
        longest = max(longest, run)
    return "`" * max(3, longest + 1)


def html_link(html: str) -> str:
    """The Markdown line pointing at the HTML report: on GitHub, at the run's artifacts
    (where the Action uploads it: a job summary cannot link into an artifact's files);
    elsewhere, at the file."""
    server, repo, run_id = (os.environ.get(k) for k in ("GITHUB_SERVER_URL",
                                                         "GITHUB_REPOSITORY", "GITHUB_RUN_ID"))
    what = "The HTML report (the crash map, every counterexample)"
    if server and repo and run_id:
        return (f"{what}: `{Path(html).name}` in this run's "
                f"[artifacts]({server}/{repo}/actions/runs/{run_id}#artifacts).")
    target = Path(html).as_posix()
    if any(c in target for c in " ()<>"):
        target = f"<{target}>"  # CommonMark's form for a destination with spaces
    return f"{what}: [{_cell(Path(html).name)}]({target})."


def summary_markdown(report: Report, html: str | None = None) -> str:
    """The run as Markdown: one table row per scenario × crash model, then the first
    counterexample of each failing run and the command that replays it; `html`, the HTML
    report's path, linked under the heading."""
    failed = [run for run in report.runs if not run.ok]
    lines = ["## faultsim: " + (report.partial.headline() if report.partial else
                                f"refused ({report.refused[0].kind})"
                                if report.refused else "all passed" if not failed else
                                f"{len(failed)} of {len(report.runs)} runs with violations"),
             "", *([html_link(html), ""] if html else [])]
    if report.runs or not report.refused:
        # the text table's columns (text.TABLE_HEAD, faultsim.reports.counts)
        lines += ["| " + " | ".join(TABLE_HEAD) + " |",
                  "|---|---|" + "--:|" * (len(TABLE_HEAD) - 2)]
    for run, (name, model, points, passed, failed_, deeper, _) in zip(report.runs,
                                                                      report.rows()):
        # measured per exploration (crash models swept together are not timed apart)
        seconds = "" if not run.wall_seconds else f"{run.wall_seconds:.1f}s"
        bold = [c if c in ("0", "-") else f"**{c}**" for c in (failed_, deeper)]
        lines.append(f"| {_cell(name)} | {model} | {points} | {passed} | {bold[0]} | "
                     f"{bold[1]} | {seconds} |")
    shards = shard_lines(report.runs)  # a shard counts what it judged: said under it
    if shards:
        lines += ["", *shards]
    for line in coverage_lines(report.runs):  # a representative run says what it left out
        lines += ["", line]
    if any(run.wall_seconds for run in report.runs):
        lines += ["", "Time is measured per scenario exploration, on its first row: the "
                  "crash models of one scenario are swept together."]
    for run in failed:
        first = run.failures[0]
        text = run.counterexample(first)
        fence = _fence(text)
        counts = run.counts()
        lines += ["", f"### {_cell(run.scenario.id)} [{run.crash_model}]: "
                  f"{counts.violating} violation{'s' if counts.violating != 1 else ''} "
                  f"({counts.failing()})",
                  "", f"`{run.scenario.path}`, agent `{run.agent}`; the first counterexample:",
                  "", fence, text, fence, "", "Replay it:", "", "```sh",
                  run.replay_command(first), "```"]
    for refusal in report.refused:  # stopped before any verdict: what stopped it
        text = refusal.details or refusal.message
        fence = _fence(text)
        lines += ["", f"### {_cell(refusal.scenario or 'faultsim')}: refused "
                  f"({refusal.kind})", "", f"agent `{refusal.agent}`: {_cell(refusal.message)}"]
        if refusal.details:
            lines += ["", fence, text, fence]
    return "\n".join(lines) + "\n"
