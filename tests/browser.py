"""A real browser for the HTML report's tests (and bench/html_report.py): Debian's headless
Chromium, started on a local file only, with a fresh profile, no sandbox (CI runs as root)
and every background service off; host names resolve to nothing, so the page could not
reach the network even if it tried.

Without the binary the browser tests skip, so that a laptop without it still runs the rest;
CI (.ci/run installs the `chromium` package) sets FAULTSIM_REQUIRE_CHROMIUM=1 so that a
missing browser fails instead of silently skipping.
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path

MISSING = ("chromium not installed: apt-get install --no-install-recommends chromium "
           "(CI installs it)")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-extensions", "--host-resolver-rules=MAP * ~NOTFOUND"]


def chromium() -> str | None:
    for name in ("chromium", "chromium-browser"):
        found = shutil.which(name)
        if found:
            return found
    return None


def require() -> str:
    """The browser's path, else the test skips (fails under FAULTSIM_REQUIRE_CHROMIUM=1)."""
    import pytest

    found = chromium()
    if found is None:
        if os.environ.get("FAULTSIM_REQUIRE_CHROMIUM") == "1":
            pytest.fail(MISSING)
        pytest.skip(MISSING)
    return found


def _run(binary: str, page: Path, *extra: str, timeout: float = 90) -> str:
    with tempfile.TemporaryDirectory(prefix="faultsim-chromium-") as profile:
        # its own process group: on a timeout the browser's helpers go with it
        proc = subprocess.Popen([binary, *FLAGS, f"--user-data-dir={profile}", *extra,
                                 Path(page).resolve().as_uri()], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, start_new_session=True)
        try:
            stdout, stderr = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            raise RuntimeError(f"chromium took more than {timeout:g} s on {page}") from None
    if proc.returncode != 0:
        raise RuntimeError(f"chromium exited {proc.returncode}: {stderr[-400:]}")
    return stdout


def dump_dom(binary: str, page: Path, size: str | None = None) -> str:
    """The page's DOM once it loaded and its scripts ran (in a window of `size`, "W,H")."""
    return _run(binary, page, "--dump-dom", *([f"--window-size={size}"] if size else []))


def screenshot(binary: str, page: Path, png: Path, size: str = "1400,1800") -> None:
    _run(binary, page, f"--screenshot={Path(png).resolve()}", f"--window-size={size}",
         "--hide-scrollbars")
    if not Path(png).is_file():
        raise RuntimeError(f"chromium wrote no screenshot {png}")
