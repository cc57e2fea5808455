"""Subprocess mode: real processes on a real directory, killed by a real SIGKILL.

Each claim is checked against the in-process mode or against what is on disk: the two
modes find the same kill points and give the same verdict at each of them, every kill is
a counted SIGKILL, a torn write leaves exactly the bytes that reached the kernel, SQLite
kill points split real transactions, and no process outlives faultsim.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid

import pytest

import faultsim
from faultsim.settings.loading import load_factory
from faultsim.errors import AgentFailedCleanly, SandboxEscape, StoreNeedsSubprocess
from faultsim.real.explore import SubprocessModeError, explore_subprocess
from faultsim.real.pool import MARKER, sandbox_parent
from reference_agent.mutants import DOUBLE_CRASH_NAMES, NAMES

from conftest import DATA, ROOT
from helpers import by_point, part_of, same_points

TINY = DATA / "tiny.toml"
AGENTS = ["reference_agent"] + [f"reference_agent.mutants.{n}"
                                for n in NAMES + DOUBLE_CRASH_NAMES]


@pytest.mark.parametrize("agent", AGENTS)
def test_verdicts_agree_with_the_in_process_mode(agent):
    scenario = faultsim.load_scenario(TINY)
    stats: dict = {}
    # the reference agent on every kill point; each mutant on every other one (CI time)
    only = None if agent == "reference_agent" else part_of(1, 2)
    real = explore_subprocess(agent, scenario, workers=2, stats=stats, only=only)
    model = faultsim.explore(load_factory(agent), scenario, crash_model="process",
                             crashes=1, workers=2, only=same_points(real))
    (run,) = real.runs
    # every kill landed, as a SIGKILL the server saw, before any verdict counts
    assert stats["kills_landed"] == len(run.explored) == len(run.verdicts) > 100
    assert [p.id for p in run.kill_points] == [p.id for p in model.runs[0].kill_points]
    assert by_point(real) == by_point(model)
    if any(v.violations for v in model.runs[0].verdicts):
        assert not real.ok  # the mutant is caught for real, not only in the model
    if agent == "reference_agent":
        assert real.ok and stats["resumed"] < stats["crash_states"]
        # no resumed run is cut here, and the report says why (in process, the same
        # sweep tries convergence: None)
        assert "subprocess mode" in run.convergence and run.converged == 0
        assert model.runs[0].convergence is None


def test_shared_verdicts_equal_resuming_every_distinct_state():
    """This mode's memo (`real/judging.py`): equal crash states (files and world) are
    resumed once, and states that differ only in a file the first one's resumed run
    destroyed unread share its verdict. Sharing only the equal ones
    (`equivalences=False`) must give the same verdicts, the mutant's failures included;
    the kill points are those around checkpoint writes, where the states differ in it."""
    agent = "reference_agent.mutants.overwrite_in_place"  # caught at its torn checkpoint
    scenario = faultsim.load_scenario(TINY)
    only = lambda p: p.torn or "checkpoint" in p.where  # noqa: E731
    counts: dict = {}
    reports = {}
    for equivalences in (True, False):
        stats: dict = {}
        reports[equivalences] = explore_subprocess(agent, scenario, workers=2, only=only,
                                                   stats=stats, equivalences=equivalences)
        counts[equivalences] = stats
    assert by_point(reports[True]) == by_point(reports[False])
    assert not reports[True].ok  # the mutant is caught, and caught the same either way
    on, off = counts[True], counts[False]
    assert on["crash_states"] == off["crash_states"] > 20
    assert on["resumed"] < off["resumed"] <= off["crash_states"]
    (run,) = reports[True].runs
    assert run.judged + run.reused == len(run.verdicts) and run.reused > 0


def test_each_crash_run_of_the_replaying_path_dies_by_sigkill():
    """Without a fork server each crash run is a fresh interpreter that replays the
    prefix and SIGKILLs itself at its point (and pays the imports: the bench's
    baseline)."""
    scenario = faultsim.load_scenario(TINY)
    stats: dict = {}
    report = explore_subprocess("reference_agent", scenario, workers=2, fork_server=False,
                                only=lambda p: p.index == 21 or p.torn and p.offset == 1 and p.index < 15,
                                stats=stats)
    (run,) = report.runs
    assert stats["kills_landed"] == len(run.explored) >= 2
    assert report.ok


def test_a_torn_write_leaves_the_bytes_that_landed():
    scenario = faultsim.load_scenario(TINY)
    model = faultsim.explore(load_factory("reference_agent"), scenario, crash_model="process",
                             crashes=1, workers=0, only=lambda p: p.torn)
    torn = [p for p in model.runs[0].explored if "checkpoint.json.tmp" in p.where][3]
    report = explore_subprocess("reference_agent", scenario, workers=1,
                                only=lambda p: p.id == torn.id)
    (verdict,) = report.runs[0].verdicts
    files = verdict.state.as_dict()
    (expected,) = [v.state.as_dict() for v in model.runs[0].verdicts
                   if v.kill_point.id == torn.id]
    tmp = [k for k in files if k.endswith("checkpoint.json.tmp")][0]
    assert len(files[tmp]) == torn.offset  # a new temp file: exactly `offset` bytes landed
    assert files == expected  # and the whole directory is what the model predicts


def test_sqlite_kill_points_split_real_transactions():
    scenario = faultsim.load_scenario(DATA / "tiny_sqlite.toml")
    stats: dict = {}
    report = explore_subprocess("reference_agent", scenario, workers=2, stats=stats)
    (run,) = report.runs
    assert report.ok, report.counterexamples(limit=1)
    kinds = {p.where.split()[1] for p in run.kill_points if not p.torn and p.index}
    assert {"sqlite.begin", "sqlite.exec", "sqlite.commit"} <= kinds
    # kills between INSERT and COMMIT left a real open transaction behind: a journal file
    # that the resumed run's SQLite rolled back
    hot = [v for v in run.verdicts if "sqlite.exec INSERT" in v.kill_point.where]
    assert hot and all("store.db-journal" in v.state.as_dict() for v in hot)
    assert stats["kills_landed"] == len(run.verdicts)


def test_a_save_in_two_sqlite_transactions_is_caught_between_them():
    scenario = faultsim.load_scenario(DATA / "tiny_sqlite.toml")
    report = explore_subprocess("tests.broken_agents:sqlite_two_transactions", scenario, workers=2)
    failures = report.runs[0].failures
    assert failures
    assert all("sqlite.exec DELETE" in v.kill_point.where for v in failures)
    assert {x.invariant for v in failures for x in v.violations} >= {
        "progress_recorded_once", "effects_exactly_once"}


def test_the_in_process_mode_refuses_a_database_store():
    scenario = faultsim.load_scenario(DATA / "tiny_sqlite.toml")
    with pytest.raises(StoreNeedsSubprocess, match="subprocess mode"):
        faultsim.explore(load_factory("reference_agent"), scenario)


def test_subprocess_mode_refuses_the_power_model():
    with pytest.raises(SubprocessModeError, match="power loss cannot be staged"):
        explore_subprocess("reference_agent", faultsim.load_scenario(TINY),
                           crash_model="power")


def test_a_hanging_resume_is_stopped_and_reported():
    scenario = faultsim.load_scenario(TINY)
    report = explore_subprocess("tests.broken_agents:hangs_on_resume", scenario, workers=2,
                                timeout=1.0, only=lambda p: p.id.startswith("k21-"))
    (verdict,) = report.runs[0].verdicts
    assert "hung" in verdict.violations[0].explanation


@pytest.mark.parametrize("agent,answer,says", [
    # a clean run that answers the wrong thing; one that fails
    ("reference_agent", "Something else.", "is not the scenario's expected_final_answer"),
    ("tests.broken_agents:raises_on_start", None, "RuntimeError: cannot read my configuration"),
])
def test_both_modes_refuse_a_failing_clean_run_in_the_same_words(agent, answer, says,
                                                                 tmp_path):
    scenario = faultsim.load_scenario(TINY)
    if answer is not None:
        changed = tmp_path / "tiny.toml"
        line = f'expected_final_answer = "{scenario.expected_final_answer}"'
        changed.write_text(TINY.read_text().replace(line, f'expected_final_answer = "{answer}"'))
        scenario = faultsim.load_scenario(changed)
    with pytest.raises(AgentFailedCleanly) as real:
        explore_subprocess(agent, scenario, workers=1)
    with pytest.raises(AgentFailedCleanly) as model:
        faultsim.explore(load_factory(agent), scenario, crashes=1, workers=0)
    assert str(real.value) == str(model.value)
    assert says in str(real.value)


def test_a_write_outside_the_sandbox_is_refused(tmp_path):
    scenario = faultsim.load_scenario(TINY)
    before = os.path.exists("/tmp/faultsim-escape-test.log")
    # the finding in-process too (tests/test_sandbox_escape.py compares the two modes)
    with pytest.raises(SandboxEscape, match="the clean run wrote outside its workdir: open "
                       "for writing /tmp/faultsim-escape-test.log"):
        explore_subprocess("tests.broken_agents:escapes_sandbox", scenario, workers=1)
    assert os.path.exists("/tmp/faultsim-escape-test.log") == before


# -- no process outlives faultsim ----------------------------------------------------------
def _marked(marker: str) -> list[int]:
    """Live processes whose environment carries this run's marker."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                if f"{MARKER}={marker}".encode() in f.read().split(b"\0"):
                    with open(f"/proc/{entry}/stat", "rb") as s:
                        if s.read().split(b") ")[-1][:1] != b"Z":  # zombies are dead
                            pids.append(int(entry))
        except OSError:
            pass
    return pids


def _start_long_run(marker: str) -> subprocess.Popen:
    env = {**os.environ, MARKER: marker, "PYTHONPATH": str(ROOT)}
    stderr = tempfile.TemporaryFile()  # kept: a run that does not exit shows where it is
    # as from a terminal: an xdist worker runs with SIGINT ignored, which a child inherits
    # (and Python then installs no KeyboardInterrupt handler): Ctrl-C would never arrive
    proc = subprocess.Popen([sys.executable, "-m", "faultsim.cli", "run",
                             str(ROOT / "scenarios" / "support_tickets.toml"), "--mode",
                             "subprocess", "--workers", "2"], cwd=ROOT, env=env,
                            stdout=subprocess.DEVNULL, stderr=stderr,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    proc.stderr_file = stderr
    return proc


def _where_it_is(proc) -> str:
    """The stacks of a faultsim that did not exit (it dumps them on SIGUSR2)."""
    try:
        proc.send_signal(signal.SIGUSR2)
        time.sleep(1.0)
        proc.stderr_file.seek(0)
        return proc.stderr_file.read().decode(errors="replace")[-6000:]
    except OSError as exc:
        return f"(no stack dump: {exc})"


def _wait_for(condition, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return condition()


def _run_folders(marker: str) -> set[str]:
    """The run folders of this run's fork servers and children: their last argument."""
    folders = set()
    for pid in _marked(marker):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = f.read().decode().split("\0")[:-1]
        except OSError:
            continue
        if "faultsim.real.server" in argv:
            folders.add(argv[-1])
    return folders


def _test_marker() -> str:
    # an extension of the session's marker: conftest removes what a failing test left
    return f"{os.environ.get(MARKER, 'test')}-{uuid.uuid4().hex[:8]}"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="uses /proc")
@pytest.mark.parametrize("how", [signal.SIGKILL, signal.SIGINT, signal.SIGTERM])
def test_no_process_outlives_faultsim(how):
    """Nor its run folder in /dev/shm: faultsim removes it on the way out (SIGINT,
    SIGTERM), its fork servers when faultsim is killed (SIGKILL)."""
    marker = _test_marker()
    proc = _start_long_run(marker)
    try:
        # the servers are up and children are being forked: more than faultsim itself
        assert _wait_for(lambda: len(_marked(marker)) >= 3, 60), "the run never started"
        time.sleep(1.0)  # well into the sweep
        folders = _run_folders(marker)
        # one folder, named after the run, there while it runs (so its absence counts)
        assert len(folders) == 1, folders
        (folder,) = folders
        parent = sandbox_parent() or tempfile.gettempdir()
        assert folder.startswith(os.path.join(parent, f"faultsim-{marker}-"))
        assert os.path.isdir(os.path.join(folder, "sandbox-0")), os.listdir(folder)
        _kill_and_check_nothing_left(proc, how, marker, folder)
        if how == signal.SIGTERM:
            assert proc.returncode == 128 + signal.SIGTERM
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _kill_and_check_nothing_left(proc, how, marker: str, folder: str) -> None:
    proc.send_signal(how)
    # Unwinding signals every fork server at once (they kill their child and exit) and
    # freezes the heap before the interpreter's last collection: about half a second at a
    # load of 10 on 2 cores (a sequential two-second stop per server before).
    # 30 s leaves room for a machine far busier than that, not for a slow path: past it,
    # the failure shows where faultsim was (its stacks, dumped on SIGUSR2).
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        pytest.fail(f"faultsim did not exit within 30 s of {how.name}; where it was:\n"
                    f"{_where_it_is(proc)}")
    assert _wait_for(lambda: not _marked(marker), 10), \
        f"left behind after {how.name}: {_marked(marker)}"
    assert _wait_for(lambda: not os.path.exists(folder), 10), \
        f"{folder} left behind after {how.name}: {os.listdir(folder)}"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="uses /proc")
@pytest.mark.parametrize("how", [signal.SIGKILL, signal.SIGTERM])
def test_no_run_folder_outlives_faultsim_killed_while_servers_start(how):
    """Killed before the servers are ready (still in Python's start-up or their imports):
    a server that has no handler yet keeps the death signal blocked until it has one."""
    marker = _test_marker()
    proc = _start_long_run(marker)
    try:
        assert _wait_for(lambda: _run_folders(marker), 60), "no server started"
        (folder,) = _run_folders(marker)
        assert os.path.isdir(folder)
        _kill_and_check_nothing_left(proc, how, marker, folder)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


# -- Redis -------------------------------------------------------------------------------
REDIS = DATA / "tiny_redis.toml"


def test_reference_agent_passes_on_a_real_redis(redis_server):  # skip without redis-server
    stats: dict = {}
    report = explore_subprocess("reference_agent", faultsim.load_scenario(REDIS), workers=2,
                                stats=stats)
    (run,) = report.runs
    assert report.ok, report.counterexamples(limit=1)
    assert stats["kills_landed"] == len(run.verdicts)
    wheres = [p.where for p in run.kill_points]
    # one MULTI/EXEC per save, each queued command a kill point of its own
    assert any("redis.multi" in w for w in wheres) and any("redis.exec" in w for w in wheres)
    assert any("redis.set" in w and "queued" in w for w in wheres)
    # the crash states hold the database: the checkpoint key is there mid-run
    assert any("@redis/faultsim/tiny_redis/checkpoint" in v.state.as_dict()
               for v in run.verdicts)


def test_redis_two_writes_is_caught_between_its_two_writes(redis_server):
    report = explore_subprocess("reference_agent.mutants.redis_two_writes",
                                faultsim.load_scenario(REDIS), workers=2)
    failures = report.runs[0].failures
    assert failures
    assert all(v.kill_point.where.split()[1] == "redis.set" for v in failures)
    assert "a save was torn from its log entry" in failures[0].violations[0].explanation


def test_ttl_on_running_is_found_by_the_downtime(redis_server, tmp_path):
    """Caught with 2 h of downtime (longer than its 1 h expiry); with none, it passes: the
    downtime fault is what finds it."""
    mutant = "reference_agent.mutants.ttl_on_running"
    report = explore_subprocess(mutant, faultsim.load_scenario(REDIS), workers=2)
    failures = report.runs[0].failures
    assert failures
    assert {x.invariant for v in failures for x in v.violations} >= {
        "no_silent_restart", "effects_exactly_once"}
    no_downtime = tmp_path / "tiny_redis_no_downtime.toml"
    no_downtime.write_text(REDIS.read_text().replace('downtime = "2h"', 'downtime = "0s"'))
    assert explore_subprocess(mutant, faultsim.load_scenario(no_downtime), workers=2).ok


# -- the pytest plugin ---------------------------------------------------------------------
def test_the_plugin_runs_a_database_store_in_subprocess_mode(pytester):
    """A marker on a scenario whose checkpoints live in SQLite runs in subprocess mode by
    itself (mode="auto"); a naive two-transaction save fails the test with its
    counterexample; kill-point items cannot be real processes and say so."""
    import shutil

    pytester.makeini("[pytest]\n")
    shutil.copy(DATA / "tiny_sqlite.toml", pytester.path / "tiny_sqlite.toml")
    pytester.makepyfile(test_store=f"""
        import sys
        import pytest
        sys.path.insert(0, {str(ROOT)!r})  # tests.broken_agents

        @pytest.mark.faultsim("tiny_sqlite.toml", agent="reference_agent")
        def test_reference(crash_safety):
            report = crash_safety.check()
            assert report.runs[0].mode == "subprocess"

        @pytest.mark.faultsim("tiny_sqlite.toml", agent="tests.broken_agents:sqlite_two_transactions")
        def test_naive(crash_safety):
            crash_safety.check()

        @pytest.mark.faultsim("tiny_sqlite.toml", agent="reference_agent", kill_points=True,
                              mode="subprocess")
        def test_items(crash_safety):
            crash_safety.check()
        """)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-q")
    result.assert_outcomes(passed=1, failed=2)
    out = result.stdout.str()
    assert "test_naive" in out and "sqlite.exec DELETE" in out
    assert "kill_points=True items run in-process" in out


def test_sqlite_is_traced_under_both_of_its_connect_names(tmp_path):
    """`sqlite3.connect` and `sqlite3.dbapi2.connect` are one function under two names;
    SQLAlchemy's SQLite dialect (DBOS's system database) connects through the second, so
    the interposer replaces both: each name's statements and commits are events (with
    only the first replaced, the second connection's writes were no kill points)."""
    import sqlite3
    import sqlite3.dbapi2

    from faultsim.interpose import sqlite as sqlite_trace

    events: list = []
    sqlite_trace.install(lambda kind, subject, *rest: events.append((kind, subject)))
    try:
        for i, connect in enumerate((sqlite3.connect, sqlite3.dbapi2.connect)):
            conn = connect(str(tmp_path / f"{i}.db"))
            conn.execute("CREATE TABLE t (x)")
            conn.execute("INSERT INTO t VALUES (1)")  # opens the transaction commit() ends
            conn.commit()
            conn.close()
    finally:
        sqlite_trace.uninstall()
    assert sqlite3.connect is sqlite3.dbapi2.connect  # restored, to the one original
    assert events.count(("sqlite.exec", "INSERT t")) == 2
    assert events.count(("sqlite.commit", "")) == 2


def test_a_sqlite_write_that_changes_no_row_is_no_kill_point(tmp_path):
    """An UPDATE, DELETE or INSERT that changed no row, and a commit of a transaction of
    only such statements, are not events: the database file is byte for byte what it was
    before them (checked here, the long way), so a kill there is a state the previous kill
    point already explored. A write that changes a row still is one, with its commit."""
    import sqlite3

    from faultsim.interpose import sqlite as sqlite_trace

    db = tmp_path / "store.db"
    events: list = []
    sqlite_trace.install(lambda kind, subject, *rest: events.append((kind, subject)))
    try:
        conn = sqlite3.connect(str(db))
        conn.execute("CREATE TABLE t (x, status)")
        conn.execute("INSERT INTO t VALUES (1, 'done')")
        conn.commit()
        before, seen = db.read_bytes(), len(events)
        conn.execute("UPDATE t SET status = 'late' WHERE status = 'delayed'")  # no row
        conn.execute("DELETE FROM t WHERE x = 2")  # no row
        conn.commit()
        assert db.read_bytes() == before and not list(tmp_path.glob("*-journal"))
        assert len(events) == seen  # nothing to kill after
        conn.execute("UPDATE t SET status = 'late' WHERE x = 1")  # one row
        conn.commit()
        conn.close()
    finally:
        sqlite_trace.uninstall()
    assert events[seen:] == [("sqlite.exec", "UPDATE t"), ("sqlite.commit", "")]
    assert db.read_bytes() != before
