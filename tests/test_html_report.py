"""The HTML report: built from the JSON report alone (the same page from `--html` and from
`faultsim report html`), self-contained, its counts the text report's, and drawn by a real
browser (headless Chromium): every violation present, the counts, the map's cells, the
first counterexample before the map and the violations, the replay commands never clipped.
The pytest plugin writes one page for a session, its kill-point items merged into the map
the whole-scenario run draws. Every count (faultsim.reports.counts) is the same in the text, the
JSON, JUnit, the Markdown summary and the page."""
from __future__ import annotations

import contextlib
import io
import json
import re
import shutil
from collections import Counter
from html.parser import HTMLParser
from pathlib import Path

import pytest

import browser
from faultsim.reports.ci import summary_markdown
from faultsim.cli import main
from faultsim.errors import UsageError
from faultsim.reports.html import NOT_PROVEN, from_json_file, render, session_report

ROOT = Path(__file__).resolve().parent.parent
RECEIPTS = ROOT / "examples/receipts"
MUTANT = f"{RECEIPTS / 'receipts_agent.py'}:make_agent_without_intents"
ARTIFACTS = ROOT / "artifacts"  # what CI keeps of a run (git-ignored)


@pytest.fixture(scope="module")
def receipts(tmp_path_factory, shared_cache):
    """The receipts example's planted mistake (the receipt sent again after a crash), process
    crashes and pairs: its text report, JSON report and page. The sweep is made once per
    session, whichever xdist worker asks first (tests/shared_runs.py); `faultsim run` writes
    every report from it here."""
    from shared_runs import memo_in_process

    out = tmp_path_factory.mktemp("html")
    text = io.StringIO()
    with contextlib.redirect_stdout(text), memo_in_process(shared_cache):
        status = main(["run", str(RECEIPTS / "scenario.toml"), "--agent", MUTANT,
                       "--crash-model", "process", "--crashes", "2", "--json",
                       str(out / "r.json"), "--html", str(out / "r.html"), "--examples", "0",
                       "--junit", str(out / "r.xml"), "--summary-md", str(out / "r.md")])
    assert status == 1
    return {"text": text.getvalue(), "json": json.loads((out / "r.json").read_text()),
            "html": out / "r.html", "dir": out}


def _text_rows(text: str, head: bool = False) -> list[list[str]]:
    """The rows of the summary table `faultsim run` ends with (its header first, with
    `head`): columns are two spaces or more apart."""
    lines = text.splitlines()
    start = max(i for i, line in enumerate(lines) if line.startswith("scenario  crash model"))
    rows = []
    for line in lines[start + (0 if head else 1):]:
        if re.match(r"\d+ scenarios?, |shard ", line):
            break
        rows.append(re.split(r"\s{2,}", line.strip()))
    return rows


def _verdicts(run: dict) -> Counter:
    m = run["map"]
    alphabet = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
    return Counter(m["labels"][alphabet.index(c)] for c in m["points"]["verdict"])


def test_the_map_counts_are_the_text_reports(receipts):
    (row,) = _text_rows(receipts["text"])
    (run,) = receipts["json"]["runs"]
    name, model, points, passed, failed, deeper, _ = row
    verdicts = _verdicts(run)
    assert sum(verdicts.values()) == run["kill_points_total"] == 61
    assert (name, model, int(points)) == (run["scenario"], run["crash_model"],
                                         run["kill_points_explored"])
    assert verdicts["passed"] + verdicts["escalated"] == int(passed) == 44
    # the failing kill points' cells: a single crash fails there, or only a second one
    deep = set(run["map"]["deep"].split(","))
    assert verdicts["effects_exactly_once"] == int(failed) + int(deeper) == 61 - 44
    assert int(deeper) == len(deep) > 0
    assert run["violating"] == len(run["violations"]) == 81  # one invariant each
    # pairs ran: each failing schedule of two crashes is a cell of the second-crash matrix
    assert len(run["map"]["pairs"]) == sum(len(v["schedule"]) == 2 for v in run["violations"])
    assert run["map"]["pairs"]


def test_json_to_html_is_the_page_run_wrote(receipts, tmp_path):
    page = tmp_path / "again.html"
    assert main(["report", "html", str(receipts["dir"] / "r.json"), "--out", str(page)]) == 0
    assert page.read_text() == receipts["html"].read_text()


def test_the_page_is_self_contained_and_names_every_violation(receipts):
    page = receipts["html"].read_text()
    assert not re.findall(r"(?:src|href)\s*=\s*[\"']?(?:https?:)?//", page)
    assert "http://" not in page and "https://" not in page
    assert "<link" not in page and "<script src" not in page
    run = receipts["json"]["runs"][0]
    for v in run["violations"]:
        assert v["token"] in page and v["invariant"] in page
    for title, _ in NOT_PROVEN:
        assert title in page


def test_what_a_pass_does_not_prove_is_the_guarantees_page():
    doc = (ROOT / "docs/explanation/guarantees.md").read_text()
    section = doc.split("## What it does not establish")[1].split("\n## ")[0]
    titles = re.findall(r"^- \*\*(.+?)\.\*\*", section, re.M)
    assert titles == [t for t, _ in NOT_PROVEN]


def test_a_file_that_is_no_report_is_a_one_line_error(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"runs": [{"scenario": "x"}]}')
    with pytest.raises(UsageError, match=r"bad.json: runs\[0\].map: missing"):
        from_json_file(bad, tmp_path / "x.html")
    bad.write_text("{")
    with pytest.raises(UsageError, match="bad.json: not JSON"):
        from_json_file(bad, tmp_path / "x.html")


def test_the_markdown_summary_links_the_page(receipts, monkeypatch):
    from faultsim.reports.report import Report

    for key in ("GITHUB_SERVER_URL", "GITHUB_REPOSITORY", "GITHUB_RUN_ID"):
        monkeypatch.delenv(key, raising=False)
    assert "[report.html](out/report.html)" in summary_markdown(Report(), html="out/report.html")
    monkeypatch.setenv("GITHUB_SERVER_URL", "https://github.com")
    monkeypatch.setenv("GITHUB_REPOSITORY", "o/r")
    monkeypatch.setenv("GITHUB_RUN_ID", "7")
    assert "(https://github.com/o/r/actions/runs/7#artifacts)" in summary_markdown(
        Report(), html="out/report.html")
    assert "HTML report" not in summary_markdown(Report())


class _Dom(HTMLParser):
    """What the test reads of the rendered page: elements by class, and their text."""

    def __init__(self) -> None:
        super().__init__()
        self.stack: list[tuple[str, dict]] = []
        self.cells: dict[str, Counter] = {}  # map id -> cell class -> count
        self.summary: list[list[str]] = []
        self.violations: list[str] = []  # each violation row's text
        self.counterexamples: list[str] = []  # their data-invariants
        self.counts: dict[str, list[str]] = {}  # a count's name -> each text shown for it
        self.groups: list[str] = []  # each group of violations' heading
        self.facts: dict[str, str] = {}  # the run facts, by name
        self.titles: dict[str, str] = {}  # a table heading's text -> its tooltip
        self.body: dict = {}
        self._text: list[str] | None = None
        self._cell: list[str] | None = None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        classes = (a.get("class") or "").split()
        if tag == "body":
            self.body = a
        if tag == "i" and self.stack:
            maps = [x for _, x in self.stack if x.get("id", "").startswith("map-")]
            if maps:
                self.cells.setdefault(maps[-1]["id"], Counter())[classes[0]] += 1
        if tag == "tr" and ("violation" in classes or "ghead" in classes or
                            self._in("facts")):
            self._text = []
        if tag == "b" and classes and classes[0].startswith("n-"):
            self._count, self._cell = classes[0][2:], []
        if tag == "th" and a.get("title"):
            self._title, self._cell = a["title"], []
        if tag == "tr" and a.get("data-run") is not None and self._in("summary"):
            self.summary.append([])
        if tag == "td" and self._in("summary"):
            self._cell = []
        if tag == "section" and "cx" in classes:
            self.counterexamples.append(a.get("data-invariants", ""))
        if tag not in ("i", "input", "br", "meta"):
            self.stack.append((tag, a))

    def _in(self, cls: str) -> bool:
        return any(cls in (x.get("class") or "").split() for _, x in self.stack)

    _count: str | None = None
    _title: str | None = None

    def handle_endtag(self, tag):
        if tag == "tr" and self._text is not None:
            if self._in("facts"):
                name, _, value = " ".join(self._text).partition(" ")
                self.facts.setdefault(name, value)
            elif self.stack and "ghead" in (self.stack[-1][1].get("class") or ""):
                self.groups.append(" ".join(self._text))
            else:
                self.violations.append(" ".join(self._text))
            self._text = None
        if tag == "b" and self._count is not None:
            self.counts.setdefault(self._count, []).append("".join(self._cell).strip())
            self._count = self._cell = None
        if tag == "th" and self._title is not None:
            self.titles["".join(self._cell).strip()] = self._title
            self._title = self._cell = None
        if tag == "td" and self._cell is not None and self.summary:
            self.summary[-1].append("".join(self._cell).strip())
            self._cell = None
        if all(t != tag for t, _ in self.stack):
            return  # an element never pushed (<i>, <input>)
        while self.stack.pop()[0] != tag:
            pass

    def handle_data(self, data):
        if self._text is not None:
            self._text.append(data)
        if self._cell is not None:
            self._cell.append(data)


def test_a_real_browser_draws_every_violation_the_counts_and_the_cells(receipts):
    binary = browser.require()
    dom = _Dom()
    dom.feed(browser.dump_dom(binary, receipts["html"]))
    assert dom.body.get("data-rendered") == "1", "the page's script did not finish"
    (run,) = receipts["json"]["runs"]
    # the summary table: the text report's row, its counts exactly (its time is rounded
    # from the JSON's seconds, the text's from the measured ones)
    (row,) = _text_rows(receipts["text"])
    assert [cells[:6] for cells in dom.summary] == [row[:6]]
    # every violation, with its replay token; near-identical ones grouped, folded
    assert len(dom.violations) == len(run["violations"]) == 81
    for shown in dom.violations:
        v = run["violations"][int(shown.split()[0]) - 1]  # its row's number
        assert v["invariant"] in shown and v["token"] in shown
        assert " then ".join(v["schedule"]) in shown
    counted = [int(re.search(r" (\d+) (?:crash states?|schedules?) at ", g)[1])
               for g in dom.groups]
    assert sum(counted) == 81 and 1 < len(dom.groups) < 81
    # the map: a cell per kill point, coloured by the JSON's verdicts
    verdicts = _verdicts(run)
    labels = run["map"]["labels"]
    assert dom.cells["map-0"] == Counter({f"v{labels.index(k)}": n for k, n in verdicts.items()})
    assert dom.counterexamples == ["effects_exactly_once"]
    # the limit a resumed incarnation had, never "auto s"; what "persisted" means
    assert run["timeout"] == "auto" and run["timeout_seconds"] > 0
    assert dom.facts["timeout"] == f"auto ({run['timeout_seconds']:g} s, derived from the " \
                                   "clean runs)"
    assert dom.titles["persisted ?"].startswith("persisted: what of the agent's writes")
    # the screenshot CI keeps (artifacts/, docs/how-to/ci.md)
    ARTIFACTS.mkdir(exist_ok=True)
    browser.screenshot(binary, receipts["html"], ARTIFACTS / "html-report.png")
    assert (ARTIFACTS / "html-report.png").stat().st_size > 10_000


def test_every_count_is_the_same_in_text_json_junit_markdown_and_html(receipts):
    """One run with violations of one and of two crashes: each count (faultsim.reports.counts) is
    what the JSON's own verdicts give, and the text, JUnit, the Markdown summary and the
    page say the same figure."""
    import xml.etree.ElementTree as ET

    from faultsim.reports.counts import DEFINED

    (run,) = receipts["json"]["runs"]
    c = run["counts"]
    assert set(c) == {d.name for d in DEFINED}
    # what the JSON's verdicts give: the map's cells, the violations a verdict at a time
    cells = _verdicts(run)
    deep = set(run["map"]["deep"].split(",")) - {""}
    verdicts = {(tuple(v["rank"]), tuple(v["schedule"])) for v in run["violations"]}
    states = sum(len(s) == 1 for _, s in verdicts)
    pairs = sum(len(s) == 2 for _, s in verdicts)
    assert states and pairs and deep  # failures of one and of two crashes, or it proves little
    assert (c["kill_points_passed"], c["kill_points_failed"], c["kill_points_failed_deeper"]) \
        == (cells["passed"] + cells["escalated"], cells["effects_exactly_once"] - len(deep),
            len(deep))
    assert c["kill_points_judged"] == run["kill_points_explored"] == sum(
        c[k] for k in ("kill_points_passed", "kill_points_failed", "kill_points_failed_deeper"))
    assert (c["crash_states_failed"], c["schedules_failed"], c["probes_failed"]) == \
        (states, {"2": pairs}, 0)
    assert c["violating"] == run["violating"] == len(verdicts) == states + pairs
    assert c["counterexamples"] == len(run["counterexamples"]) > 0
    # the text: the table's columns and the run's header
    table = [str(c["kill_points_judged"]), str(c["kill_points_passed"]),
             str(c["kill_points_failed"]), str(c["kill_points_failed_deeper"])]
    head, row = _text_rows(receipts["text"], head=True)
    assert head[2:6] == ["kill points", "passed", "failed", "failed with 2+ crashes"]
    assert row[2:6] == table
    failing = f"{states} crash states and {pairs} schedules of 2 crashes"
    assert f" · process: {c['violating']} VIOLATIONS ({failing})\n" in receipts["text"]
    # JUnit: the counts as properties, the failure counted as the text counts it
    suite = ET.parse(receipts["dir"] / "r.xml").getroot().find("testsuite")
    props = {p.get("name"): p.get("value") for p in suite.iter("property")}
    for name, value in c.items():
        if isinstance(value, dict):
            assert {k: int(props[f"{name}.{k}"]) for k in value} == value
        else:
            assert props[name] == str(value), name
    (failure,) = suite.iter("failure")
    assert failure.get("message").startswith(f"{failing} violate effects_exactly_once ")
    # the Markdown summary: the table's row and the run's heading
    md = (receipts["dir"] / "r.md").read_text()
    (line,) = [x for x in md.splitlines() if x.startswith("| receipts |")]
    assert [x.strip().strip("*") for x in line.split("|")[3:7]] == table
    assert f"]: {c['violating']} violations ({failing})\n" in md
    # the page: the same table, and each count where it shows it
    dom = _Dom()
    dom.feed(browser.dump_dom(browser.require(), receipts["html"]))
    assert [cells[2:6] for cells in dom.summary] == [table]
    for name in ("kill_points_judged", "kill_points_passed", "kill_points_failed",
                 "kill_points_failed_deeper", "crash_states", "crash_states_failed",
                 "violating", "counterexamples"):
        assert dom.counts[name] == [str(c[name])], name
    assert dom.counts["schedules_failed"] == [str(pairs)]  # the second crashes' count


# Run after the page drew itself: where the parts are, and how many shown commands are
# wider than their box (clipped, or scrolled sideways).
MEASURE = """<script>(function () {
  function top(id) { return document.getElementById(id).getBoundingClientRect().top + scrollY; }
  var shown = [].filter.call(document.querySelectorAll(".cmd code"),
                             function (c) { return c.offsetParent !== null; });
  document.body.dataset.measured = JSON.stringify({
    cx: top("cx-0-0"), map: top("map-0"), violations: top("viol-0"), commands: shown.length,
    clipped: shown.filter(function (c) { return c.scrollWidth > c.clientWidth + 1; }).length});
})();</script></body>"""


def test_the_first_counterexample_comes_first_and_no_command_is_clipped(receipts, tmp_path):
    """81 violations once pushed the first counterexample 10,000 px down the page, and a
    replay command was cut at the edge of its box on a narrow window."""
    binary = browser.require()
    page = tmp_path / "measured.html"
    page.write_text(receipts["html"].read_text().replace("</body>", MEASURE))
    body = _Dom()
    body.feed(browser.dump_dom(binary, page, size="700,1000"))
    found = json.loads(body.body["data-measured"])
    assert found["cx"] < found["map"] < found["violations"], found
    assert found["commands"] >= 2 and found["clipped"] == 0, found


CATS = ("in-tool", "after-effect")  # 4 kill points: kept few, each item is a resumed run


def test_the_plugin_writes_one_page_for_the_session(pytester, receipts):
    """A whole-scenario test and the kill-point items of another, in one session: one page,
    the items' map the whole run's, verdict for verdict."""
    for name in ("scenario.toml", "receipts_agent.py"):
        shutil.copy(RECEIPTS / name, pytester.path / name)
    pytester.makepyfile(test_receipts=f"""
        import pytest, faultsim
        from receipts_agent import make_agent, make_agent_without_intents

        @pytest.mark.faultsim("scenario.toml", agent=make_agent, crashes=1,
                              crash_model="process", categories=("after-effect",))
        def test_whole(crash_safety):
            crash_safety.check()

        @faultsim.parametrize(make_agent_without_intents, "scenario.toml", crashes=1,
                              crash_model="process", categories={CATS!r})
        def test_items(crash_safety):
            crash_safety.check()
        """)
    page = pytester.path / "session.html"
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-q",
                                           f"--faultsim-html={page}")
    whole = receipts["json"]["runs"][0]
    singles = {v["schedule"][0] for v in whole["violations"] if len(v["schedule"]) == 1
               and any(f"-{c}-" in v["schedule"][0] for c in CATS)}
    assert len(singles) == 1
    result.assert_outcomes(passed=1 + 4 - 1, failed=1)
    assert f"HTML report: {page}" in result.stdout.str()
    text = page.read_text()
    data = json.loads(text.split('id="faultsim-data">')[1].split("</script>")[0]
                      .replace("<\\/", "</"))["report"]
    whole, items = data["runs"]
    assert whole["test"].endswith("::test_whole") and whole["violating"] == 0
    assert items["test"].endswith("test_items") and items["kill_points_explored"] == 4
    # the merged items judge each kill point as the CLI's whole run judged its single
    # crashes (the receipts fixture's one-crash violations)
    assert set(items["map"]["ids"].values()) == singles
    assert _verdicts(items) == Counter({"unexplored": 61 - 4, "passed": 4 - 1,
                                        "effects_exactly_once": 1})
    assert items["violating"] == 1
    assert {v["token"] for v in items["violations"]} <= set(re.findall(r"fs1_[\w-]+", text))
    assert session_report([])["runs"] == []


def test_the_counts_page_defines_every_count():
    """docs/reference/json-report.md's `counts` block is faultsim.reports.counts.DEFINED, word for
    word: one definition, in the code and on the page."""
    from faultsim.reports.counts import DEFINED

    page = (ROOT / "docs/reference/json-report.md").read_text()
    marker = ("<!-- docs: checked-by tests/test_html_report.py::"
              "test_the_counts_page_defines_every_count -->")
    block = page.split(marker)[1].split("```")[1].strip("\n").splitlines()
    assert block == [f"{d.name}: {d.text}" for d in DEFINED]


class _Notes(HTMLParser):
    """The text of each `<p class="coverage">` of a rendered page."""

    def __init__(self) -> None:
        super().__init__()
        self.notes: list[str] = []
        self._in = False

    def handle_starttag(self, tag, attrs):
        if tag == "p" and ("class", "coverage") in attrs:
            self._in = True
            self.notes.append("")

    def handle_endtag(self, tag):
        if tag == "p":
            self._in = False

    def handle_data(self, data):
        if self._in:
            self.notes[-1] += data


def test_the_page_says_what_a_representative_run_and_a_horizon_left_out(tmp_path):
    """A representative pass, or one cut at a horizon, must not read as an exhaustive pass
    on the page either: each run says what it left out in the words the console uses."""
    text = io.StringIO()
    with contextlib.redirect_stdout(text):
        status = main(["run", str(ROOT / "tests/data/tiny.toml"), "--agent", "reference_agent",
                       "--crash-model", "process", "--crashes", "1", "--coverage",
                       "representative", "--per-class", "0", "--horizon", "1",
                       "--json", str(tmp_path / "r.json"), "--html", str(tmp_path / "r.html")])
    assert status == 0
    said = [line.split(": ", 1)[1] for line in text.getvalue().splitlines()
            if line.startswith("tiny [process]: ")]
    assert [s.split(":")[0] for s in said] == ["representative", "horizon 1"]
    notes = _Notes()
    notes.feed(browser.dump_dom(browser.require(), tmp_path / "r.html"))
    assert notes.notes == said
    # an exhaustive run's page has none
    exhaustive = json.loads((tmp_path / "r.json").read_text())
    for run in exhaustive["runs"]:
        run["coverage"]["mode"] = "exhaustive"
        del run["horizon"]
    assert '"coverage_lines":[]' in render(exhaustive)
