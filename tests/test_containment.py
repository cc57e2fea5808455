"""One containment for the agent's whole process tree, in both modes (issue 31).

In-process, a process the agent starts is refused before it runs and reported
(`no_uncontained_process`). In subprocess mode it runs inside the fork server's jail
(faultsim/real/jail.py): its network is the jail's loopback, where a connection to anything
faultsim does not serve is refused and reported as the network guard's own finding
(`no_unrouted_effect`); its writes outside the sandbox fail (every mount read-only but the
sandbox) and are reported as the agent's own (`no_sandbox_escape`, read from strace); it
dies with its incarnation; one that outlives it is killed and reported
(`no_process_left_behind`). Where the kernel gives no namespace, subprocess mode refuses
process starts as in-process (forced here with FAULTSIM_JAIL=off).

Each probe (tests/contain_agent.py, a tool running `subprocess.run([sys.executable, "-c",
...])`) is aimed only at a counting server this test starts on 127.0.0.1 and at a watched
temporary directory outside the sandbox: the server must count no connection and the
directory stay empty. Correct agents (a helper that writes into the workdir; no helper at
all) pass, with every kill landed.
"""
from __future__ import annotations

import asyncio
import multiprocessing
# imported here, outside any fake file system: a module first imported while an in-process
# incarnation runs keeps pyfakefs's os after it (seen: the spawn way below failing with a
# dead Patcher once earlier in-process sweeps ran in this process; not yet understood)
import multiprocessing.popen_spawn_posix  # noqa: F401
import multiprocessing.resource_tracker  # noqa: F401
import os
import pty
import re
import subprocess
import sys
import time

import pytest

import faultsim
from faultsim.interpose import procguard
from faultsim.errors import SandboxEscape, UncontainedProcess, UnroutedEffect
from faultsim.settings.loading import load_factory

from conftest import DATA
from helpers import CountingServer

AGENT = "tests.contain_agent"
AGENT_FILE = "tests/contain_agent.py"  # as the call sites name it (run from the repository)
SCENARIO = DATA / "contain.toml"
linux = pytest.mark.skipif(not sys.platform.startswith("linux"),
                           reason="subprocess mode: Linux")


@pytest.fixture
def probe(monkeypatch, tmp_path):
    """Sets CONTAIN_PROBE (and the server's port, the watched directory) for the agent;
    yields (server, watched directory)."""
    server = CountingServer()
    watch = tmp_path / "watched"
    watch.mkdir()
    monkeypatch.setenv("CONTAIN_PORT", str(server.port))
    monkeypatch.setenv("CONTAIN_WATCH", str(watch))
    monkeypatch.delenv("CONTAIN_ONLY_ON_RESUME", raising=False)

    def use(kind: str, only_on_resume: bool = False):
        monkeypatch.setenv("CONTAIN_PROBE", kind)
        if only_on_resume:
            monkeypatch.setenv("CONTAIN_ONLY_ON_RESUME", "1")
        return server, watch

    yield use
    server.close()


def _in_process(**kw):
    return faultsim.explore(load_factory(AGENT), faultsim.load_scenario(SCENARIO),
                            crash_model="process", crashes=1, **kw)


def _subprocess(stats: dict, shard: tuple[int, int] | None = None):
    """`shard`: every n-th kill point from the i-th (helpers.part_of), not `--shard`."""
    from faultsim.real.explore import explore_subprocess
    from helpers import part_of

    return explore_subprocess(AGENT, faultsim.load_scenario(SCENARIO), workers=1,
                              stats=stats, only=part_of(*shard) if shard else None)


_JAIL: list = []


def _jail_here() -> str:
    """'' where this machine's kernel gives subprocess mode its namespaces, else why not
    (the subprocess-mode probes then expect the in-process refusal instead)."""
    if not _JAIL:
        import tempfile

        from faultsim.host import jail

        with tempfile.TemporaryDirectory() as root:
            built = jail.establish(root, [])
        for fd in (built.net_fd, built.mnt_fd):
            if fd is not None:
                os.close(fd)
        if built.watch is not None:
            built.watch.close()
        _JAIL.append(built.why)
    return _JAIL[0]


def _expect_refusal_where_uncontained():
    why = _jail_here()
    if why:
        pytest.skip(f"no namespaces here ({why}): "
                    "test_subprocess_without_namespaces_refuses_as_in_process covers it")


def _violations(report) -> set[str]:
    return {v.invariant for run in report.runs for f in run.failures for v in f.violations}


def _kills_landed_in_process(report) -> int:
    run = report.runs[0]
    assert len(run.verdicts) == len(run.explored) > 5
    return len(run.verdicts)


# -- in-process: refused before it runs ----------------------------------------------------
@pytest.mark.parametrize("kind", ["net", "write"])
def test_in_process_a_helper_process_is_refused_before_it_runs(probe, kind):
    server, watch = probe(kind)
    with pytest.raises(UncontainedProcess) as info:
        _in_process()
    message = str(info.value)
    assert "no_uncontained_process" in message and "--mode subprocess" in message
    assert f"{sys.executable} -c " in message  # the command
    site = message.split(" from ", 1)[1].split(" (incarnation")[0]
    assert site.startswith("/") and site.endswith(".py:" + site.rsplit(":", 1)[1])
    assert "contain_agent.py:" in site  # the agent's line, not subprocess.py's
    assert server.count == 0 and not any(watch.iterdir())


def test_in_process_a_process_started_while_recovering_is_a_finding(probe):
    server, watch = probe("net", only_on_resume=True)
    report = _in_process()
    assert _kills_landed_in_process(report)
    assert "no_uncontained_process" in _violations(report)
    explanation = next(v.explanation for run in report.runs for f in run.failures
                       for v in f.violations if v.invariant == "no_uncontained_process")
    assert "contain_agent.py:" in explanation and "--mode subprocess" in explanation
    assert server.count == 0 and not any(watch.iterdir())


def test_in_process_an_agent_without_helpers_stays_clean(probe):
    server, watch = probe("python")
    report = _in_process()
    assert report.ok, report.counterexamples(limit=1)
    assert _kills_landed_in_process(report)


def test_every_way_to_start_a_process_is_refused(tmp_path):
    """Outside pyfakefs, straight at the guard: each call is refused, and the file its
    process would have made never appears."""
    made = tmp_path / "made"
    touch = ["/bin/sh", "-c", f"echo > {made}"]
    heard = []

    async def via_asyncio():
        await asyncio.create_subprocess_exec(*touch)

    def forked():
        pid = os.fork()
        if pid == 0:  # only if the guard failed: never run the test twice
            os._exit(0)
        os.waitpid(pid, 0)

    ways = {
        "subprocess.run": lambda: subprocess.run(touch),
        "subprocess.Popen": lambda: subprocess.Popen(touch),
        "os.popen": lambda: os.popen(touch[-1]),
        "os.system": lambda: os.system(touch[-1]),
        "os.execv": lambda: os.execv(touch[0], touch),
        "os.execvp": lambda: os.execvp("sh", touch),
        "os.posix_spawn": lambda: os.posix_spawn(touch[0], touch, os.environ),
        "os.posix_spawnp": lambda: os.posix_spawnp("sh", touch, os.environ),
        "os.spawnv": lambda: os.spawnv(os.P_WAIT, touch[0], touch),
        "os.fork": forked,
        "pty.fork": lambda: pty.fork(),
        "asyncio": lambda: asyncio.run(via_asyncio()),
        "multiprocessing fork": lambda: multiprocessing.get_context("fork").Process(
            target=made.write_text, args=("x",)).start(),
        "multiprocessing spawn": lambda: multiprocessing.get_context("spawn").Process(
            target=print).start(),
    }
    with procguard.refusing(lambda command, site: heard.append((command, site))):
        for name, call in ways.items():
            with pytest.raises(procguard.ProcessRefused, match="--mode subprocess"):
                call()
            assert heard and heard[-1][1].startswith(__file__), (name, heard[-1:])
            heard.clear()
    assert not made.exists()
    assert subprocess.run(["true"]).returncode == 0  # outside an incarnation: as before


# -- subprocess mode: contained --------------------------------------------------------------
@linux
def test_subprocess_a_helper_connecting_out_is_refused_by_the_jail_and_reported(probe):
    _expect_refusal_where_uncontained()
    server, watch = probe("net")
    with pytest.raises(UnroutedEffect) as info:
        _subprocess({})
    message = str(info.value)
    assert f"127.0.0.1:{server.port} from a process the agent started" in message
    assert "no_unrouted_effect" in message
    assert server.count == 0


@linux
def test_subprocess_a_helper_connecting_out_while_recovering_is_a_finding(probe):
    _expect_refusal_where_uncontained()
    server, watch = probe("net", only_on_resume=True)
    stats: dict = {}
    report = _subprocess(stats, shard=(1, 3))  # every resume reaches out: a third will do
    run = report.runs[0]
    assert stats["kills_landed"] == len(run.explored) == len(run.verdicts) > 5
    assert _violations(report) == {"no_unrouted_effect"}
    assert server.count == 0


@linux
def test_subprocess_a_helper_writing_outside_the_sandbox_changes_nothing(probe):
    _expect_refusal_where_uncontained()
    server, watch = probe("write", only_on_resume=True)
    stats: dict = {}
    report = _subprocess(stats, shard=(2, 3))  # every resume writes out: a third will do
    run = report.runs[0]
    assert stats["kills_landed"] == len(run.explored) > 5
    assert not any(watch.iterdir())  # read-only outside the sandbox, in every incarnation
    # and each resumed run's helper is reported, as the agent's own write would be
    assert _violations(report) == {"no_sandbox_escape"}


@linux
def test_subprocess_a_shell_line_writing_a_cache_outside_is_a_sandbox_escape(probe):
    _expect_refusal_where_uncontained()
    server, watch = probe("shell")
    line = next(n for n, text in enumerate(open(AGENT_FILE), 1) if "shell=True" in text)
    with pytest.raises(SandboxEscape) as info:
        _subprocess({})
    cache = re.escape(f"{watch}/cache.txt")  # the write, its command line, the agent's call
    assert re.search(rf"the clean run wrote outside its workdir: open for writing {cache} "
                     rf"\(by /bin/sh -c 'echo checked > {cache}.*, a process the agent "
                     rf"started at {AGENT_FILE}:{line}\); faultsim refused it "
                     r"\(no_sandbox_escape\)", str(info.value)), info.value
    assert not any(watch.iterdir())


@linux
def test_subprocess_a_shell_line_writing_into_the_workdir_stays_clean(probe):
    _expect_refusal_where_uncontained()
    server, watch = probe("shell-inside")
    report = _subprocess({})
    assert report.ok, report.counterexamples(limit=1)
    assert not any("unwatched" in n for n in report.runs[0].notes)


@linux
def test_subprocess_without_strace_a_helper_runs_unwatched_and_the_run_says_so(
        probe, monkeypatch, tmp_path):
    _expect_refusal_where_uncontained()
    server, watch = probe("shell")
    monkeypatch.setenv("PATH", str(tmp_path))  # no strace (the shell is /bin/sh)
    report = _subprocess({})
    (note,) = [n for n in report.runs[0].notes if "unwatched" in n]
    assert note == ("a process the agent started ran unwatched (strace is not installed "
                    "(apt-get install strace)): its writes outside the workdir failed "
                    "(read-only) but are not reported")
    assert not any(watch.iterdir())


@linux
def test_subprocess_a_helper_writing_into_the_workdir_stays_clean(probe):
    _expect_refusal_where_uncontained()
    server, watch = probe("inside")  # the agent fails unless the helper's file is there
    stats: dict = {}
    report = _subprocess(stats)
    assert report.ok, report.counterexamples(limit=1)
    run = report.runs[0]
    assert stats["kills_landed"] == len(run.explored) == len(run.verdicts) > 5


@linux
def test_subprocess_a_helper_left_running_is_killed_and_reported(probe):
    _expect_refusal_where_uncontained()
    server, watch = probe("daemon")
    with pytest.raises(UncontainedProcess, match="no_process_left_behind") as info:
        _subprocess({})
    assert f"{sys.executable} -c" in str(info.value)  # the helper, by its command
    assert not _helpers_alive()


def _helpers_alive() -> list[int]:
    alive = []
    for name in os.listdir("/proc"):
        try:
            with open(f"/proc/{name}/cmdline", "rb") as f:
                if b"contain-agent-helper" in f.read():
                    alive.append(int(name))
        except (OSError, ValueError):
            pass
    return alive


@linux
def test_subprocess_without_namespaces_refuses_as_in_process(probe, monkeypatch):
    server, watch = probe("net")
    monkeypatch.setenv("FAULTSIM_JAIL", "off")  # as where the kernel allows none
    with pytest.raises(UncontainedProcess, match="no_uncontained_process") as info:
        _subprocess({})
    assert "FAULTSIM_JAIL=off" in str(info.value)
    assert "contain_agent.py:" in str(info.value)
    assert server.count == 0


HELPER_SHAPES = r"""
import subprocess, sys
from faultsim.real import helpers
helpers.watch()
named = subprocess.run(["busyname", "-c", "echo $0 $$"], executable="/bin/sh",
                       capture_output=True, text=True)
p = subprocess.Popen(["sh", "-c", "echo $$; exit 3"], stdout=subprocess.PIPE, text=True)
out, _ = p.communicate()
print(named.stdout.split()[0], int(named.stdout.split()[1]) > 0,
      int(out) == p.pid, p.returncode, len(helpers._watches), helpers.unwatched())
helpers.stop()
"""


@linux
def test_a_watched_program_keeps_its_argv0_its_pid_and_its_exit_status(tmp_path):
    """What strace's watch must not change: the argv[0] the agent gave (bash's exec -a),
    the pid Popen hands out (the shell that stops itself execs the program in place), the
    exit status; and every program started is watched."""
    import shutil
    if shutil.which("strace") is None:
        pytest.skip("strace is not installed")
    done = subprocess.run([sys.executable, "-c", HELPER_SHAPES], capture_output=True,
                          text=True, timeout=60, cwd=tmp_path)
    assert done.stdout.split() == ["busyname", "True", "True", "3", "2", "None"], \
        done.stdout + done.stderr


def test_a_fork_warning_through_the_guard_is_the_callers():
    """CPython 3.12+ warns at a threaded process's fork, from the frame calling os.fork:
    through procguard's wrapper that frame is faultsim's, and `-W error` on faultsim's
    modules would blame faultsim for the agent's fork. The wrapper passes it on as the
    caller's (here a stand-in fork that warns as CPython's does, from its caller)."""
    import types
    import warnings

    from faultsim.interpose import procguard

    def fork():
        warnings.warn("This process is multi-threaded, use of fork() may lead to "
                      "deadlocks in the child.", DeprecationWarning, stacklevel=2)
        return 1

    owner = types.ModuleType("os")
    owner.fork = fork
    procguard._wrap(owner, "fork", lambda: "os.fork()")
    try:
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            assert owner.fork() == 1
    finally:
        procguard._originals.pop((owner, "fork"), None)
    assert [w.filename for w in seen] == [__file__]
