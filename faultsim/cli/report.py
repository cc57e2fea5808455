"""`faultsim report html` and `merge`: a saved JSON report in another form, shard reports
joined."""
from __future__ import annotations

import argparse
from pathlib import Path

from ..reports.outfile import check_writable
from .exits import EXIT_OK, EXIT_VIOLATION
from .output import Output, check_outputs, write_outputs


def cmd_report_html(ns: argparse.Namespace) -> int:
    from ..reports.html import from_json_file

    out = ns.out or str(Path(ns.report).with_suffix(".html"))
    check_writable(out, "--out")
    from_json_file(ns.report, out)
    print(f"faultsim: wrote {out}")
    return EXIT_OK


def cmd_report_merge(ns: argparse.Namespace) -> int:
    from ..reports.merge import load, merge

    check_outputs(ns)
    merged = merge(load(ns.reports))
    write_outputs(merged_outputs(ns, merged))
    runs = merged["runs"]
    print(f"faultsim: merged {len(ns.reports)} reports: {len(runs)} run"
          f"{'s' if len(runs) != 1 else ''}, " + ("all passed" if merged["ok"] else
                                               f"{sum(r['violating'] for r in runs)} "
                                               "violating"))
    return EXIT_OK if merged["ok"] else EXIT_VIOLATION


def merged_outputs(ns: argparse.Namespace, merged: dict) -> list[Output]:
    """The files a merged report is written to (--json, --html, --junit, --summary-md):
    `report merge`'s and `run --ray`'s."""
    import json

    outputs = []
    if ns.json:
        outputs.append(Output("--json", ns.json, lambda: json.dumps(merged, indent=2)))
    if ns.html:
        from ..reports.html import render

        outputs.append(Output("--html", ns.html, lambda: render(merged)))
    if ns.junit or ns.summary_md:
        from ..reports.ci import summary_markdown
        from ..reports.junit import junit_xml
        from ..reports.merge import as_report

        report = as_report(merged)
        if ns.junit:
            outputs.append(Output("--junit", ns.junit, lambda: junit_xml(report)))
        if ns.summary_md:  # appended, as run --summary-md
            outputs.append(Output("--summary-md", ns.summary_md,
                                  lambda: summary_markdown(report, html=ns.html), append=True))
    return outputs
