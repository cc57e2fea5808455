"""README's promises: its first two commands, and that CI runs the second one."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def readme_commands():
    text = (ROOT / "README.md").read_text()
    block = re.search(r"```\n(.*?)```", text, re.S).group(1)
    return [line for line in block.splitlines() if line.strip()]


def test_readme_opens_with_the_two_commands():
    first, second = readme_commands()[:2]
    assert first.endswith("faultsim run scenarios/")
    assert second.endswith("python -m pytest")
    assert "pip install -e" in first and "pip install -e '.[test]'" in second


def test_ci_runs_readmes_test_command_and_fails_on_exit_5():
    ci = (ROOT / ".ci/run").read_text()
    assert readme_commands()[1] in ci.splitlines()
    assert '"$rc" -eq 5' in ci


def test_readmes_first_command_runs_the_bundled_scenarios():
    """`faultsim run scenarios/` as README shows it (the installed console script's code)."""
    out = subprocess.run([sys.executable, "-m", "faultsim.cli", "run", "scenarios/"],
                         cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "support_tickets" in out.stdout and "as expected     yes" in out.stdout
    readme = (ROOT / "README.md").read_text()
    for line in out.stdout.splitlines():  # the output README shows is the real one
        assert line in readme, line
