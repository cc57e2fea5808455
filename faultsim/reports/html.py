"""The HTML report (`faultsim run --html FILE`, `faultsim report html REPORT.json`, the
pytest plugin's `--faultsim-html FILE`): one self-contained page built from the JSON report
alone, so every front end writes the same page for the same run. The report's data is
embedded as JSON; the page's script (html_report.js) and style (html_report.css), package
data beside this module, are inlined: nothing is loaded from anywhere, it opens offline
from a CI artifact.

Imports the standard library, faultsim.errors, faultsim.reports.outfile, faultsim.reports.interrupted and
faultsim.reports.counts, and lazily the one-line wordings of faultsim.core.classes and faultsim.reports.report.
"""
from __future__ import annotations

import functools
import json
from importlib import resources
from pathlib import Path
from typing import Any

from .counts import ALPHABET as _ALPHABET, DEFINED, code as _code, count
from ..errors import UsageError
from .outfile import write_atomic

# What a pass does not prove: docs/explanation/guarantees.md, "What it does not establish"
# (tests/test_html_report.py checks that every item there is named here).
NOT_PROVEN = (
    ("Other inputs", "the agent is tested on the conversation the scenario scripts, with "
     "the API faults it names; a real model's non-determinism is not explored."),
    ("Three or more crashes, exhaustively", "schedules of three or more crashes (and pairs "
     "under --search) are searched with hypothesis, not enumerated: a search that finds "
     "nothing is evidence, not proof."),
    ("The kill points a representative run left out", "--coverage representative judges "
     "each kill-point class at its first, last and --per-class seeded occurrences and the "
     "first and last step: a mistake that shows only in the data of a step it did not crash "
     "can pass; the report says how many kill points were not crashed."),
    ("The rest of a resumed run cut at a horizon", "--horizon H takes a resumed run's "
     "course past its first H model requests after recovery from the clean run's: a "
     "violation found only in the files it ends with, or shown later, is not seen; with two "
     "crashes (representative), a second crash past a first crash's cut is taken as the "
     "clean run's crash there, not crashed; the report says how many runs were cut."),
    ("Crash models beyond the two", "process keeps every completed operation; power is "
     "ALICE-style and bounded: reordered writes beyond its outcomes, firmware that lies "
     "about fsync and bit rot are not modelled."),
    ("What in-process mode cannot see", "C-level I/O such as sqlite3 is seen only in "
     "subprocess mode, which explores process crashes only."),
    ("The real services", "effects go to the scenario's fake services; a real provider whose "
     "idempotency differs from its declared kind is not tested."),
    ("Concurrency", "one incarnation runs at a time, parallel tool calls in one order: "
     "racing incarnations and other interleavings are not explored."),
    ("Checkpoints the oracle cannot read", "state kept outside the declared checkpoint "
     "files is judged only through what the resumed run does."),
)


@functools.cache  # read once: a stopped run writes its page without reading a file
def _asset(name: str) -> str:
    return resources.files(__package__).joinpath(name).read_text(encoding="utf-8")


def ready() -> None:
    """Read the page's script and style now, before a run that may be stopped writes it."""
    _asset("html_report.css")
    _asset("html_report.js")


def _embedded(data: Any) -> str:
    """JSON safe inside a <script> element: no `</` (the element's end), no `<!--`."""
    text = json.dumps(data, separators=(",", ":"), ensure_ascii=False)
    return text.replace("</", "<\\/").replace("<!--", "<\\!--")


def render(report: dict[str, Any], title: str | None = None) -> str:
    """The page of a JSON report (`Report.to_json()`, or a file `--json` wrote)."""
    if not isinstance(report, dict) or not isinstance(report.get("runs"), list):
        raise UsageError("not a faultsim JSON report: no 'runs' list")
    # `states` (every crash state by identity) is for `faultsim compare`, not the page:
    # left out, it costs the page nothing
    shown = {**report, "runs": [_shown(r) if isinstance(r, dict) else r
                                for r in report["runs"]]}
    # the counts' definitions (faultsim.reports.counts): the page's tooltips
    page = {"report": shown, "not_proven": [list(x) for x in NOT_PROVEN],
            "counts": {d.name: [d.label, d.text] for d in DEFINED}}
    partial = _partial_banner(report)
    title = title or ("faultsim: " + ("partial" if partial else
                                      "nothing explored" if not report["runs"] else
                                      "all passed" if report.get("ok") else "violations"))
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
        f"<title>{_escape(title)}</title><style>{_asset('html_report.css')}</style></head>"
        "<body><noscript>This report draws itself with JavaScript; the data is the JSON "
        f"report embedded below.</noscript>{partial}<div id=\"app\"></div>"
        f"<script type=\"application/json\" id=\"faultsim-data\">{_embedded(page)}</script>"
        f"<script>{_asset('html_report.js')}</script></body></html>\n")


def _partial_banner(report: dict[str, Any]) -> str:
    """An interrupted run's page opens with a banner saying so (drawn without the script:
    a page whose script fails still says it is partial)."""
    partial = report.get("partial")
    if not isinstance(partial, dict):
        return ""
    from .interrupted import headline

    text = (f"{headline(partial)}. The crash states it did not judge show as unexplored; "
            "a pass here is not a pass of the run.")
    return f'<div class="partial" role="alert">{_escape(text)}</div>'


def _shown(run: dict[str, Any]) -> dict[str, Any]:
    """A run as the page gets it: without `states` (every crash state by identity, for
    `faultsim compare`: left out, it costs the page nothing), with its `counts`
    (faultsim.reports.counts; computed here for a report written before they were kept)."""
    shown = {k: v for k, v in run.items() if k != "states"}
    if "counts" not in shown:
        shown["counts"] = count(run).to_json()
    shown["coverage_lines"] = coverage_lines(run)
    return shown


def coverage_lines(run: dict[str, Any]) -> list[str]:
    """What a run left out, as the console and the Markdown summary say it: a
    representative run's coverage (first and second crashes) and a horizon's cut, read from
    its JSON (so a page of an older report says it too). A page must not let a
    representative pass read as an exhaustive one."""
    from ..core.classes import line_of
    from .text import horizon_line_of

    lines = []
    try:
        lines.append(line_of(run.get("coverage")))
        lines.append(horizon_line_of(run.get("horizon"), run.get("crash_states_resumed", 0)))
    except (KeyError, TypeError):  # a report written before these blocks took their shape
        pass
    return [line for line in lines if line]


def _escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def write_html(report: dict[str, Any], path: str | Path, what: str = "--html") -> None:
    write_atomic(path, render(report), what=what)


def from_json_file(source: str | Path, target: str | Path) -> None:
    """`faultsim report html REPORT.json --out FILE`: the page of a report written before."""
    try:
        data = json.loads(Path(source).read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise UsageError(f"{source}: not JSON ({exc.msg}, line {exc.lineno})") from None
    runs = data.get("runs") if isinstance(data, dict) else None
    if not isinstance(runs, list):
        raise UsageError(f"{source}: runs: missing: not a faultsim JSON report")
    for n, run in enumerate(runs):
        if not isinstance(run, dict) or "map" not in run:
            raise UsageError(f"{source}: runs[{n}].map: missing (a report of an older "
                             "faultsim, or not faultsim run --json's): rerun with --json")
    write_html(data, target, what="--out")


# -- one page for a pytest session ------------------------------------------------------------
def _char(n: int) -> str:
    return _ALPHABET[n] if n < len(_ALPHABET) else chr(0xC0 + n - len(_ALPHABET))


def merge_runs(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """The runs of one scenario × crash model explored piecewise (the plugin's kill-point
    items, one kill point each) as one run: every kill point's verdict from the part that
    explored it (the parts share the clean run, so the maps line up: one part at least
    carries its full map, the others may send only what they explored), the counts summed."""
    first = next(p for p in parts if "points" in p["map"])  # one holds the clean run's parts
    out = {**first, "violations": [], "counterexamples": [], "probes": []}
    for key in ("kill_points_explored", "crash_states", "crash_states_resumed",
                "crash_states_escalated", "violating", "seconds"):
        out[key] = sum(p[key] for p in parts)
    out["seconds"] = round(out["seconds"], 3)
    out["wall_seconds"] = None
    out["categories"] = {c: sum(p["categories"].get(c, 0) for p in parts)
                         for c in first["categories"]}
    out["schedules"] = {}
    for p in parts:
        for n, s in p["schedules"].items():
            into = out["schedules"].setdefault(n, {k: 0 for k in s})
            for k, v in s.items():
                into[k] = round(into[k] + v, 3)
    probes: dict[str, bool] = {}
    for p in parts:
        for probe in p["probes"]:
            probes[probe["id"]] = probes.get(probe["id"], True) and probe["ok"]
    out["probes"] = [{"id": k, "ok": v} for k, v in probes.items()]
    labels = list(first["map"]["labels"])
    verdict = [0] * len(first["map"]["points"]["verdict"])
    ids: dict[str, str] = {}
    deep: set[str] = set()  # failing only when a second crash follows
    pairs = []
    shown = set()
    for p in parts:
        m = p["map"]
        local = m["labels"]
        remap = []
        for label in local:
            if label not in labels:
                labels.append(label)
            remap.append(labels.index(label))
        explored = m["explored"].items() if "explored" in m else (
            (i, ch) for i, ch in enumerate(m["points"]["verdict"]) if ch != _ALPHABET[0])
        for i, ch in explored:  # the kill points this part explored
            verdict[int(i)] = remap[_code(ch)]
        ids.update(m.get("ids", {}))
        deep |= set(m.get("deep", "").split(",")) - {""}
        for t in m.get("pairs", []):
            pos, index, offset, ch = t.split(",")
            pairs.append(f"{pos},{index},{offset},{_char(remap[_code(ch)])}")
        out["violations"] += p["violations"]
        for cx in p.get("counterexamples", []):
            if tuple(cx["invariants"]) not in shown:
                shown.add(tuple(cx["invariants"]))
                out["counterexamples"].append(cx)
    points = {**first["map"]["points"], "verdict": "".join(_char(c) for c in verdict)}
    out["map"] = {**first["map"], "labels": labels, "points": points, "ids": ids,
                  "deep": ",".join(sorted(deep, key=int)), "pairs": pairs}
    out["counts"] = count(out).to_json()  # faultsim.reports.counts, of the items together
    return out


def session_report(entries: list[tuple[str, str, dict[str, Any]]]) -> dict[str, Any]:
    """The pytest plugin's one page: `entries` (test or kill-point group, how it ran, a JSON
    report's run), in the session's order. A whole-scenario test's runs stay as they are;
    the kill-point items of one group merge into a run per crash model."""
    runs: list[dict[str, Any]] = []
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for test, mode, run in entries:
        if mode == "kill point":
            key = (test, run["crash_model"])
            if key not in groups:
                groups[key] = []
                runs.append({"test": test, "group": key})
            groups[key].append(run)
        else:
            runs.append({**run, "test": test})
    runs = [{**merge_runs(groups[r["group"]]), "test": r["test"]} if "group" in r else r
            for r in runs]
    from .._version import __version__

    return {"ok": all(r["violating"] == 0 for r in runs), "version": __version__,
            "runs": runs}
