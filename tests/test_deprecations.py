"""No DeprecationWarning from faultsim's own code in a sweep (issue 54, item 3): a tiny
sweep through the CLI with every DeprecationWarning raised from a faultsim module made an
error, both this interpreter's and the one CPython 3.12 and later raise at a fork.

CPython 3.12 warns at each os.fork() of a process that has more than one thread
(Modules/posixmodule.c, warn_about_fork_with_threads: the kernel's count of the process's
threads, after the fork, in the parent). Older interpreters have no such check, so the
sweep runs with one that does the same (`FORK_CHECK`, a sitecustomize); on 3.12 and later
the real one, which swallows the warning made an error, stays beneath it. The CLI's
progress timer is a thread at every fork of a sweep; an agent's own may be too."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

from tests.conftest import DATA, ROOT

# CPython 3.12's check, as a wrapper of posix.fork (faultsim forks through posix, which
# pyfakefs does not patch); the warning is raised where faultsim called it (stacklevel 2),
# and only DeprecationWarnings raised from faultsim's modules are errors.
FORK_CHECK = textwrap.dedent('''
    import posix
    import threading
    import warnings

    warnings.filterwarnings("error", category=DeprecationWarning, module=r"faultsim(\\.|$)")
    _fork = posix.fork
    LOG = posix.environ[b"THREADS_AT_FORKS"].decode()


    def _threads():
        try:
            fd = posix.open("/proc/self/stat", posix.O_RDONLY)
            try:
                return int(posix.read(fd, 4096).rsplit(b")", 1)[1].split()[17])
            finally:
                posix.close(fd)
        except OSError:
            return threading.active_count()


    def fork():
        pid = _fork()
        if pid and _threads() > 1:
            others = sorted(t.name for t in threading.enumerate()
                            if t is not threading.current_thread())
            # posix: the real file system (pyfakefs has `open` while the agent runs)
            fd = posix.open(LOG, posix.O_WRONLY | posix.O_APPEND | posix.O_CREAT, 0o644)
            posix.write(fd, f"{others}\\n".encode())
            posix.close(fd)
            warnings.warn(f"This process (pid={posix.getpid()}) is multi-threaded, use of "
                          "fork() may lead to deadlocks in the child.", DeprecationWarning,
                          stacklevel=2)
        return pid


    posix.fork = fork
''')


def test_a_sweep_raises_no_deprecation_warning_from_faultsim(tmp_path):
    (tmp_path / "sitecustomize.py").write_text(FORK_CHECK)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), str(ROOT)]),
               FAULTSIM_PROGRESS_SECONDS="5",  # the timer thread runs (the default is 10)
               THREADS_AT_FORKS=str(tmp_path / "threads_at_forks"))
    # errors: DeprecationWarnings raised from faultsim's modules (FORK_CHECK's filter); a
    # dependency's are not faultsim's to fix, and stay as Python shows them by default
    done = subprocess.run([sys.executable, "-m", "faultsim", "run", str(DATA / "tiny.toml"),
                           "--agent", "reference_agent", "--crashes", "1"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "DeprecationWarning" not in done.stderr, done.stderr[-3000:]
    assert "1 scenario, 1 run: all passed" in done.stdout + done.stderr
    # the check did meet threads at faultsim's forks, and they were faultsim's timer alone
    # (forks.py says why that one leaves the child nothing to wait on)
    seen = set((tmp_path / "threads_at_forks").read_text().splitlines())
    assert seen == {"['faultsim progress tiny']"}
