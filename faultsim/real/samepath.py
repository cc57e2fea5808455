"""One absolute workdir for every incarnation of a run, whichever fork server runs it.

An agent may put its absolute `env.workdir` into what it keeps: a checkpoint field, an
idempotency key (`f"{workdir}:{task}:{step}"`). If the crashed incarnation and the resumed
one saw different paths, a correct key would turn into a "duplicate effect", and two clean
runs on two servers would be judged non-deterministic. So every fork server gives its
children the same path, `RUN_DIR/sandbox` (the in-process mode has its one fixed path,
`/faultsim/sandbox`, by construction).

How, in order of preference:

1. **A private mount namespace per fork server** (Linux `unshare(CLONE_NEWNS)`, with
   `CLONE_NEWUSER` when not root): the server bind-mounts its own directory
   (`RUN_DIR/sandbox-N`) over `RUN_DIR/sandbox`, visible to it and its children only.
   N servers judge N crash states at once, each at the one path. Mounts are made private
   first, so nothing propagates back to the machine's namespace, and the namespace dies
   with the server (no unmount to forget).
2. **Taking turns at the one real path**, where the kernel refuses that: unprivileged
   user namespaces switched off (`kernel.unprivileged_userns_clone=0`, AppArmor's
   `apparmor_restrict_unprivileged_userns`), or a container whose seccomp profile
   forbids `unshare`/`mount` (Docker's default). Servers then share `RUN_DIR/sandbox` and
   hold an exclusive `flock` from putting a crash state in place until they have read
   back what the child left: verdicts stay the same, only the servers no longer overlap
   while a child runs (their set-up, the parent's judging and pickling still do).

Why not something else: a per-process path such as `/proc/self/cwd` is one string but
resolves differently for `os.path.realpath`; chroot needs privileges the namespace
route already tries; a fixed path outside the run folder would clash between two
faultsim runs (or two users) on one machine in the fallback.

`FAULTSIM_SAME_PATH=turns` forces the fallback (to test it, or where namespaces misbehave).
"""
from __future__ import annotations

import ctypes
import ctypes.util
import fcntl
import os
import sys
from dataclasses import dataclass

CANONICAL = "sandbox"  # the directory under the run folder every child sees as its workdir
FORCE_ENV = "FAULTSIM_SAME_PATH"

CLONE_NEWNS = 0x00020000
CLONE_NEWUSER = 0x10000000
MS_BIND = 4096
MS_REC = 16384
MS_PRIVATE = 1 << 18
MNT_DETACH = 2


@dataclass
class SamePath:
    """How one fork server gives its children the canonical path."""

    root: str  # the canonical path: what the server and its children use
    how: str  # "namespace" or "turns"
    why: str = ""  # why not a namespace (for the fallback)
    _lock_fd: int | None = None

    def __enter__(self) -> "SamePath":
        """Held from putting a state in place until it is read back (turns only)."""
        if self.how == "turns":
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc) -> None:
        if self.how == "turns":
            fcntl.flock(self._lock_fd, fcntl.LOCK_UN)

    def release_mount(self) -> None:
        """Before removing the run folder from inside the namespace: the mount point
        would otherwise stay busy (and the folder with it)."""
        if self.how == "namespace":
            _libc().umount2(self.root.encode(), MNT_DETACH)


def canonical_path(run_dir: str) -> str:
    return os.path.join(run_dir, CANONICAL)


def establish(run_dir: str, own: str) -> SamePath:
    """In a fork server, before any thread exists (unshare(CLONE_NEWUSER) refuses a
    multi-threaded process): make `canonical_path(run_dir)` this server's `own`
    directory for it and its children, or fall back to taking turns."""
    root = canonical_path(run_dir)
    forced = os.environ.get(FORCE_ENV, "")
    why = "FAULTSIM_SAME_PATH=turns" if forced == "turns" else _private_mount(own, root)
    if not why:
        return SamePath(root, "namespace")
    fd = os.open(root + ".lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    return SamePath(root, "turns", why, fd)


def _libc():
    lib = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    lib.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p,
                          ctypes.c_ulong, ctypes.c_void_p]
    lib.umount2.argtypes = [ctypes.c_char_p, ctypes.c_int]
    return lib


def _private_mount(own: str, root: str) -> str:
    """Bind `own` over `root` in a new mount namespace; '' on success, else why not."""
    if not sys.platform.startswith("linux"):
        return f"no mount namespaces on {sys.platform}"
    try:
        libc = _libc()
    except OSError as exc:
        return f"libc: {exc}"
    uid, gid = os.geteuid(), os.getegid()

    def call(what: str, result: int) -> str:
        if result == 0:
            return ""
        err = ctypes.get_errno()
        return f"{what}: {os.strerror(err)}"

    # root (or CAP_SYS_ADMIN) needs no user namespace; try the plain one first
    why = call("unshare(CLONE_NEWNS)", libc.unshare(CLONE_NEWNS)) if uid == 0 else "not root"
    if why:
        why = call("unshare(CLONE_NEWUSER|CLONE_NEWNS)",
                   libc.unshare(CLONE_NEWUSER | CLONE_NEWNS))
        if why:
            return why
        try:  # the same ids inside: files keep their owner, as outside
            _write("/proc/self/setgroups", "deny")
            _write("/proc/self/uid_map", f"{uid} {uid} 1")
            _write("/proc/self/gid_map", f"{gid} {gid} 1")
        except OSError as exc:
            return f"user namespace id maps: {exc}"
    # private first: a bind mount must never show in the machine's namespace
    why = call("mount --make-rprivate /", libc.mount(None, b"/", None, MS_REC | MS_PRIVATE,
                                                     None))
    return why or call(f"mount --bind {own} {root}",
                       libc.mount(own.encode(), root.encode(), None, MS_BIND, None))


def _write(path: str, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)
