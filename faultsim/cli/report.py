"""`faultsim report html` and `merge`: a saved JSON report in another form, shard reports
joined."""
from __future__ import annotations

import argparse
from pathlib import Path

from .exits import EXIT_OK, EXIT_VIOLATION


def cmd_report_html(ns: argparse.Namespace) -> int:
    from ..html_report import from_json_file

    out = ns.out or str(Path(ns.report).with_suffix(".html"))
    from_json_file(ns.report, out)
    print(f"faultsim: wrote {out}")
    return EXIT_OK


def cmd_report_merge(ns: argparse.Namespace) -> int:
    import json

    from ..report_merge import load, merge

    merged = merge(load(ns.reports))
    if ns.json:
        with open(ns.json, "w", encoding="utf-8") as f:
            json.dump(merged, f, indent=2)
    if ns.html:
        from ..html_report import write_html

        write_html(merged, ns.html)
    if ns.junit or ns.summary_md:
        from ..report_merge import as_report

        report = as_report(merged)
        if ns.junit:
            from ..junit import write_junit

            write_junit(report, ns.junit)
        if ns.summary_md:
            from ..ci import summary_markdown

            with open(ns.summary_md, "a", encoding="utf-8") as f:  # as run --summary-md
                f.write(summary_markdown(report, html=ns.html))
    runs = merged["runs"]
    print(f"faultsim: merged {len(ns.reports)} reports: {len(runs)} run"
          f"{'s' if len(runs) != 1 else ''}, " + ("all passed" if merged["ok"] else
                                               f"{sum(r['violating'] for r in runs)} "
                                               "violating"))
    return EXIT_OK if merged["ok"] else EXIT_VIOLATION
