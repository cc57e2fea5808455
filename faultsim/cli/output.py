"""What a run leaves besides its text: the --json, --junit, --html and --summary-md
reports (also when a scenario is refused before its verdicts, and when the run is
interrupted: then marked partial), their paths checked before any work, each written
atomically (faultsim.reports.outfile), and saved reports read back."""
from __future__ import annotations

import argparse
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable, Iterable, Iterator

from ..errors import AgentFinding, FaultsimError, HarnessError, UsageError
from ..reports.interrupted import partial_reason
from ..reports.outfile import OutputError, append_atomic, check_writable, write_atomic

# the report options of `faultsim run` (and `report merge`): namespace attribute, flag
REPORTS = (("json", "--json"), ("junit", "--junit"), ("html", "--html"),
           ("summary_md", "--summary-md"))


class OutputsFailed(HarnessError):
    """Reports that could not be written (a full disk, a folder gone since the check): one
    line each, naming the option and the file; every other report was written."""

    def __init__(self, lines: list[str]) -> None:
        super().__init__("\n".join(lines))
        self.lines = lines


@dataclass(frozen=True)
class Output:
    """One file a command leaves: the option that names it, its path, its content (made
    when written), and whether it is appended to ($GITHUB_STEP_SUMMARY collects a job's
    steps' summaries) rather than replaced."""

    option: str
    path: str
    content: Callable[[], str | bytes]
    append: bool = False


def check_outputs(ns: argparse.Namespace, options: Iterable[tuple[str, str]] = REPORTS
                  ) -> None:
    """Refuse an output path that cannot be written before any work (exit 2, one line
    naming the option and the path): a typo must not cost a sweep."""
    for attr, option in options:
        path = getattr(ns, attr, None)
        if path:
            check_writable(path, option)


def write_outputs(outputs: Iterable[Output]) -> None:
    """Write each output atomically. One that fails (a full disk) does not skip the others:
    all are tried, then OutputsFailed names each one that failed (exit 3)."""
    failed = []
    for out in outputs:
        try:
            content = out.content()
            if out.append:
                append_atomic(out.path, content if isinstance(content, str)
                              else content.decode("utf-8"), what=out.option)
            else:
                write_atomic(out.path, content, what=out.option)
        except OutputError as exc:
            failed.append(str(exc))
    if failed:
        raise OutputsFailed(failed)


def read_report(path: str) -> dict:
    from ..reports.merge import read

    return read(path)


def read_baseline(path: str) -> dict:
    """`--baseline REPORT`, read and checked before any work: a report faultsim run --json
    wrote, of a whole run (a partial one lacks the crash states it did not judge, which
    would all look new)."""
    try:
        report = read_report(path)
    except UsageError as exc:
        raise UsageError(f"--baseline {exc}") from None
    why = partial_reason(report)
    if why:
        raise UsageError(f"--baseline {path}: partial: the report of a run cut short "
                         f"({why}); a baseline must be a whole run's report")
    return report


@contextmanager
def refusals_reported(ns: argparse.Namespace, report, scenario: str, agent: str
                       ) -> Iterator[None]:
    """A scenario stopped before its verdicts (the clean run failed or escaped, the
    scenario cannot work, faultsim failed) still leaves --json, --junit and --summary-md,
    with the refusal as their content (CI reads a report, not stderr); the error then
    goes on to `main`, which prints its one line and exits as it always did."""
    from ..reports.report import Refusal

    try:
        yield
    except FaultsimError as exc:
        category = ("finding" if isinstance(exc, AgentFinding) else
                    "usage" if isinstance(exc, UsageError) else "harness")
        report.refused.append(Refusal(str(scenario), agent, type(exc).__name__, category,
                                      str(exc), getattr(exc, "details", "") or ""))
        write_reports_saying(ns, report)
        raise


def report_outputs(ns: argparse.Namespace, report) -> list[Output]:
    """The reports `ns` asks for, of `report` (a Report)."""
    found: dict = {}

    def data() -> dict:  # the JSON and the HTML page share one to_json()
        if "data" not in found:
            found["data"] = report.to_json()
        return found["data"]

    outputs = []
    if ns.json:
        import json

        outputs.append(Output("--json", ns.json, lambda: json.dumps(data(), indent=2)))
    if ns.junit:
        from ..reports.junit import junit_xml

        outputs.append(Output("--junit", ns.junit, lambda: junit_xml(report)))
    if ns.html:
        from ..reports.html import render

        outputs.append(Output("--html", ns.html, lambda: render(data())))
    if ns.summary_md:
        from ..reports.ci import summary_markdown

        outputs.append(Output("--summary-md", ns.summary_md,
                              lambda: summary_markdown(report, html=ns.html), append=True))
    return outputs


def write_reports(ns: argparse.Namespace, report) -> None:
    write_outputs(report_outputs(ns, report))


def write_reports_saying(ns: argparse.Namespace, report) -> None:
    """For a run ending on another error or an interrupt, whose own exit stands: the
    reports that cannot be written are named on stderr, a line each."""
    import sys

    try:
        write_reports(ns, report)
    except OutputsFailed as exc:
        for line in exc.lines:
            print(f"faultsim: error: {line}", file=sys.stderr)
