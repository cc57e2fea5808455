"""Whether strace can trace a command here: asked by both backends that run under it (the
command backend, `faultsim.command`, and the Claude Agent SDK adapter's transcript
writes). Standard library only."""
from __future__ import annotations

import shutil
import subprocess


def strace_unavailable() -> str | None:
    """Why strace cannot trace a command here (one line), or None when it can."""
    strace = shutil.which("strace")
    if strace is None:
        return "strace is not installed (apt-get install strace)"
    try:
        done = subprocess.run([strace, "-f", "-qq", "-o", "/dev/null", "true"],
                              capture_output=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"strace cannot run here: {exc}"
    if done.returncode != 0:
        first = (done.stderr.decode(errors="replace").strip().splitlines() or ["?"])[0]
        return f"strace cannot trace here: {first}"
    return None
