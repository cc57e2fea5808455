"""README's promises: its first two commands, that CI runs the second one, and that the
output README shows is what `faultsim run scenarios/` prints."""
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


def _without_figures(line: str) -> str:
    return re.sub(r"\s*\d+(\.\d+)?s\b", " <t>", line)  # timings (and their padding) vary


def test_readmes_first_command_prints_what_readme_shows():
    out = subprocess.run([sys.executable, "-m", "faultsim.cli", "run", "scenarios/"],
                         cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stderr
    readme = (ROOT / "README.md").read_text()
    shown = readme[readme.index("What `faultsim run scenarios/` prints"):]
    shown = shown[shown.index("```\n") + 4:]
    shown = shown[:shown.index("```")]
    assert [_without_figures(l) for l in out.stdout.strip().splitlines()] == \
        [_without_figures(l) for l in shown.strip().splitlines()]


def test_readmes_hypothesis_example_runs_as_shown(monkeypatch):
    readme = (ROOT / "README.md").read_text()
    part = readme[readme.index("### Hypothesis strategies for your own tests"):]
    code = part[part.index("```python\n") + 10:]
    code = code[:code.index("```")]
    monkeypatch.chdir(ROOT)
    namespace: dict = {}
    exec(compile(code, "README.md", "exec"), namespace)
    tests = [f for name, f in namespace.items() if name.startswith("test_")]
    assert tests, "the example defines a test"
    for test in tests:
        test()
