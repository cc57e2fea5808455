"""What a run leaves besides its text: the --json, --junit, --html and --summary-md
reports (also when a scenario is refused before its verdicts), and saved reports read back."""
from __future__ import annotations

import argparse
from contextlib import contextmanager
from typing import Iterator

from ..errors import AgentFinding, FaultsimError, UsageError


def read_report(path: str) -> dict:
    from ..report_merge import read

    return read(path)


@contextmanager
def refusals_reported(ns: argparse.Namespace, report, scenario: str, agent: str
                       ) -> Iterator[None]:
    """A scenario stopped before its verdicts (the clean run failed or escaped, the
    scenario cannot work, faultsim failed) still leaves --json, --junit and --summary-md,
    with the refusal as their content (CI reads a report, not stderr); the error then
    goes on to `main`, which prints its one line and exits as it always did."""
    from ..report import Refusal

    try:
        yield
    except FaultsimError as exc:
        category = ("finding" if isinstance(exc, AgentFinding) else
                    "usage" if isinstance(exc, UsageError) else "harness")
        report.refused.append(Refusal(str(scenario), agent, type(exc).__name__, category,
                                      str(exc), getattr(exc, "details", "") or ""))
        write_reports(ns, report)
        raise


def write_reports(ns: argparse.Namespace, report) -> None:
    import json

    if ns.json:
        with open(ns.json, "w", encoding="utf-8") as f:
            json.dump(report.to_json(), f, indent=2)
    if ns.junit:
        from ..junit import write_junit

        write_junit(report, ns.junit)
    if ns.html:
        from ..html_report import write_html

        write_html(report.to_json(), ns.html)
    if ns.summary_md:
        from ..ci import summary_markdown

        # appended: $GITHUB_STEP_SUMMARY collects a step's summaries
        with open(ns.summary_md, "a", encoding="utf-8") as f:
            f.write(summary_markdown(report, html=ns.html))
