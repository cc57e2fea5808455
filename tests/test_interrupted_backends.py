"""SIGTERM (a CI job's timeout, `timeout`, a runner's cancel) ends a run within seconds on
every backend, and the run leaves the report of what it judged, marked partial, in every
form asked for; no process of the run is left (issue 51, item 6 and "What to build").

Each run is a process of its own, started the way a CI job starts it, under a launcher
that adopts every process the run leaves behind (PR_SET_CHILD_SUBREAPER): an orphan of
the run is reparented to the launcher, which lists what is still alive once faultsim has
exited. A hook in the run (`_HOOK`) marks the moment the N-th crash state has been
judged, through the one place each family of backends records one (`Sweep.record`: the
in-process and subprocess modes; `pipeline.crashes.line`: the command and Claude Agent SDK
backends), then keeps the sweep busy: the report must count exactly those N. Exactly:
the signal's exception is raised in the hook, after the N-th verdict is recorded, and
nothing is recorded once it unwinds the sweep (the in-process driver unwinds through the
agent's own code, whose `with` exits once re-entered the forking executor and collected
one more: tests/test_interrupted_forking.py)."""
from __future__ import annotations

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

ROOT = Path(__file__).resolve().parent.parent

# In the run: the moment the N-th first crash state is judged, a file says so; then the
# sweep stays busy (a long crash run) until the signal comes.
_HOOK = """
import os, sys, time
from faultsim.core.realfile import write_bytes
READY, AFTER = os.environ["FAULTSIM_TEST_READY"], int(os.environ["FAULTSIM_TEST_AFTER"])
ME = os.getpid()

def judged(count):
    if count == AFTER and os.getpid() == ME:
        write_bytes(READY, b"")  # the real file system (this may run under pyfakefs)
        time.sleep(120)

from faultsim.pipeline.sweep import Sweep
_record = Sweep.record
def record(self, *args, **kwargs):
    _record(self, *args, **kwargs)
    if not self.earlier:
        judged(sum(len(r.verdicts) for r in self.runs.values()))
Sweep.record = record

from faultsim.pipeline import crashes
_line, _count = crashes.line, [0]
def line(j):  # called once per state, right after the sweep appended it
    _count[0] += 1
    judged(_count[0])
    return _line(j)
crashes.line = line
"""

_CLI = _HOOK + """
from faultsim.cli import main
sys.exit(main(sys.argv[1:]))
"""

# Adopts the run's orphans, forwards SIGTERM to the run alone (as `timeout` does), and
# prints, as JSON: the run's exit status, the seconds from the signal to its exit, the CPU
# seconds it spent in them (a loaded machine stretches the first, not the second), where
# its main thread waited in them (sampled), and the processes still alive among those it
# left.
_LAUNCH = """
import ctypes, json, os, signal, sys, threading, time
ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
pid = os.fork()
if pid == 0:
    os.execv(sys.executable, [sys.executable, *sys.argv[1:]])
sent, spent = [], []
SIGNAL = getattr(signal, os.environ.get("FAULTSIM_TEST_SIGNAL", "SIGTERM"))
TICK = os.sysconf("SC_CLK_TCK")
def forward(signum, frame):
    sent.append(time.monotonic())
    try:  # the CPU seconds the run (and its children it reaped) had used so far
        fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
        spent.append(sum(int(f) for f in fields[11:15]) / TICK)
    except OSError:
        pass
    os.kill(pid, SIGNAL)
signal.signal(signal.SIGTERM, forward)
waits = {}  # after the signal, every 20 ms, the run's main thread: "R" (on or waiting for
def sample():  # a CPU), "D:<kernel function>" (waiting on the disk), "S:<...>" (asleep)
    while True:
        time.sleep(0.02)
        if not sent:
            continue
        try:
            state = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0]
            where = open(f"/proc/{pid}/wchan").read().strip() if state != "R" else ""
        except OSError:
            return
        if state == "Z":
            return
        key = f"{state}:{where}" if where else state
        waits[key] = waits.get(key, 0) + 1
threading.Thread(target=sample, daemon=True).start()
while True:
    try:
        _, status, usage = os.wait4(pid, 0)
        break
    except InterruptedError:
        pass
ended = time.monotonic()

def alive():
    found = []
    while True:  # reap the adopted ones that died
        try:
            if os.waitpid(-1, os.WNOHANG)[0] == 0:
                break
        except ChildProcessError:
            break
    for entry in os.listdir("/proc"):
        try:
            stat = open(f"/proc/{entry}/stat").read()
            cmd = open(f"/proc/{entry}/cmdline", "rb").read().replace(b"\\0", b" ")
        except (OSError, ValueError):
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[1]) == os.getpid() and fields[0] != "Z":
            found.append(f"{entry} {cmd.decode(errors='replace')[:200]}")
    return found

deadline = time.monotonic() + 5  # killed ones may take a moment to go
left = alive()
while left and time.monotonic() < deadline:
    time.sleep(0.05)
    left = alive()
for line in left:
    pid_ = int(line.split()[0])
    try:
        os.kill(pid_, signal.SIGKILL)
    except ProcessLookupError:
        pass
print(json.dumps({"status": os.waitstatus_to_exitcode(status),
                  "seconds": ended - sent[0] if sent else None,
                  "cpu": usage.ru_utime + usage.ru_stime - spent[0] if spent else None,
                  "left": left, "waits": dict(sorted(waits.items(), key=lambda kv: -kv[1]))}))
"""


def run_terminated(argv: list[str], folder: Path, after: int, *, ready_within: float = 180,
                   cwd: Path = ROOT, env: dict | None = None) -> dict:
    """Run `python ARGV` under the launcher; once `after` crash states are judged, SIGTERM
    it; what the launcher found, with the run's stdout and stderr."""
    ready = folder / "ready"
    environ = {**os.environ, **(env or {}), "FAULTSIM_TEST_READY": str(ready),
               "FAULTSIM_TEST_AFTER": str(after)}
    proc = subprocess.Popen([sys.executable, "-c", _LAUNCH, *argv], cwd=cwd,
                            env=environ, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + ready_within
        while not ready.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)  # polling the file the run writes
        if not ready.exists():
            proc.kill()
            out, err = proc.communicate()
            pytest.fail(f"no crash state judged in {ready_within} s:\n{out[-3000:]}\n"
                        f"{err[-3000:]}")
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    found = json.loads(out.splitlines()[-1])
    found["stdout"], found["stderr"] = "\n".join(out.splitlines()[:-1]), err
    return found


def _said(found: dict) -> str:
    """The launcher's figures as a failure message pytest shows whole (a dict it cuts)."""
    return json.dumps({k: found.get(k) for k in ("seconds", "cpu", "waits", "left")})


def _reports(folder: Path) -> dict[str, Path]:
    return {"--json": folder / "r.json", "--junit": folder / "r.xml",
            "--html": folder / "r.html", "--summary-md": folder / "summary.md"}


def assert_ended_partial(found: dict, reports: dict[str, Path], judged: int,
                         scenario: str) -> dict:
    """The run ended as SIGTERM ends it, within seconds, nothing left running, and every
    report says it is partial and counts the `judged` crash states it judged."""
    assert found["status"] == 128 + signal.SIGTERM, found["stderr"][-3000:]
    assert found["seconds"] < 10, _said(found)
    assert found["left"] == [], found["left"]
    assert found["stderr"].splitlines()[-1] == "faultsim: terminated"
    data = json.loads(reports["--json"].read_text())
    partial = data["partial"]
    assert data["ok"] is False and partial["reason"] == "terminated (SIGTERM)"
    assert partial["crash_states_judged"] == judged == sum(
        r["crash_states"] for r in data["runs"])
    assert partial["interrupted"] == scenario and partial["finished"] == []
    planned = partial["crash_states_planned"]
    assert planned is None or planned > judged
    line = (f"PARTIAL REPORT: terminated (SIGTERM) in {scenario} after judging {judged}"
            + ("" if planned is None else f" of {planned}") + " crash states")
    assert line in found["stdout"].splitlines()
    junit = ET.parse(reports["--junit"]).getroot()
    assert junit.find("testsuite").get("name") == "faultsim [partial]"
    assert junit.find("testsuite/testcase/error").get("message") == line
    assert reports["--summary-md"].read_text().splitlines()[0] == f"## faultsim: {line}"
    page = reports["--html"].read_text()
    assert f'<div class="partial" role="alert">{line}.' in page
    assert sorted(os.listdir(reports["--json"].parent)) == sorted(
        p.name for p in reports.values())  # no temp file beside them
    return data


def _flags(reports: dict[str, Path]) -> list[str]:
    return [x for option, path in reports.items() for x in (option, str(path))]


def _run(tmp_path: Path, *args: str, after: int, **kw) -> tuple[dict, dict[str, Path]]:
    out = tmp_path / "out"
    out.mkdir()
    reports = _reports(out)
    found = run_terminated(["-c", _CLI, "run", *args, *_flags(reports)], tmp_path, after,
                           **kw)
    return found, reports


@pytest.mark.parametrize("mode", ["in-process", "subprocess"])
def test_sigterm_ends_a_python_agents_sweep_with_its_partial_reports(mode, tmp_path):
    """The reference agent on tiny.toml, one crash per schedule: in-process (forked
    workers) and in subprocess mode (fork servers, a redis-less store)."""
    found, reports = _run(tmp_path, str(DATA / "tiny.toml"), "--crashes", "1", "--mode",
                          mode, "--workers", "2", after=3)
    data = assert_ended_partial(found, reports, 3, "tiny")
    assert data["runs"][0]["mode"] == mode


def test_sigterm_ends_a_commands_sweep_with_its_partial_reports(tmp_path):
    """An agent run as a command (cmd:, the command backend: strace, a jail, a process
    group per incarnation)."""
    from faultsim.command.syscalls import strace_unavailable

    if strace_unavailable() is not None:
        pytest.skip(f"strace: {strace_unavailable()}")
    agent = f"cmd:{sys.executable} {ROOT / 'tests' / 'command_agents' / 'raw_agent.py'}"
    found, reports = _run(tmp_path, str(ROOT / "examples" / "any_language" /
                                        "scenario.toml"),
                          "--agent", agent, "--crash-model", "process", after=2)
    data = assert_ended_partial(found, reports, 2, "any_language_pay")
    assert data["runs"][0]["agent"] == agent


def test_sigterm_ends_a_claude_agent_sdk_sweep_with_its_partial_reports(tmp_path):
    """A Claude Agent SDK agent (its own CLI processes, the loopback fake model)."""
    pytest.importorskip("claude_agent_sdk", reason="claude-agent-sdk is not installed")
    example = ROOT / "examples" / "claude_agent_sdk"
    agent = f"claude-agent-sdk:{example / 'claude_billing_agent.py'}:run_billing"
    found, reports = _run(tmp_path, str(example / "scenario.toml"), "--agent", agent,
                          "--no-transcript-writes", after=1)
    assert_ended_partial(found, reports, 1, "cs_billing")


_PYTEST_TEST = """
import pytest

@pytest.mark.faultsim(scenario={tiny!r}, agent="reference_agent", crashes=1)
def test_tiny(crash_safety):
    crash_safety.check()
"""


# What the session does on its way out once stopped, beyond writing its own outputs (an
# audit hook, from the moment the hook above starts waiting for the signal): on a busy CI
# machine whose page cache had dropped the files, each module imported or file read there
# waited on the disk (20 s from SIGTERM to exit for 1 s of CPU, twice, before
# `summary._ready_to_stop`); pytest made and cleaned a base temp folder when asked for it.
_AFTER = """
import atexit, json
_seen = []
def _audit(event, args):
    if event in ("import", "open", "os.mkdir", "os.rmdir", "os.remove", "os.rename",
                 "os.scandir", "os.listdir", "shutil.rmtree") and os.path.exists(READY):
        _seen.append([event, str(args[0])])
if os.getpid() == ME:
    sys.addaudithook(_audit)
    atexit.register(lambda: write_bytes(os.path.join(os.path.dirname(READY), "after.json"),
                                        json.dumps(_seen).encode()))
"""


def _strays(after: list, folder: Path) -> list:
    """What the stopped session did on its way out outside `folder` (its outputs), besides
    reading Python sources (pytest prints the stopped line of code), the scenario (its
    fingerprint, one small file) and the sweep's own shared-memory folder (removed)."""
    return [[event, path] for event, path in after if event == "import" or not (
        path.startswith(str(folder)) or path.startswith("/dev/shm/faultsim-")
        or (event == "open" and (path.endswith(".py") or path == str(DATA / "tiny.toml"))))]


def _asleep(found: dict) -> float:
    """Seconds the run's main thread was seen asleep after the signal (sampled every 20 ms)."""
    return 0.02 * sum(n for where, n in found["waits"].items() if where.startswith("S"))


def test_sigterm_ends_a_pytest_session_with_its_partial_page_and_junit(tmp_path):
    """The pytest plugin: a session with a faultsim test, SIGTERMed inside its sweep, ends
    as pytest ends an interrupted one (exit 2, its --junitxml written, here with a
    `faultsim_partial` property) within seconds, reading no module on its way out, and
    the --faultsim-html page holds what the stopped test had judged, marked partial."""
    (tmp_path / "conftest.py").write_text(_HOOK + _AFTER)
    (tmp_path / "test_stopped.py").write_text(_PYTEST_TEST.format(tiny=str(DATA /
                                                                           "tiny.toml")))
    page, junit = tmp_path / "page.html", tmp_path / "junit.xml"
    found = run_terminated(["-m", "pytest", "-q", "-p", "no:randomly", "-p", "no:xdist",
                            "-p", "no:cacheprovider", "test_stopped.py", "--junitxml",
                            str(junit), "--faultsim-html", str(page)], tmp_path, 3,
                           cwd=tmp_path, env={"PYTHONPATH": str(ROOT)})
    assert found["status"] == pytest.ExitCode.INTERRUPTED, found["stdout"][-3000:]
    # after the signal: under a second of CPU (quiet machine: 0.3 s), no module read (each
    # read waited on the disk of a loaded CI machine: 20 s), and within seconds of wall; a
    # slower end is allowed only where the run was never asleep (it was on, or waiting for,
    # a CPU or the disk its reports are synced to), never waiting on a child or a timer
    after = json.loads((tmp_path / "after.json").read_text())
    assert ["open", str(junit)] in after  # seen to the end: pytest writes it last
    assert _strays(after, tmp_path) == []
    assert found["cpu"] < 3 and found["left"] == [], _said(found)
    assert found["seconds"] < 10 or (found["seconds"] < 30 and _asleep(found) < 1), \
        _said(found)
    assert "!!! faultsim.reports.interrupted.SigtermInterrupt !!!" in found["stdout"]
    text = page.read_text()
    data = json.loads(text.split('id="faultsim-data">')[1].split("</script>")[0]
                      .replace("<\\/", "</"))["report"]
    partial = data["partial"]
    line = ("PARTIAL REPORT: terminated (SIGTERM) in test_stopped.py::test_tiny after "
            "judging 3 crash states")
    assert data["ok"] is False and partial["crash_states_judged"] == 3
    assert partial["interrupted"] == "test_stopped.py::test_tiny"
    assert [r["crash_states"] for r in data["runs"]] == [3]
    assert f'<div class="partial" role="alert">{line}.' in text
    properties = {p.get("name"): p.get("value") for p in
                  ET.parse(junit).getroot().iter("property")}
    assert properties["faultsim_partial"] == line
    # no temp file beside them (the session's byte-code cache is Python's)
    assert sorted(set(os.listdir(tmp_path)) - {"__pycache__"}) == [
        "after.json", "conftest.py", "junit.xml", "page.html", "ready", "test_stopped.py"]


def _xdist_session(tmp_path: Path) -> tuple[list[str], Path, Path]:
    (tmp_path / "conftest.py").write_text(_HOOK)
    (tmp_path / "test_stopped.py").write_text(_PYTEST_TEST.format(tiny=str(DATA /
                                                                           "tiny.toml")))
    page, junit = tmp_path / "page.html", tmp_path / "junit.xml"
    return (["-m", "pytest", "-q", "-p", "no:randomly", "-p", "no:cacheprovider", "-n", "2",
             "test_stopped.py", "--junitxml", str(junit), "--faultsim-html", str(page)],
            page, junit)


def test_sigterm_ends_an_xdist_session_with_what_its_workers_judged(tmp_path):
    """Under pytest-xdist SIGTERM reaches the controller alone (a CI runner's cancel,
    `timeout`): the controller ends as on Ctrl-C, stops the worker running the faultsim
    test, and its page and --junitxml count what that worker had judged. Before, the
    controller died at once, leaving its workers to sweep on for minutes, and no report."""
    argv, page, junit = _xdist_session(tmp_path)
    found = run_terminated(argv, tmp_path, 3, cwd=tmp_path, env={"PYTHONPATH": str(ROOT)})
    assert found["status"] == pytest.ExitCode.INTERRUPTED, found["stdout"][-3000:]
    # xdist's own teardown of its workers takes up to 5 s of this; as above, a slower end
    # only where the controller was never asleep (CI, 4 test workers on 2 cores: 17.4 s,
    # 14.6 of them runnable and waiting for a core, 0.3 s asleep, for 3.7 s of CPU)
    assert found["left"] == [], _said(found)
    assert found["seconds"] < 15 or (found["seconds"] < 30 and _asleep(found) < 1), \
        _said(found)
    text = page.read_text()
    data = json.loads(text.split('id="faultsim-data">')[1].split("</script>")[0]
                      .replace("<\\/", "</"))["report"]
    line = ("PARTIAL REPORT: terminated (SIGTERM) in test_stopped.py::test_tiny after "
            "judging 3 crash states")
    assert data["partial"]["crash_states_judged"] == 3
    assert [r["crash_states"] for r in data["runs"]] == [3]
    assert f'<div class="partial" role="alert">{line}.' in text
    properties = {p.get("name"): p.get("value") for p in
                  ET.parse(junit).getroot().iter("property")}
    assert properties["faultsim_partial"] == line


def test_an_xdist_worker_does_not_outlive_its_killed_controller(tmp_path):
    """SIGKILL of the controller runs none of its code: the kernel's SIGTERM on its death
    stops each worker (Linux), which unwinds its sweep; nothing is left running."""
    argv, _, _ = _xdist_session(tmp_path)
    found = run_terminated(argv, tmp_path, 3, cwd=tmp_path,
                           env={"PYTHONPATH": str(ROOT), "FAULTSIM_TEST_SIGNAL": "SIGKILL"})
    assert found["status"] == -signal.SIGKILL
    assert found["left"] == [], found


def test_a_session_without_faultsim_tests_keeps_sigterms_default_action(tmp_path):
    """The other half: the plugin is loaded in every session of an environment with
    faultsim installed, and handles SIGTERM only in one that has faultsim tests."""
    (tmp_path / "test_plain.py").write_text(
        "import os, pathlib, signal, time\n"
        "def test_plain():\n"
        "    os.kill(os.getpid(), signal.SIGTERM)\n"
        "    time.sleep(30)\n")
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:randomly", "-p",
                           "no:xdist", "-p", "no:cacheprovider", "test_plain.py"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert done.returncode == -signal.SIGTERM, done.stdout


# The second signal of one cancel (a CI runner's SIGINT then SIGTERM, `timeout` and a group
# kill both signalling), sent as the Explorer takes the fake file system down.
_SECOND_SIGNAL = """
import os, signal, time
import pytest
from pyfakefs.fake_filesystem_unittest import Patcher
from faultsim.core.realfile import write_bytes

_tear_down = Patcher.tearDown
def tear_down(self, *args, **kwargs):
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(0.5)  # the handler runs here, at the first bytecode after the signal
    return _tear_down(self, *args, **kwargs)
Patcher.tearDown = tear_down

@pytest.hookimpl(tryfirst=True)
def pytest_keyboard_interrupt(excinfo):
    import os.path
    write_bytes(os.environ["FAULTSIM_TEST_READY"] + ".os", type(os.path).__name__.encode())
"""


def test_a_second_signal_while_the_sweep_unwinds_does_not_cut_its_clean_up(tmp_path):
    """One cancel often signals twice. The first SIGTERM unwinds the sweep; a second one
    landing in its clean-up raised again there, skipping the rest of it: the fake file
    system stayed installed over the rest of the session (pytest's traceback, its
    reports), slow enough on a busy machine to outlive a killed xdist controller by
    seconds. A repeat within seconds of the first is the same cancel, and absorbed."""
    (tmp_path / "conftest.py").write_text(_HOOK + _SECOND_SIGNAL)
    (tmp_path / "test_stopped.py").write_text(_PYTEST_TEST.format(tiny=str(DATA /
                                                                           "tiny.toml")))
    found = run_terminated(["-m", "pytest", "-q", "-p", "no:randomly", "-p", "no:xdist", "-p",
                            "no:cacheprovider", "test_stopped.py"], tmp_path, 3, cwd=tmp_path,
                           env={"PYTHONPATH": str(ROOT)})
    assert found["status"] == pytest.ExitCode.INTERRUPTED, found["stdout"][-3000:]
    # the second signal came, at the fake file system's tear-down, and was absorbed there
    assert (tmp_path / "ready.os").read_text() == "module", found["stderr"][-3000:]
    assert found["left"] == []


def _deep(depth: int, exc: BaseException) -> None:
    __tracebackhide__ = depth == 0  # noqa: F841 (pytest reads it): the last frame hidden
    if depth == 0:
        raise exc
    _deep(depth - 1, exc)


@pytest.mark.parametrize("interrupt", ["SigtermInterrupt", "KeyboardInterrupt"])
def test_an_interrupts_traceback_is_cut_to_the_entry_pytest_prints(interrupt):
    """pytest renders an interrupt's whole traceback (the source of every frame: 0.45 s of
    the 1.1 s a sweep took from SIGTERM to exit) and prints one entry of it: the plugin cuts
    the traceback to that entry (the last not hidden; hidden ones after it stay), so the
    line printed is the same, from one rendered frame instead of ~70."""
    from _pytest._code import ExceptionInfo

    from faultsim.pytest.summary import _shorten
    from faultsim.reports.interrupted import SigtermInterrupt

    kind = SigtermInterrupt if interrupt == "SigtermInterrupt" else KeyboardInterrupt
    try:
        _deep(60, kind())
    except BaseException:
        whole = ExceptionInfo.from_current()
    cut = ExceptionInfo.from_exception(whole.value)
    _shorten(cut)
    assert len(whole.traceback) == 62 and len(cut.traceback) == 2
    assert not cut.traceback[0].ishidden(cut) and cut.traceback[1].ishidden(cut)
    shown, kept = whole.getrepr(funcargs=True), cut.getrepr(funcargs=True)
    assert str(kept.reprcrash) == str(shown.reprcrash)
    assert len(kept.reprtraceback.reprentries) == 1 < len(shown.reprtraceback.reprentries)
