"""faultsim's own reports survive what it tests agents for: output paths (and --baseline)
are checked before any run, every report is written atomically and tried even when
another fails (a full disk), and a run cut short by SIGINT or SIGTERM leaves the report of
what it judged, marked partial, in every form (faultsim.cli.output, faultsim.reports.interrupted).
"""
from __future__ import annotations

import contextlib
import errno
import io
import json
import os
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from conftest import DATA
from helpers import SMALL
from faultsim.cli import main
from faultsim.pipeline.sweep import Sweep

TINY = str(DATA / "tiny.toml")
ROOT = Path(__file__).resolve().parent.parent


def _reports(folder: Path) -> dict[str, Path]:
    return {"--json": folder / "r.json", "--junit": folder / "r.xml",
            "--html": folder / "r.html", "--summary-md": folder / "summary.md"}


def _flags(reports: dict[str, Path]) -> list[str]:
    return [x for option, path in reports.items() for x in (option, str(path))]


# -- checked before any work ------------------------------------------------------------------
@pytest.mark.parametrize("option", ["--json", "--junit", "--html", "--summary-md"])
def test_an_output_path_that_cannot_be_written_is_refused_before_any_run(
        option, tmp_path, capsys, monkeypatch):
    ran = []
    monkeypatch.setattr("faultsim.backends.explore", lambda *a, **k: ran.append(a))
    bad = tmp_path / "no-such-folder" / "report"
    assert main(["run", TINY, "--crashes", "1", option, str(bad)]) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"faultsim: error: {option} {bad}: the folder {bad.parent} does not exist"]
    assert not ran and os.listdir(tmp_path) == []
    # a folder where a file should go, and a good path beside it: refused, nothing written
    good = tmp_path / "r.json"
    assert main(["run", TINY, "--crashes", "1", "--json" if option != "--json" else "--junit",
                 str(good), option, str(tmp_path)]) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"faultsim: error: {option} {tmp_path}: is a folder, not a file"]
    assert not ran and os.listdir(tmp_path) == []


def test_a_baseline_that_is_missing_or_partial_is_refused_before_any_run(tmp_path, capsys,
                                                                          monkeypatch):
    ran = []
    monkeypatch.setattr("faultsim.backends.explore", lambda *a, **k: ran.append(a))
    missing = tmp_path / "base.json"
    assert main(["run", TINY, "--crashes", "1", "--baseline", str(missing)]) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"faultsim: error: --baseline {missing}: cannot read it (No such file or directory)"]
    missing.write_text(json.dumps({"ok": False, "runs": [], "partial": {
        "reason": "interrupted (SIGINT)", "crash_states_judged": 3}}))
    assert main(["run", TINY, "--crashes", "1", "--baseline", str(missing)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith(f"faultsim: error: --baseline {missing}: "
                                               "partial: ")
    assert "interrupted (SIGINT)" in err[0]
    assert not ran
    # nor can shard reports be merged when one of them is partial
    assert main(["report", "merge", str(missing), str(missing)]) == 2
    assert f"{missing}: partial: " in capsys.readouterr().err


def test_report_merge_and_compare_check_their_outputs_before_reading_anything(tmp_path,
                                                                              capsys):
    bad = tmp_path / "gone" / "m.json"
    # the inputs do not exist either: the output is what is named, first
    assert main(["report", "merge", "a.json", "b.json", "--html", str(bad)]) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"faultsim: error: --html {bad}: the folder {bad.parent} does not exist"]
    assert main(["compare", "a.json", "b.json", "--json", str(bad)]) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"faultsim: error: --json {bad}: the folder {bad.parent} does not exist"]


# -- written atomically, each tried ----------------------------------------------------------
def test_a_full_disk_fails_only_the_reports_it_fails_and_names_each(tmp_path, capsys,
                                                                     monkeypatch):
    """os.write fails with ENOSPC for the JSON's and the JUnit's temp files (as a disk that
    fills while they are written): both are named, a line each, exit 3; the old JSON is
    whole, no temp file is left, and the HTML and Markdown are written all the same."""
    scenario = tmp_path / "small.toml"
    scenario.write_text(SMALL)
    out = tmp_path / "out"
    out.mkdir()
    reports = _reports(out)
    reports["--json"].write_text('{"old": "report"}\n')
    real = os.write

    def write(fd, data):
        try:
            target = os.path.basename(os.readlink(f"/proc/self/fd/{fd}"))
        except OSError:
            target = ""
        if target.startswith((".r.json.", ".r.xml.")):
            real(fd, bytes(data[:100]))  # some of it lands, then the disk is full
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(fd, data)

    monkeypatch.setattr(os, "write", write)
    assert main(["run", str(scenario), "--crashes", "1", "--workers", "1",
                 *_flags(reports)]) == 3
    err = capsys.readouterr().err.splitlines()
    assert err[-2:] == [
        f"faultsim: error: --json {reports['--json']}: cannot write (No space left on device)",
        f"faultsim: error: --junit {reports['--junit']}: cannot write (No space left on "
        "device)"]
    assert reports["--json"].read_text() == '{"old": "report"}\n'
    assert sorted(os.listdir(out)) == ["r.html", "r.json", "summary.md"]
    assert reports["--html"].read_text().rstrip().endswith("</html>")
    assert reports["--summary-md"].read_text().startswith("## faultsim: all passed")


# -- an interrupted run leaves the partial report -----------------------------------------------
def _interrupt_after(monkeypatch, judged: int, sig: int) -> None:
    """The signal is sent, to this process, as the sweep records its `judged`-th first crash
    state: as a Ctrl-C or a CI job's SIGTERM landing mid-sweep (in the driver run of the
    agent, or while the parent reads a worker's verdicts)."""
    real, me = Sweep.record, os.getpid()

    def record(self, *args, **kwargs):
        real(self, *args, **kwargs)
        if os.getpid() == me and not self.earlier and \
                sum(len(run.verdicts) for run in self.runs.values()) == judged:
            os.kill(me, sig)

    monkeypatch.setattr(Sweep, "record", record)


def _partial_block() -> str:
    page = (ROOT / "docs" / "reference" / "json-report.md").read_text()
    after = page.split("test_reports_crash_safe.py::test_an_interrupted_run_leaves_every_"
                       "report_marked_partial -->")[1]
    return after.split("```")[1]


@pytest.mark.parametrize("mode, sig, code, reason", [
    ("in-process", signal.SIGINT, 130, "interrupted (SIGINT)"),
    ("in-process", signal.SIGTERM, 143, "terminated (SIGTERM)"),
    # the slowest (every kill lands before the first verdict): one signal
    ("subprocess", signal.SIGINT, 130, "interrupted (SIGINT)")])
def test_an_interrupted_run_leaves_every_report_marked_partial(mode, sig, code, reason,
                                                               tmp_path, capsys, monkeypatch):
    # as from a terminal: an xdist worker may have SIGINT ignored, and then there is no
    # Ctrl-C at all (faultsim.cli.exits installs its handler only over the default one)
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        _interrupt_after(monkeypatch, 5, sig)
        scenario = tmp_path / "small.toml"
        scenario.write_text(SMALL)
        reports = _reports(tmp_path / "out")
        reports["--json"].parent.mkdir()
        assert main(["run", str(scenario), "--crashes", "1", "--workers", "1", "--mode",
                     mode, *_flags(reports)]) == code
    finally:
        signal.signal(signal.SIGINT, before)
    out, err = capsys.readouterr()
    assert err.splitlines()[-1] == ("faultsim: interrupted" if sig == signal.SIGINT
                                    else "faultsim: terminated")
    data = json.loads(reports["--json"].read_text())
    partial = data["partial"]
    assert partial["reason"] == reason and data["ok"] is False
    assert partial["crash_states_judged"] == 5 == data["runs"][0]["crash_states"]
    planned = partial["crash_states_planned"]  # its kill points, one state each
    assert planned == 127
    assert partial["interrupted"] == "small" and partial["finished"] == []
    assert data["runs"][0]["kill_points_explored"] <= 5  # the rest unexplored, not passed
    documented = _partial_block()  # docs/reference/json-report.md names every key
    assert [k for k in partial if f'"{k}"' not in documented] == []
    line = f"PARTIAL REPORT: {reason} in small after judging 5 of {planned} crash states"
    assert line in out.splitlines()  # the console's table says it too
    junit = ET.parse(reports["--junit"]).getroot()
    first = junit.find("testsuite")
    assert first.get("name") == "faultsim [partial]"
    assert first.find("testcase/error").get("message") == line
    assert int(junit.get("errors")) >= 1
    assert reports["--summary-md"].read_text().splitlines()[0] == f"## faultsim: {line}"
    page = reports["--html"].read_text()
    assert f'<div class="partial" role="alert">{line}.' in page
    assert "<title>faultsim: partial</title>" in page
    assert sorted(os.listdir(tmp_path / "out")) == ["r.html", "r.json", "r.xml", "summary.md"]


@pytest.fixture(scope="module")
def whole(tmp_path_factory) -> dict[str, Path]:
    """The reports of SMALL, swept to its end, and what it printed."""
    folder = tmp_path_factory.mktemp("whole")
    scenario = folder / "small.toml"
    scenario.write_text(SMALL)
    reports = _reports(folder)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["run", str(scenario), "--crashes", "1", "--workers", "1",
                     *_flags(reports)]) == 0
    reports["stdout"] = out.getvalue()  # type: ignore[assignment]
    return reports


def test_a_run_that_was_not_interrupted_is_not_marked_partial(whole):
    """The other half of the guard: the same small sweep, run to its end, is whole."""
    data = json.loads(whole["--json"].read_text())
    assert "partial" not in data and data["ok"] is True and "PARTIAL" not in whole["stdout"]
    assert "[partial]" not in whole["--junit"].read_text()
    assert 'class="partial"' not in whole["--html"].read_text()
    assert whole["--summary-md"].read_text().startswith("## faultsim: all passed")


_SLOW_SWEEP = """
import os, sys, time
from faultsim.pipeline.sweep import Sweep
from faultsim.core.realfile import write_bytes
real = Sweep.record
def record(self, *args, **kwargs):
    real(self, *args, **kwargs)
    if not self.earlier and sum(len(r.verdicts) for r in self.runs.values()) == 3:
        write_bytes(sys.argv[1], b"")  # the test may send its signal now (the real file
        # system: this may run inside the agent's driver run, under pyfakefs)
        time.sleep(60)  # a sweep busy for a minute more
Sweep.record = record
from faultsim.cli import main
sys.exit(main(sys.argv[2:]))
"""


def test_ctrl_c_from_outside_ends_the_sweep_within_seconds_with_its_partial_json(tmp_path):
    """As a user or a CI runner does it: SIGINT to the faultsim process, mid-sweep."""
    ready, report = tmp_path / "ready", tmp_path / "r.json"
    proc = subprocess.Popen(
        [sys.executable, "-c", _SLOW_SWEEP, str(ready), "run", TINY, "--crashes", "1",
         "--workers", "1", "--json", str(report)], cwd=ROOT,
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        deadline = time.monotonic() + 60
        while not ready.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert ready.exists(), proc.stderr.read() if proc.poll() is not None else "no verdict"
        proc.send_signal(signal.SIGINT)
        sent = time.monotonic()
        assert proc.wait(timeout=20) == 130
        assert time.monotonic() - sent < 10
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    data = json.loads(report.read_text())
    assert data["partial"]["reason"] == "interrupted (SIGINT)"
    assert data["partial"]["crash_states_judged"] == 3
    assert proc.stderr.read().splitlines()[-1] == "faultsim: interrupted"


@pytest.mark.parametrize("status", [pytest.ExitCode.INTERRUPTED, pytest.ExitCode.OK])
def test_a_pytest_session_stopped_by_ctrl_c_leaves_its_page_marked_partial(status, whole,
                                                                           tmp_path):
    """The plugin's --faultsim-html page holds the faultsim tests that ended; a session
    ended by Ctrl-C (pytest's INTERRUPTED status) says so, one that ran to its end does
    not. (A faultsim test cut short inside its sweep is not on the page: pytest reports it
    as interrupted, not as a test with verdicts.)"""
    from types import SimpleNamespace

    from faultsim.pytest.summary import Summary

    page = tmp_path / "session.html"
    summary = Summary(SimpleNamespace(options=SimpleNamespace(html=str(page))))
    (run,) = json.loads(whole["--json"].read_text())["runs"]
    summary.runs = [["test_x.py::test_small", "whole scenario", run]]
    summary.pytest_sessionfinish(SimpleNamespace(config=SimpleNamespace(stash={})), status)
    text = page.read_text()
    data = json.loads(text.split('id="faultsim-data">')[1].split("</script>")[0]
                      .replace("<\\/", "</"))["report"]
    if status == pytest.ExitCode.OK:
        assert "partial" not in data and 'class="partial"' not in text
        return
    assert data["ok"] is False and data["partial"]["reason"] == "interrupted (SIGINT)"
    assert data["partial"]["crash_states_judged"] == run["crash_states"] == 127
    assert data["partial"]["finished"] == ["test_x.py::test_small"]
    assert ('<div class="partial" role="alert">PARTIAL REPORT: interrupted (SIGINT) after '
            "judging 127 crash states.") in text
    assert os.listdir(tmp_path) == ["session.html"]


def test_a_report_path_that_is_a_symbolic_link_keeps_the_link(tmp_path):
    """`--json latest.json` linked to a dated file: the dated file gets the report, the
    link stays (a temp file renamed over the path would replace the link with a file)."""
    from faultsim.reports.outfile import write_atomic

    dated = tmp_path / "2024-05-01.json"
    dated.write_text("old")
    link = tmp_path / "latest.json"
    link.symlink_to(dated.name)
    write_atomic(link, "new", what="--json")
    assert link.is_symlink() and os.readlink(link) == dated.name
    assert dated.read_text() == "new"
    assert sorted(os.listdir(tmp_path)) == ["2024-05-01.json", "latest.json"]


def test_the_plugins_page_path_is_checked_when_the_session_starts(pytester):
    pytester.makepyfile(test_nothing="def test_nothing():\n    pass\n")
    page = pytester.path / "no-such-folder" / "page.html"
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", f"--faultsim-html={page}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert (f"--faultsim-html {page}: the folder {page.parent} does not exist"
            in result.stderr.str())
    assert "1 passed" not in result.stdout.str()  # refused before any test ran
