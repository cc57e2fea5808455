"""The GitHub Action's one step (`action.yml` at the repository root runs
`python -m faultsim.cli.ci_action`): read the action's inputs from the environment, run
`faultsim run` with a JSON report, a JUnit file, the HTML report, the Markdown summary appended to
`$GITHUB_STEP_SUMMARY` and `::error` annotations, and hand the report's paths to the next
steps through `$GITHUB_OUTPUT`. Its exit status is `faultsim run`'s (0, 1, 2, 3: docs/reference/exit-codes.md).

Inputs (each optional; empty means the project's [tool.faultsim] setting, else faultsim's
default):

    INPUT_SCENARIOS    scenario files or folders, separated by spaces or new lines
    INPUT_AGENT        the agent factory, MODULE[:ATTR] or FILE.py[:ATTR]
    INPUT_CRASH_MODEL  process, power, pause (in process and for cmd: agents) or all
    INPUT_SHARD        I/N: this job's share of every scenario's kill points
    INPUT_BUDGET       seconds for the hypothesis search of schedules beyond the exhaustive
                       sweep (faultsim run --search-seconds; the sweep itself is not cut)
    INPUT_BASELINE     a JSON report of an earlier run (the main branch's): the job fails
                       only for crash states this run adds failing, and names them
                       (faultsim run --baseline)
    INPUT_ARGS         more `faultsim run` options, split as a shell would
    INPUT_REPORT_DIR   where report.json, junit.xml and report.html go (default:
                       faultsim-report)
    INPUT_HTML         "false": no HTML report (default: written, and uploaded)

Testable off GitHub: every path comes from the environment given to `main`.
"""
from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path


def command(env: dict[str, str]) -> tuple[list[str], dict[str, str]]:
    """The `faultsim` arguments the inputs ask for, and the outputs to publish."""
    get = lambda name: env.get(f"INPUT_{name}", "").strip()  # noqa: E731
    out_dir = Path(get("REPORT_DIR") or "faultsim-report")
    shard = get("SHARD")
    suffix = "-shard-" + shard.replace("/", "-of-") if shard else ""
    report, junit = out_dir / f"report{suffix}.json", out_dir / f"junit{suffix}.xml"
    html = out_dir / f"report{suffix}.html"
    args = ["run", *get("SCENARIOS").split()]
    for flag, name in (("--agent", "AGENT"), ("--crash-model", "CRASH_MODEL"),
                       ("--shard", "SHARD"), ("--search-seconds", "BUDGET"),
                       ("--baseline", "BASELINE")):
        if get(name):
            args += [flag, get(name)]
    args += shlex.split(get("ARGS"))
    args += ["--json", str(report), "--junit", str(junit), "--annotations"]
    if get("HTML").lower() not in ("false", "0", "no"):
        args += ["--html", str(html)]
    if env.get("GITHUB_STEP_SUMMARY"):
        args += ["--summary-md", env["GITHUB_STEP_SUMMARY"]]
    outputs = {"report": str(report), "junit": str(junit), "report-dir": str(out_dir),
               "html": str(html) if "--html" in args else "",
               "artifact-name": "faultsim-report" + suffix}
    return args, outputs


def main(env: dict[str, str] | None = None) -> int:
    from . import main as faultsim

    env = dict(os.environ) if env is None else env
    args, outputs = command(env)
    Path(outputs["report-dir"]).mkdir(parents=True, exist_ok=True)
    print("faultsim " + shlex.join(args), flush=True)
    status = faultsim(args)
    outputs["exit-code"] = str(status)
    if env.get("GITHUB_OUTPUT"):
        with open(env["GITHUB_OUTPUT"], "a", encoding="utf-8") as f:
            f.writelines(f"{key}={value}\n" for key, value in outputs.items())
    return status


if __name__ == "__main__":
    sys.exit(main())
