"""faultsim's side of subprocess mode: fork servers, jobs in, results out.

Each server runs one child at a time on its own sandbox directory (and its own Redis
database), so N servers judge N crash states at once; every child sees its server's
directory at one path, the same for all (faultsim.real.samepath). Jobs are independent;
results are keyed by job id, so the order they finish in never shows in a verdict.
"""
from __future__ import annotations

import os
import re
import selectors
import subprocess
import sys
import tempfile
import time
import uuid
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Any, Callable

from ..errors import HarnessError
from ..pipeline.incarnation import AUTO, clean_limit
from . import wire
from ..host.lifetime import PARENT_DIED, preexec_die_with_parent
from .samepath import canonical_path

MARKER = "FAULTSIM_RUN"  # in every server's (and child's) environment: tests find strays


def sandbox_parent() -> str | None:
    """Where sandboxes go: a RAM-backed tmpfs when there is one. Under SIGKILL the kernel
    keeps every write it accepted, so fsync buys nothing a process crash could show, and
    on a disk it costs about 4 ms each (a turn of the reference agent has a dozen)."""
    shm = "/dev/shm"
    if os.path.isdir(shm) and os.access(shm, os.W_OK | os.X_OK):
        return shm
    return None  # the system's temporary directory


class ServerFailed(HarnessError):
    """A fork server died or could not set up (its log tail says why)."""


@dataclass
class JobResult:
    """What one incarnation did: the child's own report (None if it died without one)
    and what the server found after it."""

    report: dict | None
    how: str  # exit | signal | overdue
    code: int | None
    files: dict
    seconds: float = 0.0
    crashes: list = field(default_factory=list)  # a crash driver's states, one per point
    left_behind: list = field(default_factory=list)  # its processes alive after it (killed)
    refused: list = field(default_factory=list)  # "HOST:PORT" its tree reached for, refused

    @property
    def sigkilled(self) -> bool:
        import signal
        return self.how == "signal" and self.code == signal.SIGKILL


@dataclass
class _Server:
    proc: subprocess.Popen
    reader: wire.Reader
    log: str
    root: str
    job: Any = None
    report: dict | None = None
    crashes: list = field(default_factory=list)
    spawned_for_one: bool = False
    pending: list = field(default_factory=list)
    slot: int = 0


class ForkServers:
    """`with ForkServers(agent, scenario_path, workers=2) as pool: pool.run(jobs)`.

    `fork_server=False` starts a fresh Python for every job instead (imports paid each
    time): the baseline the benchmark compares with.
    """

    def __init__(self, agent: str, scenario_path: str, *, workers: int = 1, seed: str = "0",
                 timeout: float | str | None = AUTO, fork_server: bool = True,
                 redis_url: Callable[[int], str] | None = None) -> None:
        self.agent, self.scenario_path = agent, scenario_path
        self.workers, self.seed = max(1, workers), seed
        # the servers' own limit is the clean runs'; once they are measured, `timeout` is
        # the crash runs' (pipeline.incarnation.resumed_limit), sent with each job
        self.asked_timeout, self.timeout = timeout, clean_limit(timeout)
        self.fork_server = fork_server
        self.redis_url = redis_url
        # every server and child carries it: a test (or a person) can find strays by it
        self.run_id = os.environ.get(MARKER) or uuid.uuid4().hex
        self._stack = ExitStack()
        self._servers: list[_Server] = []
        self._selector = selectors.DefaultSelector()
        self.tmp = ""
        self._spawned = 0
        self.same_path: list[str] = []  # how each server gives the one path (see samepath)
        self.jail: list[str] = []  # each server's containment: "contained", or why not
        # why a program an incarnation started ran unwatched by `real.helpers` (the first)
        self.unwatched: str | None = None

    def __enter__(self) -> "ForkServers":
        # the run folder: faultsim removes it on the way out; if faultsim is killed, the
        # servers do (faultsim.real.server). Named after the run, so strays can be told apart.
        name = re.sub(r"[^\w.-]", "_", self.run_id)[:64]
        self.tmp = self._stack.enter_context(tempfile.TemporaryDirectory(
            prefix=f"faultsim-{name}-", dir=sandbox_parent()))
        os.makedirs(canonical_path(self.tmp))
        try:
            if self.fork_server:
                for i in range(self.workers):
                    self._servers.append(self._start(i))
                for server in self._servers:
                    self._await_ready(server)
        except BaseException:  # a server that failed, or SIGTERM while they start
            self.__exit__(*sys.exc_info())
            raise
        return self

    def __exit__(self, exc_type: Any = None, *exc: Any) -> None:
        servers = list(self._servers)
        if exc_type is None:
            for server in servers:
                self._ask_to_stop(server)
        else:
            # unwinding (SIGTERM, Ctrl-C, an error): no job in flight is worth finishing.
            # The signal a server gets when faultsim dies makes it kill its child and exit
            # at once, where the stop would wait for the child's job; all servers together,
            # so a cancelled CI job exits in about a second however busy the machine is.
            for server in servers:
                try:
                    server.proc.send_signal(PARENT_DIED)
                except OSError:
                    pass
        deadline = time.monotonic() + 2.0
        for server in servers:
            self._reap(server, deadline)
        self._selector.close()
        self._stack.close()

    # -- servers --------------------------------------------------------------------------
    def _start(self, slot: int) -> _Server:
        own = os.path.join(self.tmp, f"sandbox-{slot}")
        os.makedirs(own, exist_ok=True)
        read_fd, write_fd = os.pipe()
        log = os.path.join(self.tmp, f"server-{slot}.log")
        # One hash seed for every server: set iteration order (LangGraph builds checkpoints
        # from sets) must not differ between the servers two clean runs land on.
        env = {**os.environ, MARKER: self.run_id,
               "PYTHONHASHSEED": os.environ.get("PYTHONHASHSEED", "0")}
        with open(log, "ab") as log_file:
            proc = subprocess.Popen(
                [sys.executable, "-m", "faultsim.real.server", str(write_fd), self.tmp],
                stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=log_file,
                pass_fds=(write_fd,), env=env,
                preexec_fn=preexec_die_with_parent(PARENT_DIED))
        os.close(write_fd)
        os.set_blocking(read_fd, False)
        server = _Server(proc, wire.Reader(read_fd), log, own, slot=slot)
        wire.send(proc.stdin.fileno(), {
            "agent": self.agent, "scenario": self.scenario_path, "own": own,
            "path": [os.getcwd()] + [p for p in sys.path if p],
            "seed": self.seed, "timeout": self.timeout,
            "redis_url": self.redis_url(slot) if self.redis_url else None})
        self._selector.register(read_fd, selectors.EVENT_READ, server)
        return server

    def _await_ready(self, server: _Server) -> None:
        while True:
            message = self._next(server)
            if message.get("kind") == "ready":
                self.same_path.append(message.get("same_path", ""))
                self.jail.append(message.get("jail", ""))
                return
            if message.get("kind") == "setup-failed":
                self._stop(server)
                raise ServerFailed(f"the fork server could not load the agent or scenario:\n"
                                   f"{message['error']}")

    def _next(self, server: _Server) -> dict:
        import select

        while not server.pending:
            select.select([server.reader.fd], [], [], 60)  # non-blocking pipe: wait here
            messages, eof = server.reader.read()
            server.pending.extend(messages)
            if eof and not server.pending:
                raise ServerFailed(self._died(server))
        return server.pending.pop(0)

    def _died(self, server: _Server) -> str:
        server.proc.poll()
        try:
            with open(server.log, "rb") as f:
                tail = f.read()[-2000:].decode("utf-8", "replace")
        except OSError:
            tail = ""
        return (f"a fork server (pid {server.proc.pid}) stopped unexpectedly "
                f"(exit {server.proc.returncode}); its log ends:\n{tail}")

    def _stop(self, server: _Server) -> None:
        self._ask_to_stop(server)
        self._reap(server, time.monotonic() + 2.0)

    def _ask_to_stop(self, server: _Server) -> None:
        try:
            self._selector.unregister(server.reader.fd)
        except (KeyError, ValueError):
            pass
        try:
            # the stop: a server that finds its stdin closed without it takes faultsim
            # for dead and removes the run folder, which other servers may still use
            wire.send(server.proc.stdin.fileno(), None)
        except OSError:
            pass  # it has exited already
        try:
            server.proc.stdin.close()
        except OSError:
            pass

    def _reap(self, server: _Server, deadline: float) -> None:
        """Wait for a stopping server until `deadline` (shared by all), then kill it."""
        try:
            self._selector.unregister(server.reader.fd)
        except (KeyError, ValueError):
            pass
        try:
            server.proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            server.proc.kill()
            server.proc.wait()
        os.close(server.reader.fd)
        if server in self._servers:
            self._servers.remove(server)

    # -- jobs -----------------------------------------------------------------------------
    def run(self, jobs: list[dict], done: Callable[[dict, JobResult], None] | None = None
            ) -> dict[Any, JobResult]:
        """Run every job (a dict with id, files, world, kill, downtime, timed); return the
        results by job id. `done(job, result)` is called as each one finishes."""
        queue = list(reversed(jobs))
        results: dict[Any, JobResult] = {}
        busy = 0
        idle = list(self._servers)
        while queue or busy:
            while queue and (idle or not self.fork_server and busy < self.workers):
                if self.fork_server:
                    server = idle.pop()
                else:
                    self._spawned += 1
                    server = self._start(self._spawned)
                    server.spawned_for_one = True
                    self._servers.append(server)
                job = queue.pop()
                if job.get("timed") and "timeout" not in job:
                    job["timeout"] = self.timeout  # the limit as it is now (see __init__)
                    if self.timeout and "deadline" not in job:
                        job["deadline"] = 3 * self.timeout + 5  # a child deaf to SIGALRM
                server.job, server.report, server.crashes = job, None, []
                wire.send(server.proc.stdin.fileno(), job)
                busy += 1
            for key, _ in self._selector.select(timeout=5):
                server = key.data
                messages, eof = server.reader.read()
                server.pending.extend(messages)
                finished = self._absorb(server, results, done)
                if finished:
                    busy -= 1
                    if server.spawned_for_one:
                        self._stop(server)
                    else:
                        idle.append(server)
                elif eof:
                    raise ServerFailed(self._died(server))
        return results

    def _absorb(self, server: _Server, results: dict, done) -> bool:
        while server.pending:
            message = server.pending.pop(0)
            kind = message.get("kind")
            if kind == "ready":
                continue
            if kind == "setup-failed":
                raise ServerFailed(f"the fork server could not load the agent or scenario:\n"
                                   f"{message['error']}")
            if kind == "exit":
                job = server.job
                result = JobResult(server.report, message["how"], message["code"],
                                   message["files"], message["seconds"], server.crashes,
                                   message.get("left_behind", []),
                                   message.get("refused", []))
                results[job["id"]] = result
                server.job = None
                if done is not None:
                    done(job, result)
                return True
            if kind == "crash":
                server.crashes.append(message)
            else:
                server.report = message  # the child's own: killed | done | crashed
                self.unwatched = self.unwatched or message.get("unwatched")
        return False

    @property
    def workdir(self) -> str:
        """The agent's workdir in every incarnation of this run, on every server."""
        return canonical_path(self.tmp)

    def pids(self) -> list[int]:
        return [s.proc.pid for s in self._servers]
