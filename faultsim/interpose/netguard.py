"""The network guard: while an incarnation runs, a connection to any address faultsim does
not serve is refused before it is made.

An effect the agent forgot to route (`faultsim.effect`) would otherwise fire for real once
per crash run: hundreds of emails or charges. So during every incarnation, in both modes,
`socket.connect`/`connect_ex`/`sendto` to an internet address, and the name lookup that
would precede one, raise `UnroutedConnection` unless the address is

- one faultsim serves itself in this process (its loopback fake model: `served()`),
- given for this incarnation (the Redis database of a Redis store), or
- allowed by the scenario (`[sandbox] allow = ["127.0.0.1:6379"]`).

Each refusal is reported to the caller's `record` with host, port and the agent's call
site (the innermost frame outside the standard library, site-packages and faultsim), and
becomes a `no_unrouted_effect` finding. Unix-domain sockets are local IPC and pass.

Standard library only (the bottom layer): both backends install it.
"""
from __future__ import annotations

import os
import posix
import posixpath
import socket
import sys
import sysconfig
import threading
from contextlib import contextmanager
from typing import Any, Callable, Iterable, Iterator

LOCAL_NAMES = {"localhost", "localhost.localdomain", "ip6-localhost"}


class UnroutedConnection(ConnectionRefusedError):
    """What the agent meets when it reaches for an address faultsim does not serve."""


_lock = threading.Lock()
_served: set[tuple[str, int]] = set()  # addresses faultsim serves in this process
_active: list["_Guard"] = []  # the incarnation running now (one at a time per process)
_originals: dict[str, Any] = {}


def serving(host: str, port: int) -> None:
    """An address faultsim itself serves from now on (its loopback fake model)."""
    with _lock:
        _served.add((_norm(host), int(port)))


def stopped(host: str, port: int) -> None:
    with _lock:
        _served.discard((_norm(host), int(port)))


class _Guard:
    def __init__(self, allowed: Iterable[tuple[str, int]],
                 record: Callable[[str, int, str], None]) -> None:
        self.allowed = {(_norm(h), int(p)) for h, p in allowed}
        self.hosts = {h for h, _ in self.allowed}
        self.record = record

    def permits(self, host: str, port: int) -> bool:
        key = (_norm(host), int(port))
        return key in self.allowed or key in _served

    def refuse(self, host: str, port: int) -> None:
        site = call_site()
        self.record(host, port, site)
        raise UnroutedConnection(
            f"faultsim refused a connection to {host}:{port} (from {site}): it is not a "
            "service of this scenario. Route the call with faultsim.effect, or allow the "
            "address in the scenario's [sandbox] allow")


@contextmanager
def guarded(allowed: Iterable[tuple[str, int]],
            record: Callable[[str, int, str], None]) -> Iterator[None]:
    """Refuse unserved addresses while inside (one incarnation)."""
    _install()
    guard = _Guard(allowed, record)
    _active.append(guard)
    try:
        yield
    finally:
        _active.remove(guard)


def parse_allowed(entry: str) -> tuple[str, int]:
    """"HOST:PORT" (IPv6 as "[::1]:PORT") as a pair; ValueError naming what is wrong."""
    host, sep, port = entry.rpartition(":")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"{entry!r} is not HOST:PORT")
    return host, int(port)


def call_site() -> str:
    """file:line of the innermost frame of the agent's own code: outside the standard
    library, site-packages and faultsim; failing that (an agent installed as a package),
    outside the standard library and faultsim."""
    paths = sysconfig.get_paths()
    stdlib = {_abs(paths[n]) for n in ("stdlib", "platstdlib") if paths.get(n)}
    packages = {_abs(paths[n]) for n in ("purelib", "platlib") if paths.get(n)}
    ours = os.path.dirname(os.path.dirname(_abs(__file__)))  # faultsim/
    frames = []
    frame = sys._getframe(1)
    while frame is not None:
        frames.append((_abs(frame.f_code.co_filename), frame.f_lineno))
        frame = frame.f_back
    for skip in (stdlib | packages | {ours}, stdlib | {ours}):
        for path, line in frames:
            if not path.startswith("<") and not any(path.startswith(s + os.sep)
                                                    for s in skip):
                return _short(path, line)
    return "an unknown call site"


def _abs(path: str) -> str:
    # pure string work on the real working directory (see _short)
    if path.startswith("<"):
        return path
    return posixpath.normpath(path if path.startswith("/") else
                              posixpath.join(posix.getcwd(), path))


def _short(path: str, line: int) -> str:
    """The path as the user wrote it: relative below the real working directory, else
    absolute. `posix.getcwd`, not `os.getcwd`: in-process, `os` is pyfakefs's, whose working
    directory is `/` (`/home/me/agent.py` would come out as `home/me/agent.py`)."""
    cwd = posix.getcwd().rstrip("/")
    if cwd and path.startswith(cwd + "/"):
        path = path[len(cwd) + 1:]
    return f"{path}:{line}"


def _norm(host: str) -> str:
    host = host.lower()
    return "127.0.0.1" if host in LOCAL_NAMES else host


def _inet(sock: socket.socket) -> bool:
    return sock.family in (socket.AF_INET, socket.AF_INET6)


def _check(address: Any) -> None:
    if not _active or not isinstance(address, tuple) or len(address) < 2:
        return
    guard = _active[-1]
    host, port = address[0], address[1]
    if not guard.permits(host, port):
        guard.refuse(host, port)


def _install() -> None:
    with _lock:
        if _originals:
            return
        cls = socket.socket
        _originals.update(connect=cls.connect, connect_ex=cls.connect_ex, sendto=cls.sendto,
                          getaddrinfo=socket.getaddrinfo)

        def connect(self, address):
            if _inet(self):
                _check(address)
            return _originals["connect"](self, address)

        def connect_ex(self, address):
            if _inet(self):
                _check(address)
            return _originals["connect_ex"](self, address)

        def sendto(self, data, *args):
            if _inet(self) and args:
                _check(args[-1])
            return _originals["sendto"](self, data, *args)

        def getaddrinfo(host, port, *args, **kwargs):
            # a name lookup leaves the machine before any connect: refuse it for a name
            # no allowed or served address uses (IP literals go on to the connect check)
            if _active and isinstance(host, (str, bytes)):
                name = host.decode() if isinstance(host, bytes) else host
                if not _is_ip(name) and _norm(name) not in LOCAL_NAMES | {"127.0.0.1"} \
                        and _norm(name) not in _active[-1].hosts:
                    _active[-1].refuse(name, int(port or 0) if str(port or 0).isdigit()
                                       else 0)
            return _originals["getaddrinfo"](host, port, *args, **kwargs)

        cls.connect, cls.connect_ex, cls.sendto = connect, connect_ex, sendto
        socket.getaddrinfo = getaddrinfo


def _is_ip(name: str) -> bool:
    for family in (socket.AF_INET, socket.AF_INET6):
        try:
            socket.inet_pton(family, name)
            return True
        except OSError:
            pass
    return False
