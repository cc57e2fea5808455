"""A JUnit XML report of `faultsim run`, for CI: one test case per scenario × crash model ×
invariant, failed when any crash state or schedule violates that invariant.

Times are measured, never apportioned: the invariants are judged together, and the crash
models of one scenario swept together, so the measured wall time of a scenario's
exploration (`ModelRun.wall_seconds`) goes on the first test case of its first run, and
every other case says 0. A report whose runs were not timed says 0 everywhere."""
from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

from .counts import failing_in_words
from .outfile import write_atomic
from .report import RULES, SEVERITY, ModelRun, Report


def _case(suite: ET.Element, run: ModelRun, invariant: str, seconds: float) -> bool:
    case = ET.SubElement(suite, "testcase", {
        "classname": f"faultsim.{run.scenario.id}.{run.crash_model}",
        "name": f"{invariant} ({RULES[invariant]})",
        "file": run.scenario.path, "time": f"{seconds:.3f}"})
    failing = [v for v in run.failures if any(x.invariant == invariant
                                               for x in v.violations)]
    if not failing:
        return False
    first = failing[0]
    explanation = next(x.explanation for x in first.violations if x.invariant == invariant)
    failure = ET.SubElement(case, "failure", {
        "type": invariant,
        "message": f"{failing_in_words(run, failing)} {invariant} "
                   f"({RULES[invariant]}): {explanation}"})
    failure.text = run.counterexample(first)
    return True


def _counts(run: ModelRun) -> list[tuple[str, object]]:
    """The run's counts (faultsim.reports.counts) as properties, named as the JSON's `counts`
    (`schedules_failed.2`: per number of crashes; an empty value: null)."""
    out: list[tuple[str, object]] = []
    for name, value in run.counts().to_json().items():
        if isinstance(value, dict):
            out += [(f"{name}.{k}", n) for k, n in value.items()]
        else:
            out.append((name, "" if value is None else value))
    return out


def _coverage(run) -> list[tuple[str, object]]:
    """What a representative run covered (faultsim.core.classes): its line, so a CI page never
    shows it as an exhaustive sweep; nothing for an exhaustive run (as before)."""
    line = run.coverage_line()
    return [] if line is None else [("coverage", line)]


def write_junit(report: Report, path: str | Path) -> None:
    write_atomic(path, junit_xml(report), what="--junit")


def junit_xml(report: Report) -> bytes:
    root = ET.Element("testsuites", {"name": "faultsim"})
    total = failed = 0
    seconds = 0.0
    for run in report.runs:
        suite = ET.SubElement(root, "testsuite", {
            "name": f"{run.scenario.id} [{run.crash_model}]"})
        props = ET.SubElement(suite, "properties")
        for name, value in (("scenario", run.scenario.path), ("agent", run.agent),
                            ("crash_model", run.crash_model), ("seed", run.seed),
                            ("crashes", run.crashes), ("kill_points", len(run.explored)),
                            *_counts(run), *_coverage(run)):
            ET.SubElement(props, "property", {"name": name, "value": str(value)})
        measured = run.wall_seconds or 0.0
        suite.set("time", f"{measured:.3f}")
        fails = sum(_case(suite, run, invariant, measured if n == 0 else 0.0)
                    for n, invariant in enumerate(SEVERITY))
        suite.set("tests", str(len(SEVERITY)))
        suite.set("failures", str(fails))
        suite.set("errors", "0")
        total, failed, seconds = total + len(SEVERITY), failed + fails, seconds + measured
    errors = 0
    for refusal in report.refused:  # stopped before any verdict: one case says why
        suite = ET.SubElement(root, "testsuite", {
            "name": f"{Path(refusal.scenario).stem or 'faultsim'} [refused]", "tests": "1",
            "time": "0.000"})
        case = ET.SubElement(suite, "testcase", {
            "classname": f"faultsim.{Path(refusal.scenario).stem or 'run'}",
            "name": "clean run", "file": refusal.scenario, "time": "0.000"})
        # the agent at fault is a failure (as a violation is); a scenario or option that
        # cannot work, or faultsim's own failure, an error
        tag = "failure" if refusal.category == "finding" else "error"
        element = ET.SubElement(case, tag, {"type": refusal.kind,
                                            "message": refusal.message})
        element.text = refusal.details or refusal.message
        suite.set("failures", "1" if tag == "failure" else "0")
        suite.set("errors", "1" if tag == "error" else "0")
        total, failed, errors = total + 1, failed + (tag == "failure"), errors + (tag == "error")
    if report.partial:  # cut short: an error case says so, or CI would read a green run
        _partial_suite(root, report.partial)
        total, errors = total + 1, errors + 1
    root.set("tests", str(total))
    root.set("failures", str(failed))
    root.set("errors", str(errors))
    root.set("time", f"{seconds:.3f}")
    ET.indent(root)
    return ET.tostring(root, encoding="utf-8", xml_declaration=True) + b"\n"


def _partial_suite(root: ET.Element, partial) -> None:
    """First among the suites: the run was interrupted, with what it judged of its plan
    (faultsim.reports.interrupted.Partial) as the suite's properties."""
    suite = ET.Element("testsuite", {"name": "faultsim [partial]", "tests": "1",
                                     "failures": "0", "errors": "1", "time": "0.000"})
    root.insert(0, suite)
    props = ET.SubElement(suite, "properties")
    fields = partial.to_json()
    for key, shards in fields.pop("shards", {}).items():  # `run --ray`: "partial.shards.cut"
        fields[f"shards.{key}"] = shards
    for name, value in fields.items():
        if isinstance(value, list):
            value = ", ".join(value)
        ET.SubElement(props, "property", {"name": f"partial.{name}",
                                          "value": "" if value is None else str(value)})
    case = ET.SubElement(suite, "testcase", {"classname": "faultsim.run",
                                             "name": "the run ended", "time": "0.000"})
    error = ET.SubElement(case, "error", {"type": "Interrupted",
                                          "message": partial.headline()})
    error.text = (partial.headline() + ": the suites below hold only the crash states "
                  "judged before it")
