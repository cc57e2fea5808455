"""A real, throwaway `redis-server` for a test session or a scenario run (the subprocess
backend starts it for a `[store] kind = "redis"` scenario; its old home `faultsim.world.
redis_server` still imports, with a deprecation warning).

faultsim judges what an agent leaves behind in real stores, so it needs a real server, not
a fake: MULTI/EXEC atomicity, TTLs and what happens to a dead client's open transaction
are the server's behaviour, not ours. The server listens on loopback only, keeps nothing
on disk, and dies with the Python process that started it, even one that is SIGKILLed.
"""
from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import redis

from ..errors import HarnessError
from ..host.lifetime import preexec_die_with_parent

INSTALL_HINT = "apt-get install redis-server"


class RedisUnavailable(HarnessError, RuntimeError):
    """No `redis-server` binary on PATH."""


def _free_port() -> int:
    # The kernel picks a free port; a race with another process grabbing it before the
    # server binds is possible, so start() retries on an early exit.
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RedisServer:
    """`with RedisServer() as server: server.client().set("k", "v")`.

    Note: PDEATHSIG fires when the *thread* that started the server exits, so start it
    from a thread that lives as long as the server should (the main thread, normally).
    """

    def __init__(self, start_timeout: float = 10.0) -> None:
        self.start_timeout = start_timeout
        self.port = 0
        self._proc: subprocess.Popen | None = None
        self._dir: Path | None = None
        self._clients: list[redis.Redis] = []

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def client(self, db: int = 0, **kwargs) -> redis.Redis:
        """A new client on `db`; closed when the server stops."""
        c = redis.Redis(host="127.0.0.1", port=self.port, db=db, **kwargs)
        self._clients.append(c)
        return c

    @property
    def log_path(self) -> Path:
        assert self._dir is not None
        return self._dir / "redis.log"

    def log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def start(self) -> "RedisServer":
        binary = shutil.which("redis-server")
        if binary is None:
            raise RedisUnavailable(
                f"redis-server is not on PATH: install it (e.g. `{INSTALL_HINT}`)")
        self._dir = Path(tempfile.mkdtemp(prefix="faultsim-redis-"))
        try:
            for _attempt in range(3):
                if self._spawn(binary):
                    return self
            raise RuntimeError(f"redis-server failed to start:\n{self.log_tail()}")
        except BaseException:
            self.stop()
            raise

    def _spawn(self, binary: str) -> bool:
        """Start one server and wait for PONG. False if it exited early (port taken)."""
        self.port = _free_port()
        args = [binary, "--port", str(self.port), "--bind", "127.0.0.1",
                "--dir", str(self._dir), "--save", "", "--appendonly", "no",
                "--daemonize", "no"]
        with open(self.log_path, "ab") as log:
            self._proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=log,
                                          stderr=subprocess.STDOUT,
                                          preexec_fn=preexec_die_with_parent())
        probe = redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=1,
                            socket_connect_timeout=1)
        deadline = time.monotonic() + self.start_timeout
        try:
            while time.monotonic() < deadline:
                if self._proc.poll() is not None:
                    self._proc = None
                    return False
                try:
                    if probe.ping():
                        return True
                except redis.RedisError:  # not listening yet, or still loading
                    time.sleep(0.02)
        finally:
            probe.close()
        raise RuntimeError(f"redis-server on port {self.port} did not answer PING within "
                           f"{self.start_timeout}s; log tail:\n{self.log_tail()}")

    def stop(self) -> None:
        for c in self._clients:
            c.close()
        self._clients.clear()
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.terminate()  # SIGTERM: with `--save ""` the server exits without saving
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None

    def __enter__(self) -> "RedisServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
