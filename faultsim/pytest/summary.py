"""The session's faultsim summary: what each faultsim test explored (xdist workers' too:
user_properties travel with the report), printed at the end, and the session's HTML page;
a session stopped by Ctrl-C or SIGTERM leaves that page marked partial, with what the test
it stopped had judged."""
from __future__ import annotations

import json
import os
import re
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from .state import PluginState

_MAX_FAILURES_SHOWN = 20
# A faultsim test's setup report carries it (to an xdist controller, which collects nothing)
SETUP_PROPERTY = "faultsim_test"


class Summary:
    """Collects what each faultsim test explored (from xdist workers too: user_properties
    travel with the report) and prints it at the end."""

    def __init__(self, state: PluginState, controller: bool = True) -> None:
        self.state = state
        self.controller = controller  # not an xdist worker: the one to write the page
        self.entries: list = []
        self.runs: list = []  # (test, mode, a JSON report's run), for --faultsim-html
        self.current: str | None = None  # the test running now
        self.faultsim_tests = False  # the session collected some: SIGTERM is then handled
        self.cut: tuple | None = None  # (Partial's reason, the ModelRuns an interrupt carried)
        self.workers: set[int] = set()  # xdist workers (pids) that ran faultsim tests
        self.fulltrace = False  # --full-trace: Ctrl-C's whole traceback is printed
        self.ready = False  # what the stop path reads is read (`_ready_to_stop`)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtestloop(self, session: pytest.Session) -> Any:
        """SIGTERM (a CI job's timeout) ends a session with faultsim tests as Ctrl-C does
        (`SigtermInterrupt`): every `finally` of the sweep runs (its processes killed, its
        folders removed), pytest writes its reports and this page is left, marked partial.
        Only then, and only where SIGTERM had its default action: a session without
        faultsim tests, or one whose SIGTERM someone else handles, is left as it was.

        An xdist controller collects nothing: it learns of faultsim tests from their setup
        reports (`SETUP_PROPERTY`), and until one comes a SIGTERM takes its default action.
        Once it is interrupted, xdist stops its workers (SIGINT after 5 s, which unwinds
        their sweeps), and pytest writes the reports; a worker whose controller died
        without that gets SIGTERM from the kernel (`pytest_configure`)."""
        import signal

        from ..reports.interrupted import SigtermInterrupt

        xdist = self.controller and session.config.pluginmanager.has_plugin("dsession")
        if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL or not (
                self.faultsim_tests or xdist):
            return (yield)
        from ..cli.exits import sigterm_unwinds

        with sigterm_unwinds(SigtermInterrupt, only_if=lambda: self.faultsim_tests):
            return (yield)

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        self.fulltrace = bool(session.config.option.fulltrace)
        self.faultsim_tests = any({"crash_safety", "faultsim"} & set(
            getattr(item, "fixturenames", ())) for item in session.items)

    def pytest_runtest_logstart(self, nodeid: str, location: Any) -> None:
        self.current = nodeid

    @pytest.hookimpl(tryfirst=True)  # before pytest's terminal renders the traceback
    def pytest_keyboard_interrupt(self, excinfo: Any) -> None:
        from ..reports.interrupted import SigtermInterrupt, judged, reason, settle

        if self.faultsim_tests and (isinstance(excinfo.value, SigtermInterrupt)
                                    or not self.fulltrace):
            _shorten(excinfo)
        self.cut = (reason(excinfo.value), [settle(run) for run in judged(excinfo.value)])
        if self.controller:
            _stop_workers(self.workers)
        else:
            # an xdist worker ends with its session: its sweep has unwound (every `finally`
            # ran), and the interpreter's last collection over the sweep's heap would keep it
            # alive for seconds on a busy machine (over 6 s at load 15, seen in CI) after its
            # controller is gone
            from ..cli.exits import exiting_now

            exiting_now()

    @pytest.hookimpl(trylast=True)  # after pytest's terminal has printed the interrupt
    def pytest_unconfigure(self) -> None:
        if self.cut is not None and self.controller and self.faultsim_tests:
            # the interrupted session ends right after this, every report written: the
            # interpreter's last collection over a sweep's heap is 0.35 s of the 1.1 s
            # from SIGTERM to exit on a quiet machine (an xdist worker skips it above)
            from ..cli.exits import exiting_now

            exiting_now()

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when == "setup":
            for name, value in report.user_properties:
                if name == SETUP_PROPERTY:  # a faultsim test has started (an xdist worker's?)
                    if not self.ready:
                        _ready_to_stop()
                        self.ready = True
                    self.faultsim_tests = True
                    if int(value) != os.getpid():
                        self.workers.add(int(value))
        if report.when == "call" or (report.when == "setup" and report.skipped):
            self.entries += [(report.nodeid, json.loads(value))
                             for name, value in report.user_properties if name == "faultsim"]
            self.runs += [json.loads(value) for name, value in report.user_properties
                          if name == "faultsim_run"]

    @pytest.hookimpl(tryfirst=True)  # before pytest's --junitxml writes its file
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        path = self.state.options.html
        partial = None
        if exitstatus == pytest.ExitCode.INTERRUPTED:
            # Ctrl-C or SIGTERM: the tests that ended, and what the one stopped had judged
            from ..reports.interrupted import Partial

            why, cut = self.cut or ("interrupted (SIGINT)", [])
            finished = sorted({test for test, _, _ in self.runs})
            stopped = [(self.current, [run.to_json() for run in cut])] if cut else []
            # only an xdist session's folder: asked for elsewhere, pytest would make one now
            # and remove its old runs' (disk work on the way out of a stopped session)
            shared = (session_folder(session.config, self.controller)
                      if self.workers or not self.controller else None)
            if not self.controller:  # an xdist worker: its stopped test, to the controller
                if shared is not None:
                    _hand_over(shared, stopped)
            elif self.workers and shared is not None:
                stopped += _handed_over(shared, self.workers)
            self.runs += [(test, "whole scenario", run) for test, runs in stopped
                          for run in runs]
            partial = Partial(why, sum(r["crash_states"] for _, _, r in self.runs),
                              finished=finished,
                              interrupted=", ".join(t for t, _ in stopped) or None)
            _junit_property(session.config, "faultsim_partial", partial.headline())
        if path and self.controller:
            from ..reports.html import session_report, write_html

            page = session_report(self.runs)
            if partial is not None:
                page["ok"] = False
                page["partial"] = partial.to_json()
            write_html(page, path, what="--faultsim-html")

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if not self.entries:
            return
        shard = self.state.options.shard
        terminalreporter.write_sep("=", "faultsim" + (f" (shard {shard[0]}/{shard[1]})"
                                                      if shard else ""))
        for line in summary_lines(self.entries, self.state.options.budget):
            terminalreporter.write_line(line)
        for note in sorted({e["note"] for _, e in self.entries if "note" in e}):
            terminalreporter.write_line(f"note: {note}")
        if self.state.options.html and self.controller:
            terminalreporter.write_line(f"HTML report: {self.state.options.html}")


def _ready_to_stop() -> None:
    """Read now what a stopped session reads on its way out: this page's modules and assets
    and the module hypothesis's pytest plugin imports at every session's summary (with
    hypothesis, ~230 files). On a busy CI machine whose page cache had dropped them, each
    read after the signal waited on the disk: 20 s from SIGTERM to exit for 1 s of CPU."""
    import sys

    if "_hypothesis_pytestplugin" in sys.modules:  # its plugin is loaded (not `-p no:`)
        import hypothesis.internal.observability  # noqa: F401 - imported at its summary

    from ..reports import html

    html.ready()


def _shorten(excinfo: Any) -> None:
    """Cut an interrupt's traceback to its last shown entry. pytest's terminal renders the
    whole traceback (the source of each of a sweep's ~70 frames: 0.45 s of the 1.1 s from
    SIGTERM to exit, 20 s on a loaded CI machine) and prints only that entry's line
    (SIGTERM: its message alone; Ctrl-C: its crash line, unless --full-trace, which keeps
    all). The entries after it are hidden ones, which pytest leaves out anyway."""
    entries = excinfo.traceback
    for i in range(len(entries) - 1, -1, -1):
        if not entries[i].ishidden(excinfo):
            excinfo.traceback = entries[i:]
            return


# -- xdist: what the workers' stopped tests judged, handed to the controller ---------------
# The controller, interrupted, sends SIGTERM to each worker that ran a faultsim test (a
# worker turns it into an interrupt as the controller does), and waits for each to leave
# what its stopped test judged in the session's shared folder; xdist's own stop would
# only come 5 s later, as SIGINT, and bring nothing back to the controller.
_HAND_OVER_WAIT = 10.0  # seconds: a sweep unwinds in well under one


def session_folder(config: pytest.Config, controller: bool) -> Path | None:
    """The folder an xdist session's processes share: the controller's base temporary
    folder, the parent of each worker's (pytest removes it with old runs)."""
    try:
        base = config._tmp_path_factory.getbasetemp()
    except (AttributeError, OSError):
        return None
    return base if controller else base.parent


def _stop_workers(pids: set[int]) -> None:
    import signal

    for pid in pids:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass


def _hand_over(folder: Path, stopped: list) -> None:
    from ..reports.outfile import write_atomic

    write_atomic(folder / f"stopped-{os.getpid()}.json", json.dumps(stopped),
                 what="the stopped test's partial report")


def _handed_over(folder: Path, pids: set[int]) -> list:
    """What each worker's stopped test judged; a worker that leaves nothing within the
    wait (it died, or was not running a faultsim test) adds nothing."""
    import time

    deadline = time.monotonic() + _HAND_OVER_WAIT
    stopped, waiting = [], set(pids)
    while waiting and time.monotonic() < deadline:
        for pid in sorted(waiting):
            path = folder / f"stopped-{pid}.json"
            if path.exists():
                stopped += [tuple(entry) for entry in json.loads(path.read_text())]
                path.unlink()
                waiting.discard(pid)
            elif not _alive(pid):
                waiting.discard(pid)
        time.sleep(0.05)
    return stopped


def _alive(pid: int) -> bool:
    if not os.path.isdir("/proc/self"):  # no /proc (macOS): wait for its file, or the deadline
        return True
    try:
        with open(f"/proc/{pid}/stat") as f:  # a zombie (exited, not yet reaped) is gone
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _junit_property(config: pytest.Config, name: str, value: str) -> None:
    """A property of the session's --junitxml file (pytest's, written after this), as
    `record_testsuite_property` adds one; nothing without --junitxml."""
    from _pytest.junitxml import xml_key

    xml = config.stash.get(xml_key, None)
    if xml is not None:
        xml.add_global_property(name, value)


def summary_lines(entries: list, budget: float | None) -> list[str]:
    """Per test: kill points by category and crash model, verdicts; then each failure with
    the commands that rerun and replay it."""
    groups: dict[str, dict] = {}
    failures = []
    commands: dict[str, str | None] = {}
    for nodeid, entry in entries:
        g = groups.setdefault(entry["group"], {"models": {}, "skipped": 0, "items": 0,
                                               "mode": entry["mode"]})
        if entry["mode"] == "skipped":
            g["skipped"] += 1
            continue
        g["items"] += 1
        g.update(scenario=entry["scenario"], agent=entry["agent"],
                 total=entry["kill_points_total"], mode=entry["mode"])
        for model, m in entry["models"].items():
            agg = g["models"].setdefault(model, {
                "kill_points": 0, "categories": Counter(), "crash_states": 0,
                "violating": 0, "resumed": 0, "pairs": None, "probes": []})
            for key in ("kill_points", "crash_states", "violating", "resumed"):
                agg[key] += m[key]
            agg["categories"].update(m["categories"])
            agg["probes"] += m["probes"]
            if m["pairs"] is not None:
                pairs = agg["pairs"] or Counter()
                pairs.update(m["pairs"])
                agg["pairs"] = pairs
        failures += [(entry.get("rerun", nodeid), f) for f in entry["failures"]]
        # the command that reruns it with the session's --faultsim-* settings
        commands[entry.get("rerun", nodeid)] = entry.get("command")
    lines = []
    for group, g in sorted(groups.items()):  # xdist reports in completion order
        if not g["items"]:
            lines.append(f"{group}: {g['skipped']} kill points skipped (budget "
                         f"{budget:g} s spent)")
            continue
        how = "one item per kill point" if g["mode"] == "kill point" else "whole scenario"
        lines.append(f"{group} · {g['scenario']} · {g['agent']} ({how})")
        for model, m in g["models"].items():
            cats = ", ".join(f"{c} {n}" for c, n in _ordered(m["categories"]))
            lines.append(f"  {model:<8} {m['kill_points']}/{g['total']} kill points ({cats})")
            ok = m["crash_states"] - m["violating"]
            line = (f"{'':11}{m['crash_states']} crash states: {ok} ok, {m['violating']} "
                    f"violate ({m['resumed']} resumed)")
            pairs = m["pairs"]
            if pairs is not None:
                line += (f"; 2 crashes: {pairs['total']} schedules, {pairs['explored']} "
                         f"explored, {pairs['resumed']} resumed, {pairs['violating']} "
                         "violate")
            if m["probes"]:
                line += f"; version probe {'ok' if all(m['probes']) else 'VIOLATED'}"
            lines.append(line)
        if g["skipped"]:
            lines.append(f"  budget   {g['skipped']} kill points skipped: the budget of "
                         f"{budget:g} s was spent")
    if failures:
        from ..reports.counts import entries_in_words  # what each failure is, counted apart

        lines.append(f"violations: {entries_in_words([f for _, f in failures])}; the first "
                     "of each kind per test, with the commands that rerun and replay it")
        by_test: dict[str, list] = {}
        for nodeid, f in sorted(failures, key=lambda nf: (nf[0].split("[")[0],
                                                          _place(nf[1]["schedule"][0]))):
            by_test.setdefault(nodeid, []).append(f)
        shown = 0
        for n, (nodeid, found) in enumerate(by_test.items()):
            if shown >= _MAX_FAILURES_SHOWN:
                lines.append(f"  ... and {len(by_test) - n} more failing tests")
                break
            lines.append("  " + (commands.get(nodeid) or f"pytest '{nodeid}'"))
            kinds: set = set()
            for f in found:
                kind = (f["crash_model"], tuple(f["invariants"]))
                if kind in kinds:
                    continue
                kinds.add(kind)
                shown += 1
                lines.append(f"    {f['crash_model']}: {' then '.join(f['schedule'])}: "
                             f"{', '.join(f['invariants'])}")
                lines.append(f"      {f['replay']}")
            if len(found) > len(kinds):
                lines.append(f"    (and {len(found) - len(kinds)} more crash states of the "
                             "same kinds)")
    else:
        lines.append("violations: none")
    return lines


def _place(point_id: str) -> tuple[int, int]:
    """Where a kill point is in its run (event, byte offset), from its id: k41.512-..."""
    m = re.match(r"k(\d+)(?:\.(\d+))?-", point_id)
    return (int(m[1]), int(m[2] or 0)) if m else (-1, 0)


def _ordered(categories: Counter) -> list[tuple[str, int]]:
    from ..killpoints import CATEGORIES

    order = {c: n for n, c in enumerate(CATEGORIES)}
    return sorted(categories.items(), key=lambda kv: order.get(kv[0], len(order)))
