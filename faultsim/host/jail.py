"""The jail: every incarnation's whole process tree runs contained in subprocess mode.

A process the agent starts (a tool's `curl`, `git push`, a Node helper, an MCP stdio
server, `subprocess.run([sys.executable, "-c", ...])`) is real: neither the network guard
nor the write refusal of `fstrace` sees it, for both see only the Python calls of the
agent's own process. So each fork server builds, once, a pair of namespaces its children
enter right after the fork (`enter`), and the kernel holds the whole tree to them:

- **Network**: a new network namespace with only its own loopback, up. What faultsim
  serves inside it works as before (the fake Claude is in-process, its loopback endpoint
  binds in the child); the addresses the incarnation is given (the Redis database of a
  Redis store, the scenario's `[sandbox] allow`) are relayed to the machine's by a relay
  process of the server's, listening at the same address inside. Anything else fails as
  on a machine without a network (ECONNREFUSED on loopback, ENETUNREACH elsewhere).
- **Writes**: a new mount namespace where every mount is read-only but the sandbox (the
  run's one workdir path, `samepath`): a write elsewhere fails with EROFS (the agent's own
  Python writes are refused and reported by `fstrace` before that; its programs' failed
  writes are read from strace and reported by `real.helpers`).
- **Processes**: each child leads its own process group; its kill is `killpg` (the tree
  dies with it at the same instant, so what the tree wrote is the crash state), and the
  server, a child subreaper, SIGKILLs whatever outlived the incarnation and reports it
  (`no_process_left_behind`).

Where the kernel allows no namespace (not Linux, no CAP_SYS_ADMIN and no user namespaces,
a seccomp profile that forbids `unshare`), `Jail.why` says why, and the child refuses every
process start before it happens (`faultsim.interpose.procguard`), with the finding in-process gives
(`no_uncontained_process`). `FAULTSIM_JAIL=off` forces that (to test it).

Standard library only (but `lifetime`, lazily, in the relay); `enter` runs in the
child between fork and the agent. Shared by subprocess mode (`real/server.py`) and the
command backend (`command/launch.py`).
"""
from __future__ import annotations

import ctypes
import ctypes.util
import fcntl
import os
import select
import signal
import socket
import struct
import sys
from dataclasses import dataclass, field

FORCE_ENV = "FAULTSIM_JAIL"
CLONE_NEWNS = 0x00020000
CLONE_NEWNET = 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
MS_NOATIME, MS_NODIRATIME, MS_RELATIME = 1024, 2048, 1 << 21
_KEEP = {"nosuid": MS_NOSUID, "nodev": MS_NODEV, "noexec": MS_NOEXEC,
         "noatime": MS_NOATIME, "nodiratime": MS_NODIRATIME, "relatime": MS_RELATIME}
PR_SET_CHILD_SUBREAPER = 36
SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP = 0x8913, 0x8914, 0x1


@dataclass
class Jail:
    """One fork server's namespaces (or why there are none)."""

    why: str = ""  # empty: contained
    net_fd: int | None = None
    mnt_fd: int | None = None
    helpers: set[int] = field(default_factory=set)  # the relay: not the agent's
    watch: socket.socket | None = None  # the jail's loopback, as seen by a packet socket
    libc: object = None  # loaded once, in the server: each child only calls it

    @property
    def contained(self) -> bool:
        return not self.why


def _libc():
    lib = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    lib.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p,
                          ctypes.c_ulong, ctypes.c_void_p]
    return lib


def _call(what: str, result: int) -> None:
    if result != 0:
        raise OSError(ctypes.get_errno(), f"{what}: {os.strerror(ctypes.get_errno())}")


def establish(sandbox: str, relayed: list[tuple[str, int]]) -> Jail:
    """In a fork server (after `samepath`): the namespaces its children will enter, built
    by a helper child that unshares them, or `Jail(why=...)`. `relayed`: the addresses the
    incarnation may reach outside (a relay process of the server forwards them)."""
    if os.environ.get(FORCE_ENV, "") == "off":
        return Jail(why="FAULTSIM_JAIL=off")
    if not sys.platform.startswith("linux"):
        return Jail(why=f"no namespaces on {sys.platform}")
    try:
        libc = _libc()
    except OSError as exc:
        return Jail(why=f"libc: {exc}")
    ours, theirs = socket.socketpair()
    pid = os.fork()
    if pid == 0:  # the helper: build the namespaces, hand them over, exit
        ours.close()
        try:
            watch, listeners = _build(libc, sandbox, relayed)
            socket.send_fds(theirs, [b"ok"],
                            [watch.fileno()] + [s.fileno() for s in listeners])
        except BaseException as exc:
            theirs.sendall(b"no" + str(exc).encode()[:500])
        theirs.recv(1)  # until the server has opened our namespaces
        os._exit(0)
    theirs.close()
    try:
        message, fds, _, _ = socket.recv_fds(ours, 1024, 64)
        if not message.startswith(b"ok"):
            return Jail(why=message[2:].decode("utf-8", "replace") or "the helper died")
        jail = Jail(net_fd=os.open(f"/proc/{pid}/ns/net", os.O_RDONLY | os.O_CLOEXEC),
                    mnt_fd=os.open(f"/proc/{pid}/ns/mnt", os.O_RDONLY | os.O_CLOEXEC),
                    libc=libc)
    finally:
        ours.close()  # the helper's recv returns: it exits
        os.waitpid(pid, 0)
    for fd in fds:  # never handed on to a program the agent execs
        os.set_inheritable(fd, False)
    jail.watch = socket.socket(fileno=fds[0])
    jail.watch.setblocking(False)
    if fds[1:]:
        jail.helpers.add(_relay(fds[1:], relayed))
    return jail


def _build(libc, sandbox: str, relayed: list[tuple[str, int]]
           ) -> tuple[socket.socket, list[socket.socket]]:
    """In the helper: new network and mount namespaces; the mounts read-only but the
    sandbox; loopback up, every address local to it, watched; a listener inside for each
    relayed address."""
    _call("unshare(CLONE_NEWNET|CLONE_NEWNS)", libc.unshare(CLONE_NEWNET | CLONE_NEWNS))
    _call("mount --make-rprivate /", libc.mount(None, b"/", None, MS_REC | MS_PRIVATE, None))
    root = os.path.realpath(sandbox)
    # the sandbox a mount of its own, so that it alone stays writable
    _call(f"mount --bind {root}", libc.mount(root.encode(), root.encode(), None,
                                             MS_BIND | MS_REC, None))
    for point, options in _mounts():
        if point == root or point.startswith(root.rstrip("/") + "/"):
            continue
        keep = 0
        for option in options:
            keep |= _KEEP.get(option, 0)
        # a bind remount changes this mount's flags only, in this namespace only
        if libc.mount(None, point.encode(), None, MS_REMOUNT | MS_BIND | MS_RDONLY | keep,
                      None) != 0 and ctypes.get_errno() not in (2, 13):
            _call(f"mount -o remount,bind,ro {point}", -1)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        flags = struct.unpack("16sH", fcntl.ioctl(s, SIOCGIFFLAGS,
                                                  struct.pack("16sH22x", b"lo", 0))[:18])[1]
        fcntl.ioctl(s, SIOCSIFFLAGS, struct.pack("16sH22x", b"lo", flags | IFF_UP))
    # Every address is local (Linux "AnyIP"): a connection anywhere meets the jail's
    # loopback, where nothing listens but what faultsim relays and the tree serves itself,
    # and is refused at once (a RST, never a hang), in view of the watch below.
    _route_all_to_loopback(socket.AF_INET)
    try:
        _route_all_to_loopback(socket.AF_INET6)
    except OSError:
        pass  # no IPv6 here: an IPv6 address is unreachable anyway
    watch = _watch_loopback()
    listeners = []
    for host, port in relayed:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        s = socket.socket(family, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind((host, port))
        s.listen(64)
        listeners.append(s)
    return watch, listeners


def _route_all_to_loopback(family: int) -> None:
    """`ip route add local 0.0.0.0/0 dev lo table local` (or ::/0), as one rtnetlink
    message (no iproute2 needed)."""
    rtm_newroute, rt_table_local, rtprot_boot, rt_scope_host, rtn_local = 24, 255, 3, 254, 2
    flags = 0x1 | 0x4 | 0x400 | 0x200  # NLM_F_REQUEST | ACK | CREATE | EXCL
    body = struct.pack("BBBBBBBBI", family, 0, 0, 0, rt_table_local, rtprot_boot,
                       rt_scope_host, rtn_local, 0)
    body += struct.pack("HHI", 8, 4, socket.if_nametoindex("lo"))  # RTA_OIF
    with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0) as nl:
        nl.send(struct.pack("IHHII", 16 + len(body), rtm_newroute, flags, 1, 0) + body)
        error = struct.unpack("i", nl.recv(4096)[16:20])[0]
    if error:
        raise OSError(-error, f"ip route add local default dev lo: {os.strerror(-error)}")


# Classic BPF: keep only TCP segments with SYN or RST set (IPv4 and IPv6 without extension
# headers), so that what the agent's tree sends through the relay never fills the queue.
_FILTER = [
    (0x30, 0, 0, 0), (0x74, 0, 0, 4), (0x15, 0, 5, 4),          # version 4?
    (0x30, 0, 0, 9), (0x15, 0, 9, 6),                          # v4: TCP?
    (0xb1, 0, 0, 0), (0x50, 0, 0, 13), (0x45, 5, 6, 0x06),      # SYN|RST flags
    (0x15, 0, 5, 6), (0x30, 0, 0, 6), (0x15, 0, 3, 6),          # v6: TCP?
    (0x30, 0, 0, 53), (0x45, 0, 1, 0x06),                        # SYN|RST flags
    (0x06, 0, 0, 0x40000), (0x06, 0, 0, 0),                     # keep, drop
]


def _watch_loopback() -> socket.socket:
    watch = socket.socket(socket.AF_PACKET, socket.SOCK_DGRAM, socket.htons(3))  # ETH_P_ALL
    program = b"".join(struct.pack("HBBI", *insn) for insn in _FILTER)
    buffer = ctypes.create_string_buffer(program)
    watch.setsockopt(socket.SOL_SOCKET, 26,  # SO_ATTACH_FILTER
                     struct.pack("HL", len(_FILTER), ctypes.addressof(buffer)))
    watch.bind(("lo", 0))
    try:
        watch.setsockopt(socket.SOL_SOCKET, 33, 8 << 20)  # SO_RCVBUFFORCE (root)
    except OSError:
        watch.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
    return watch


def refused(jail: Jail | None) -> list[str]:
    """The connections the jail refused since the last call: "HOST:PORT" in order, each
    once. A connection whose SYN was answered by a RST, never by a SYN-ACK: it was aimed
    at an address nothing inside the jail serves. (The incarnation's own Python sockets
    are refused before they send, by the network guard; what shows here came from below
    Python or from a process it started.) Drained after each incarnation, when its tree
    is dead: every segment of it is queued by then."""
    if jail is None or jail.watch is None:
        return []
    tried: dict[tuple, None] = {}
    answered, reset = set(), set()
    while True:
        try:
            data, address = jail.watch.recvfrom(256)
        except (BlockingIOError, InterruptedError):
            break
        if address[2] == 4:  # PACKET_OUTGOING: the same segment comes in again
            continue
        if data[0] >> 4 == 4:
            head = (data[0] & 0xF) * 4
            src, dst = socket.inet_ntop(socket.AF_INET, data[12:16]), \
                socket.inet_ntop(socket.AF_INET, data[16:20])
        else:
            head = 40
            src, dst = socket.inet_ntop(socket.AF_INET6, data[8:24]), \
                socket.inet_ntop(socket.AF_INET6, data[24:40])
        if len(data) < head + 14:
            continue
        sport, dport = struct.unpack(">HH", data[head:head + 4])
        flags = data[head + 13]
        if flags & 0x12 == 0x02:  # SYN without ACK: a connection asked for
            tried[(src, sport, dst, dport)] = None
        elif flags & 0x12 == 0x12:  # SYN-ACK: something served it
            answered.add((dst, dport, src, sport))
        elif flags & 0x04:
            reset.add((dst, dport, src, sport))
    out: dict[str, None] = {}
    for key in tried:
        if key in reset and key not in answered:
            host = f"[{key[2]}]" if ":" in key[2] else key[2]
            out[f"{host}:{key[3]}"] = None
    return list(out)


def _mounts() -> list[tuple[str, list[str]]]:
    out = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            point = fields[4].encode().decode("unicode_escape")  # \040 for a space
            out.append((point, fields[5].split(",")))
    return out


def _relay(fds: list[int], relayed: list[tuple[str, int]]) -> int:
    """A process of the server's (in the machine's network namespace) that accepts on the
    listeners inside the jail and forwards each connection to the same address outside."""
    pid = os.fork()
    if pid:
        for fd in fds:
            os.close(fd)
        return pid
    try:
        from .lifetime import die_with_parent

        die_with_parent()
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        listeners = {socket.socket(fileno=fd): address for fd, address in zip(fds, relayed)}
        peer: dict[socket.socket, socket.socket] = {}
        while True:
            ready, _, _ = select.select([*listeners, *peer], [], [])
            for s in ready:
                if s in listeners:
                    inside, _ = s.accept()
                    try:
                        outside = socket.create_connection(listeners[s], timeout=10)
                    except OSError:
                        inside.close()
                        continue
                    outside.settimeout(None)
                    peer[inside], peer[outside] = outside, inside
                    continue
                try:
                    data = s.recv(65536)
                except OSError:
                    data = b""
                other = peer.get(s)
                if data and other is not None:
                    try:
                        other.sendall(data)
                        continue
                    except OSError:
                        pass
                for end in (s, other):
                    if end is not None:
                        peer.pop(end, None)
                        end.close()
    finally:
        os._exit(0)


def subreaper() -> None:
    """The fork server adopts every orphan of its children's trees (a process that left
    the incarnation's group is found, and killed, after the incarnation)."""
    if sys.platform.startswith("linux"):
        _libc().prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def enter(jail: Jail | None) -> None:
    """In a fresh child of the fork server, before the agent: lead a process group of its
    own, and enter the jail (or, without one, have every process start refused)."""
    from ..interpose import procguard

    os.setpgid(0, 0)
    if jail is None or not jail.contained:
        procguard.set_contained(False)
        procguard.uncontained_because(
            "subprocess mode cannot contain it on this machine, whose kernel gives faultsim "
            "no network and mount namespace ("
            + (jail.why if jail is not None else "no jail") + ")")
        return
    if jail.watch is not None:
        jail.watch.close()  # the server's to read: this process's copy goes
    cwd = os.getcwd()
    libc = jail.libc or _libc()  # (os.setns is Python 3.12's)
    _call("setns(net)", libc.setns(jail.net_fd, CLONE_NEWNET))
    _call("setns(mnt)", libc.setns(jail.mnt_fd, CLONE_NEWNS))  # the cwd becomes its root
    os.chdir(cwd)
    procguard.set_contained(True)


def left_behind(me: int, helpers: set[int], group: int, ended: bool) -> list[str]:
    """After an incarnation (its process, leader of `group`, reaped): SIGKILL every process
    of its tree still alive (the server's children but its helpers: orphans it adopted as
    subreaper) and say which outlived it: one that left the group, and, when the
    incarnation `ended` by itself rather than by a kill of its group (members still
    dying then), a member of the group. Zombies are only reaped. Repeats until none is
    left: killing one hands its own children to the server."""
    found: list[str] = []
    for _ in range(100):
        alive = []
        for pid, state, pgrp, command in _children_of(me):
            if pid in helpers:
                continue
            if state != "Z" and (pgrp != group or ended):
                found.append(f"pid {pid} {command}")
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            alive.append(pid)
        if not alive:
            return found
        for pid in alive:
            try:
                os.waitpid(pid, 0)
            except ChildProcessError:
                pass
    return found


def _children_of(me: int) -> list[tuple[int, str, int, str]]:
    """The children of process `me`: (pid, state, process group, command)."""
    out = []
    for pid in _child_pids(me):
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                stat = f.read().decode("utf-8", "replace")
            rest = stat.rsplit(")", 1)[1].split()
            if int(rest[1]) != me:
                continue
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                words = f.read().split(b"\0")
        except (OSError, IndexError, ValueError):
            continue
        command = " ".join(w.decode("utf-8", "replace") for w in words if w)[:120]
        out.append((pid, rest[0], int(rest[2]), command or
                    stat.split("(", 1)[-1].split(")")[0]))
    return out


def _child_pids(me: int) -> list[int]:
    # /proc/PID/task/TID/children lists them directly (a scan of /proc cost 25 ms on a
    # busy machine, per incarnation); without it (CONFIG_PROC_CHILDREN off), the scan
    try:
        pids = []
        for tid in os.listdir(f"/proc/{me}/task"):
            with open(f"/proc/{me}/task/{tid}/children") as f:
                pids += [int(p) for p in f.read().split()]
        return pids
    except OSError:
        return [int(n) for n in os.listdir("/proc") if n.isdigit()]
