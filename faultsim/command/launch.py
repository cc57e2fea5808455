"""How an agent command is started, stopped and read: its environment, its process group
(in the jail of subprocess mode where the kernel allows one), the group's SIGKILL and the
proof that it landed, what it left behind, and the outcome contract.

The outcome contract (docs/reference/agent-contract.md):
  exit status 0, the final answer the last line of stdout   a completed run
  exit status 3, the reason on stderr                       an escalation to a person
  anything else (another status, a signal, no answer)       a failed run
"""
from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path

from ..interpose import procguard  # noqa: F401 - imported before any fork: jail.enter uses it
from ..agent import Outcome
from ..host import jail as _jail
from ..host.groups import kill_groups, members

ESCALATE = 3  # the exit status of an escalation to a person
# Variables never passed on: credentials of real services and proxies that would take
# loopback traffic elsewhere. The fake's key replaces the model's.
_SECRET = re.compile(r"(KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|AUTH|COOKIE|SESSION)"
                     r"|^(AWS|AZURE|GOOGLE|GCP|GCLOUD|ANTHROPIC|OPENAI|CLAUDE|GITHUB|GH|NPM"
                     r"|HF|HUGGING)_|PROXY$", re.I)
DIRS = ("work", "home", "tmp")  # the sandbox: the agent's cwd, HOME, TMPDIR


def split(command: str) -> list[str]:
    """`cmd:node agent.mjs` or `node agent.mjs` as argv (shell words). A word naming a file
    that exists relative to the current directory (the agent's script) is made absolute:
    the command runs in the sandbox's workdir."""
    words = shlex.split(command.removeprefix("cmd:"))
    if not words:
        raise ValueError(f"agent {command!r}: no command after 'cmd:'")
    return [os.path.abspath(w) if not os.path.isabs(w) and not w.startswith("-")
            and os.path.isfile(w) else w for w in words]


def environment(root: Path, base: dict[str, str], *, seed: str,
                incarnation: int) -> dict[str, str]:
    """What the command runs with: this process's variables but credentials and proxies,
    HOME and TMPDIR in the sandbox, the seed and the incarnation, and `base` (the fake's
    ANTHROPIC_BASE_URL and ANTHROPIC_API_KEY, FAULTSIM_TASK, the services' URLs)."""
    env = {k: v for k, v in os.environ.items() if not _SECRET.search(k)
           and not k.startswith("FAULTSIM_") and not k.startswith("PYTEST_")}
    env.update(HOME=str(root / "home"), TMPDIR=str(root / "tmp"),
               FAULTSIM_SEED=str(seed), FAULTSIM_INCARNATION=str(incarnation),
               NO_PROXY="*", PYTHONDONTWRITEBYTECODE="1")
    env.update(base)
    return env


@dataclass
class Jailed:
    """The jail one incarnation runs in, or why there is none (`jail.Jail.why`)."""

    jail: _jail.Jail

    @classmethod
    def build(cls, writable: Path, addresses: list[tuple[str, int]]) -> "Jailed":
        return cls(_jail.establish(str(writable), addresses))

    def preexec(self) -> None:  # in the child, between fork and exec
        if self.jail.contained:
            _jail.enter(self.jail)
        else:
            os.setpgid(0, 0)

    def close(self) -> None:
        for pid in self.jail.helpers:
            try:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
            except (ProcessLookupError, ChildProcessError):
                pass
        for fd in (self.jail.net_fd, self.jail.mnt_fd):
            if fd is not None:
                os.close(fd)
        if self.jail.watch is not None:
            self.jail.watch.close()


def start(argv: list[str], cwd: Path, env: dict[str, str], jailed: Jailed,
          out: Path, err: Path) -> subprocess.Popen:
    """The command in a process group of its own (its pid is the group's id)."""
    with open(out, "wb") as stdout, open(err, "wb") as stderr:
        return subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                                stdout=stdout, stderr=stderr, preexec_fn=jailed.preexec)


def kill_group(process: subprocess.Popen, timeout: float = 10.0) -> bool:
    """SIGKILL the command's process group; True once no process of it is left (the
    leader reaped: it is our child). `faultsim.host.groups`' kill, shared with the Claude Agent
    SDK adapter."""
    return kill_groups([process.pid], timeout, reap=process.wait)


def left_behind(pgid: int) -> list[str]:
    """Processes of the command's group still alive after it ended (SIGKILLed, named)."""
    found = []
    for pid, command in members(pgid):
        found.append(f"pid {pid} {command}")
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return found


def abridged(text: str, limit: int = 600) -> str:
    text = text.strip()
    if len(text) <= limit:
        return text
    return text[:limit // 3] + " [...] " + text[-(2 * limit) // 3:]


def outcome(code: int, stdout: str, stderr: str) -> tuple[Outcome | None, str | None]:
    """The contract: (the outcome, None), or (None, why the run failed)."""
    if code == 0:
        lines = [line for line in stdout.splitlines() if line.strip()]
        if not lines:
            return None, "exit status 0 with nothing on stdout (the final answer is its " \
                         "last line)"
        return Outcome("completed", lines[-1].strip()), None
    if code == ESCALATE:
        reason = stderr.strip() or "(no reason on stderr)"
        return Outcome("escalated", None, escalation=abridged(reason, 300)), None
    how = f"killed by signal {-code}" if code < 0 else f"exit status {code}"
    return None, f"{how}; stderr: {abridged(stderr) or '(empty)'}"
