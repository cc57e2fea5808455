"""README's promises: its first two commands, that CI runs the second one, and that the
output README shows is what `faultsim run scenarios/` prints."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def readme_commands():
    text = (ROOT / "README.md").read_text()
    block = re.search(r"```\n(.*?)```", text, re.S).group(1)
    return [line for line in block.splitlines() if line.strip()]


def test_readme_opens_with_the_two_commands():
    first, second = readme_commands()[:2]
    assert first.endswith("faultsim run scenarios/")
    assert second.endswith("python -m pytest -n 2")  # two xdist workers: see README
    assert "pip install -e" in first and "pip install -e '.[test]'" in second


def test_ci_runs_readmes_test_command_and_fails_on_exit_5():
    ci = (ROOT / ".ci/run").read_text()
    assert readme_commands()[1] in ci.splitlines()
    assert '"$rc" -eq 5' in ci


def _without_figures(line: str) -> str:
    # timings vary, and with them a table's column widths
    return " ".join(re.sub(r"\b\d+(\.\d+)?s\b", "<t>", line).split())


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


def _python_blocks(section: str) -> list[str]:
    readme = (ROOT / "README.md").read_text()
    part = readme[readme.index(section):]
    part = part[:part.index("\n## ", 1)] if "\n## " in part[1:] else part
    return re.findall(r"```python\n(.*?)```", part, re.S)


def _project(pytester, test_code: str) -> None:
    pytester.makeini("[pytest]\n")
    (pytester.path / "scenarios").symlink_to(ROOT / "scenarios")
    pytester.makepyfile(test_crash_safety=test_code)


def _block(section: str, containing: str) -> str:
    (code,) = [b for b in _python_blocks(section) if containing in b]
    return code


def test_readmes_own_agent_snippets_are_the_examples_code():
    example = (ROOT / "examples" / "receipts" / "receipts_agent.py").read_text()
    effect = _block("## Test your own agent", "@faultsim.effect")
    assert effect.splitlines()[0] in example and effect.splitlines()[1].split(":")[0] \
        in example
    test = (ROOT / "examples" / "receipts" / "test_receipts.py").read_text()
    marker = _block("## Test your own agent", "crash_safety.check()   #")
    assert marker.splitlines()[1] in test  # the same test function
    readme = (ROOT / "README.md").read_text()
    toml = re.search(r"```toml\n(\[tool\.faultsim\].*?)```", readme, re.S).group(1)
    import tomllib

    from faultsim.config import KEYS
    assert set(tomllib.loads(toml)["tool"]["faultsim"]) <= set(KEYS)


def test_readmes_five_line_example_runs_as_shown(pytester):
    code = _block("## Test your own agent", "@faultsim.parametrize")
    assert len([line for line in code.splitlines() if line.strip()]) == 5
    _project(pytester, code)
    # as shown, on one shard of 64 (the whole takes many minutes): items with pairs, on xdist
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "test_crash_safety.py",
                                           "-n", "2", "--faultsim-shard=1/64")
    counts = result.parseoutcomes()
    assert counts.get("passed", 0) == len(range(0, 984, 64)) and "failed" not in counts
    text = result.stdout.str()
    assert re.search(r"process +16/984 kill points", text)
    assert re.search(r"2 crashes: \d+ schedules, [1-9]\d* explored", text)
    assert "violations: none" in text


def test_readmes_whole_scenario_example_runs_as_shown(pytester):
    code = _block("## Test your own agent", "def test_whole_scenario")
    _project(pytester, code)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "test_crash_safety.py",
                                           "--faultsim-crashes=1", "--faultsim-shard=1/8")
    result.assert_outcomes(passed=1)
    text = result.stdout.str()
    assert re.search(r"process +123/984 kill points", text)
    assert re.search(r"power +123/984 kill points", text)
    assert "version probe ok" in text


def test_readmes_own_client_agent_is_served(tmp_path, monkeypatch):
    import anthropic

    import faultsim

    code = _python_blocks("### An agent that builds its own client")[0]
    (tmp_path / "my_agent.py").write_text(code)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.delenv("ANTHROPIC_BASE_URL", raising=False)
    import my_agent

    original = anthropic.Anthropic.__init__
    scenario = faultsim.load_scenario(ROOT / "tests/data/tiny.toml")
    record = faultsim.run_once(scenario, my_agent.make_agent)
    assert record.outcome.final_answer == scenario.expected_final_answer
    assert len(record.world.model.requests) >= 5  # its own client reached the fake
    report = faultsim.explore(my_agent.make_agent, scenario, crashes=1, workers=0,
                              only=lambda p: p.category == "after-effect")
    assert report.ok and len(report.runs[0].verdicts) == 8
    assert anthropic.Anthropic.__init__ is original  # restored after each incarnation


def _block_after(marker: str, fence: str = "```\n") -> str:
    readme = (ROOT / "README.md").read_text()
    part = readme[readme.index(marker):]
    part = part[part.index(fence) + len(fence):]
    return part[:part.index("```")]


def test_readmes_formats_check_prints_what_readme_shows():
    block = _block_after("**In CI**, check every corpus").strip().splitlines()
    command = block[0].removeprefix("$ ").split()
    assert command[:3] == ["faultsim", "formats", "check"]
    out = subprocess.run([sys.executable, "-m", "faultsim.cli", *command[1:]], cwd=ROOT,
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.strip().splitlines() == block[1:]


def test_readmes_round_trip_example_runs_as_shown(monkeypatch):
    code = _block_after("**Round trip.**", "```python\n")
    monkeypatch.chdir(ROOT)
    namespace: dict = {}
    exec(compile(code, "README.md", "exec"), namespace)
    namespace["test_round_trip"]()
    # and the example can fail: a save that is not idempotent (each call writes one more
    # trailing space, which a load ignores) is refused by the same example
    dumps, calls = namespace["dumps"], [0]

    def drifting(checkpoint):
        calls[0] += 1
        return dumps(checkpoint) + b" " * calls[0]

    namespace["dumps"] = drifting
    with pytest.raises(AssertionError, match="not idempotent"):
        namespace["test_round_trip"]()
