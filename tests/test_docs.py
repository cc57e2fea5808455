"""The docs' promises: README opens with the two commands (CI runs the second); every code
block of README.md and docs/ is executed here, checked by a named test here, or marked as
not run with its reason; outputs shown are what the commands print; the site builds
strictly.

Each fenced block is preceded by an HTML comment, invisible on GitHub and in the site:

    <!-- docs: run -->                               executed by test_the_run_blocks
    <!-- docs: checked-by tests/test_docs.py::NAME --> NAME reads it via checked_blocks()
    <!-- docs: checked-by tests/FILE.py::NAME -->      NAME, in FILE beside the feature it
                                                      documents, reads the page itself
    <!-- docs: not-run: REASON -->                    deliberately not run, and why

A `run` block is, by its language: python (executed from the repository's root; its
`test_*` functions called), toml (parsed; a scenario's keys checked against the JSON
Schema, a `[tool.faultsim]` table's against the config keys), yaml (parsed; the inputs
given to faultsim's action checked against action.yml), console (each `$ ` line run from
the repository's root, `cd` honoured; the lines after it compared with its stdout, timings
aside, a `...` line standing for lines left out)."""
from __future__ import annotations

import difflib
import functools
import inspect
import json
import re
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
MARKER = re.compile(r"^\s*<!-- docs: (run|checked-by tests/(\w+)\.py::(\w+)|not-run: (.+?)) -->$")
FENCE = re.compile(r"^(\s*)```(\S*)")


@dataclass
class Block:
    page: Path
    line: int  # 1-based, of the opening fence
    lang: str
    marker: str | None
    code: str

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def blocks(page: Path) -> list[Block]:
    lines = page.read_text().split("\n")
    out, i = [], 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, start = len(m.group(1)), i
        i += 1
        body = []
        while not lines[i].strip().startswith("```"):
            body.append(lines[i][indent:])
            i += 1
        marker = lines[start - 1].strip() if start and MARKER.match(lines[start - 1]) else None
        out.append(Block(page, start + 1, m.group(2), marker, "\n".join(body) + "\n"))
        i += 1
    return out


ALL = [b for page in PAGES for b in blocks(page)]


def checked_blocks(name: str | None = None) -> list[Block]:
    """The blocks whose marker names the calling test (or `name`)."""
    name = name or inspect.stack()[1].function
    found = [b for b in ALL if b.marker == f"<!-- docs: checked-by tests/test_docs.py::{name} -->"]
    assert found, f"no block is marked checked-by {name}"
    return found


# -- the markers ---------------------------------------------------------------------------

def test_every_block_is_marked_deliberately():
    assert len(ALL) > 40 and {b.page.name for b in ALL} >= {"README.md", "first-agent.md"}
    here = sys.modules[__name__]
    for b in ALL:
        assert b.marker, f"{b.where}: a code block without a <!-- docs: ... --> marker"
        m = MARKER.match(b.marker)
        if m.group(2) == "test_docs":  # checked-by: a test of this file that reads its blocks
            test = getattr(here, m.group(3), None)
            assert callable(test), f"{b.where}: checked-by names no test: {m.group(3)}"
            assert "checked_blocks(" in inspect.getsource(test), \
                f"{b.where}: {m.group(3)} does not read the blocks marked for it"
        elif m.group(2):  # checked-by a test elsewhere: it exists, and its file reads the page
            source = (ROOT / "tests" / f"{m.group(2)}.py").read_text()
            assert re.search(rf"^def {m.group(3)}\(", source, re.M), \
                f"{b.where}: checked-by names no test: tests/{m.group(2)}.py::{m.group(3)}"
            assert b.page.name in source, f"{b.where}: tests/{m.group(2)}.py never reads {b.page.name}"
        elif m.group(4):  # not-run: a reason, in words
            assert len(m.group(4).split()) >= 5, f"{b.where}: say why it is not run"
        else:
            assert b.lang in RUNNERS, f"{b.where}: no way to run a {b.lang or 'plain'} block"


def test_the_marker_check_catches_an_unmarked_or_unexplained_block(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("text\n\n```python\nx = 1\n```\n<!-- docs: not-run: slow -->\n```\n$ a\n```\n")
    found = blocks(page)
    assert [b.marker for b in found] == [None, "<!-- docs: not-run: slow -->"]
    assert len(MARKER.match(found[1].marker).group(4).split()) < 5  # refused as a reason


# -- README's two commands -----------------------------------------------------------------

def readme_commands() -> list[str]:
    return [line for line in ALL[0].code.splitlines() if line.strip()]


def test_readme_opens_with_the_two_commands():
    assert ALL[0].page.name == "README.md" and ALL[0].line < 12  # the first thing it shows
    for block in checked_blocks():
        first, second = [line for line in block.code.splitlines() if line.strip()]
        assert first.endswith("faultsim run scenarios/")
        assert second.endswith("python -m pytest -n 4")  # four xdist workers: see README
        assert "pip install -e" in first and "pip install -e '.[test]'" in second
    assert ALL[0] in checked_blocks("test_readme_opens_with_the_two_commands")


def test_ci_runs_readmes_test_command_and_fails_on_exit_5():
    ci = (ROOT / ".ci/run").read_text()
    assert readme_commands()[1] in ci.splitlines()
    assert '"$rc" -eq 5' in ci


def _without_figures(line: str) -> str:
    # timings vary, and with them a table's column widths
    # (and a forecast's: "about 6 s of CPU", pipeline/forecast.py)
    line = re.sub(r"\babout \d+(\.\d+)? (s|min|h)\b", "about <t>", line)
    return " ".join(re.sub(r"\b\d+(\.\d+)?s\b", "<t>", line).split())


def _shows(shown: list[str], printed: list[str]) -> bool:
    """`shown` is `printed`, timings aside; a `...` line in `shown` stands for any lines
    (then each part between them is a run of consecutive printed lines, in order)."""
    shown = [_without_figures(line) for line in shown]
    printed = [_without_figures(line) for line in printed]
    if "..." not in shown:
        return shown == printed
    parts, part = [], []
    for line in shown:
        if line == "...":
            parts.append(part)
            part = []
        else:
            part.append(line)
    parts.append(part)
    at = 0
    for k, part in enumerate(parts):
        if not part:
            continue
        starts = [i for i in range(at, len(printed) - len(part) + 1)
                  if printed[i:i + len(part)] == part]
        if not starts or (k == 0 and starts[0] != 0):
            return False
        at = starts[0] + len(part)
    return not parts[-1] or at == len(printed)


def test_shown_output_is_compared_strictly():
    printed = ["a 1.0s", "b", "c", "d"]
    assert _shows(["a 2.5s", "b", "c", "d"], printed)
    assert _shows(["a", "...", "c", "..."], ["a", "b", "c", "d"])
    assert not _shows(["a", "c"], ["a", "b", "c"])
    assert not _shows(["...", "c", "b"], ["a", "b", "c"])
    assert not _shows(["b", "..."], ["a", "b"])  # an abridged block starts where it starts


def test_first_command_prints_what_the_docs_show():
    """The one run of `faultsim run scenarios/` in the docs tests (about two minutes): the full
    output in the CLI reference, README's table a tail of it."""
    out = subprocess.run([sys.executable, "-m", "faultsim.cli", "run", "scenarios/"],
                         cwd=ROOT, capture_output=True, text=True, timeout=1800)  # a hang guard
    assert out.returncode == 0, out.stderr
    printed = out.stdout.strip().splitlines()
    pages = set()
    for block in checked_blocks():
        shown = block.code.strip().splitlines()
        if block.page.name == "README.md":  # the table it ends with
            shown = ["...", *shown]
        assert _shows(shown, printed), f"{block.where}: the shown lines against the printed " \
            "ones, timings aside:\n" + "\n".join(difflib.unified_diff(
                [_without_figures(x) for x in shown], [_without_figures(x) for x in printed],
                "shown", "printed", lineterm=""))
        pages.add(block.page.name)
    assert pages == {"README.md", "cli.md"}


# What runs README's first command's sweep, `faultsim run scenarios/` (the whole bundled
# library; several CPU-minutes): an argument list naming the folder itself, or a command
# line. Its one run is test_first_command_prints_what_the_docs_show's.
WHOLE_LIBRARY = re.compile(
    r"""["']run["'],\s*(?:["']scenarios/?["']|str\((?:ROOT\s*/\s*["']scenarios["']|"""
    r"""SCENARIOS)\))\s*[,\]]|faultsim(?:\.cli)?\s+run\s+scenarios/?(?:\s|["']|$)""", re.M)


def whole_library_runs(files: dict[str, str]) -> list[str]:
    """Where (file:line) a test file or a docs block marked `run` sweeps the whole library."""
    return [f"{name}:{text[:m.start()].count(chr(10)) + 1}"
            for name, text in files.items() for m in WHOLE_LIBRARY.finditer(text)]


def test_readmes_first_command_runs_once_in_the_suite():
    """The suite runs `faultsim run scenarios/` once (the test above): no other test file,
    example test or docs block marked `run` sweeps the whole library again."""
    files = {str(p.relative_to(ROOT)): p.read_text()
             for p in [*(ROOT / "tests").rglob("*.py"), *(ROOT / "examples").rglob("test_*.py")]
             if p.name != "test_docs.py"}
    files |= {b.where: b.code for b in ALL if b.marker == "<!-- docs: run -->"}
    assert len(whole_library_runs(
        {"first": inspect.getsource(test_first_command_prints_what_the_docs_show)})) == 1
    assert whole_library_runs(files) == []
    # and the check sees the ways a test or a page would run it
    for again in ('main(["run", "scenarios/", "--json", out])',
                  "subprocess.run([exe, '-m', 'faultsim.cli', 'run', 'scenarios'])",
                  'main(["run", str(ROOT / "scenarios")])', 'main(["run", str(SCENARIOS)])',
                  "$ faultsim run scenarios/\n", "faultsim run scenarios/ --junit x.xml"):
        assert whole_library_runs({"x": again}) == ["x:1"], again
    for other in ('main(["run", "scenarios/refunds.toml"])', "faultsim run scenarios/long/x",
                  'str(ROOT / "scenarios" / "flaky_api.toml")'):
        assert whole_library_runs({"x": other}) == [], other


# -- the run blocks ------------------------------------------------------------------------

# The session's shared results (tests/shared_runs.py), set for the run blocks' tests: a
# command shown on several pages (README's receipts run is on three) runs once per session,
# not once per xdist worker that meets it
_SHARED = None


@pytest.fixture
def _shared_runs(shared_cache, monkeypatch):
    monkeypatch.setattr(sys.modules[__name__], "_SHARED", shared_cache)


@functools.lru_cache(maxsize=None)
def _run(cwd: Path, command: str) -> subprocess.CompletedProcess:
    words = command.split(" ", 1)
    if words[0] in ("faultsim", "python"):
        exe = [sys.executable, "-m", "faultsim.cli"] if words[0] == "faultsim" else [sys.executable]
        command = " ".join(map(str, exe)) + (" " + words[1] if len(words) > 1 else "")

    def run() -> subprocess.CompletedProcess:
        return subprocess.run(["bash", "-c", command], cwd=cwd, capture_output=True,
                              text=True, timeout=300)

    return run() if _SHARED is None else _SHARED.get(f"docs run\n{cwd}\n{command}", run)


# Each runner returns how many things it checked: a run block that checks nothing (a console
# block without a `$ ` line, YAML that uses neither faultsim's action nor its pre-commit
# hook) is a marker that lies.

def run_console(block: Block) -> int:
    cwd, command, shown = ROOT, None, []
    ran = 0

    def check():
        nonlocal ran
        if command is not None:
            out = _run(cwd, command)
            assert _shows(shown, out.stdout.rstrip("\n").split("\n")), \
                f"{block.where}: `{command}` printed\n{out.stdout}{out.stderr[-2000:]}"
            ran += 1

    for line in block.code.rstrip("\n").split("\n"):
        if line.startswith("$ cd "):
            check()
            cwd, command, shown = (cwd / line[5:]).resolve(), None, []
        elif line.startswith("$ "):
            check()
            command, shown = line[2:], []
        else:
            shown.append(line)
    check()
    return ran


def run_python(block: Block, monkeypatch) -> int:
    monkeypatch.chdir(ROOT)
    namespace: dict = {"__name__": "docs_block"}
    exec(compile(block.code, block.where, "exec"), namespace)
    tests = [t for name, t in namespace.items() if name.startswith("test_") and callable(t)]
    for test in tests:
        test()
    return 1 + len(tests)  # the block ran to its end, then each test it defines


def run_toml(block: Block) -> int:
    data = tomllib.loads(block.code)
    if "tool" in data:
        from faultsim.settings.config import KEYS
        assert set(data["tool"]["faultsim"]) <= set(KEYS), block.where
        return len(data["tool"]["faultsim"])
    from faultsim.scenario.schema import schema
    from test_validate import _conforms
    s = schema()
    problems = _conforms(data, s, s["$defs"])
    if "task" not in data:  # a fragment: only what it names must be known
        problems = [p for p in problems if not p.endswith(": missing")]
    assert problems == [], block.where
    return len(data)


def run_yaml(block: Block) -> int:
    import yaml
    data = yaml.safe_load(block.code)
    inputs = set(yaml.safe_load((ROOT / "action.yml").read_text())["inputs"])
    hooks = {h["id"] for h in yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text())}
    steps = 0
    for job in (data or {}).get("jobs", {}).values():
        for step in job["steps"]:
            if "faultsim@" in step.get("uses", ""):
                assert set(step.get("with", {})) <= inputs, block.where
                steps += 1
    for repo in (data or {}).get("repos", []):  # a .pre-commit-config.yaml using our hooks
        for hook in repo.get("hooks", []):
            assert hook["id"] in hooks, f"{block.where}: no hook {hook['id']!r}"
            steps += 1
    return steps


RUNNERS = {"console": run_console, "python": run_python, "toml": run_toml, "yaml": run_yaml}


def test_a_console_block_that_shows_other_output_fails():
    block = Block(ROOT / "README.md", 1, "console", "<!-- docs: run -->",
                  "$ faultsim validate examples/receipts/scenario.toml 2>&1\nall fine\n")
    with pytest.raises(AssertionError, match="printed"):
        run_console(block)


def test_a_run_block_that_checks_nothing_counts_nothing():
    """test_the_run_blocks refuses these: a console block with no command, a workflow that
    uses neither faultsim's action nor its hook."""
    assert run_console(Block(ROOT / "README.md", 1, "console", None, "only output\n")) == 0
    assert run_yaml(Block(ROOT / "README.md", 1, "yaml", None,
                          "jobs:\n  t:\n    steps:\n      - uses: actions/checkout@v4\n")) == 0
    hook = "repos:\n  - repo: r\n    hooks:\n      - id: {}\n"
    assert run_yaml(Block(ROOT / "README.md", 1, "yaml", None, hook.format("faultsim-validate"))) == 1
    with pytest.raises(AssertionError, match="no hook"):
        run_yaml(Block(ROOT / "README.md", 1, "yaml", None, hook.format("faultsim-nope")))


RUN_PAGES = sorted({b.page for b in ALL if b.marker == "<!-- docs: run -->"})


@pytest.mark.parametrize("page", RUN_PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_the_run_blocks(page, monkeypatch, _shared_runs):
    for block in blocks(page):
        if block.marker == "<!-- docs: run -->":
            runner = RUNNERS[block.lang]
            checks = runner(block, monkeypatch) if block.lang == "python" else runner(block)
            assert checks > 0, f"{block.where}: marked run, but running it checks nothing"


# -- blocks checked by their own tests -----------------------------------------------------

def _project(pytester, test_code: str) -> None:
    pytester.makeini("[pytest]\n")
    (pytester.path / "scenarios").symlink_to(ROOT / "scenarios")
    pytester.makepyfile(test_crash_safety=test_code)


def test_own_agent_snippets_are_the_examples_code():
    example = (ROOT / "examples" / "receipts" / "receipts_agent.py").read_text()
    test = (ROOT / "examples" / "receipts" / "test_receipts.py").read_text()
    from faultsim.settings.config import KEYS
    kinds = set()
    for block in checked_blocks():
        lines = block.code.splitlines()
        if block.lang == "toml":
            assert set(tomllib.loads(block.code)["tool"]["faultsim"]) <= set(KEYS)
            kinds.add("toml")
        elif "@faultsim.effect" in block.code:
            assert lines[0] in example and lines[1].split(":")[0] in example
            kinds.add("effect")
        else:
            assert lines[1] in test  # the same test function
            kinds.add("test")
    assert kinds == {"toml", "effect", "test"}


def test_five_line_example_runs_as_shown(pytester):
    codes = {b.code for b in checked_blocks()}
    assert len(codes) == 1, "README and the plugin reference show the same example"
    (code,) = codes
    assert len([line for line in code.splitlines() if line.strip()]) == 5
    _project(pytester, code)
    # as shown, on one shard of 128 (the whole takes many minutes; each item's pair stage
    # is most of a shard's cost): items with pairs, on xdist, one item per worker at least
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "test_crash_safety.py",
                                           "-n", "2", "--faultsim-shard=1/128")
    counts = result.parseoutcomes()
    assert counts.get("passed", 0) == len(range(0, 984, 128)) and "failed" not in counts
    text = result.stdout.str()
    assert re.search(r"process +8/984 kill points", text)
    assert re.search(r"2 crashes: \d+ schedules, [1-9]\d* explored", text)
    assert "violations: none" in text


def test_whole_scenario_example_runs_as_shown(pytester):
    (block,) = checked_blocks()
    _project(pytester, block.code)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "test_crash_safety.py",
                                           "--faultsim-crashes=1", "--faultsim-shard=1/8")
    result.assert_outcomes(passed=1)
    text = result.stdout.str()
    # a shard crashes at every kill point and judges only the crash states it owns
    for model, total in (("process", 984), ("power", None)):
        found = re.search(model + r" +984/984 kill points.*\n +(\d+) crash states", text)
        assert found, model
        assert 0 < int(found.group(1)) < (total or 10 ** 6)
    assert "version probe ok" in text


def test_own_client_agent_is_served(tmp_path, monkeypatch):
    import anthropic

    import faultsim

    (block,) = checked_blocks()
    (tmp_path / "my_agent.py").write_text(block.code)
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


def test_formats_check_prints_what_the_docs_show():
    (block,) = checked_blocks()
    lines = block.code.strip().splitlines()
    command = lines[0].removeprefix("$ ").split()
    assert command[:3] == ["faultsim", "formats", "check"]
    out = subprocess.run([sys.executable, "-m", "faultsim.cli", *command[1:]], cwd=ROOT,
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.strip().splitlines() == lines[1:]


def test_round_trip_example_runs_as_shown(monkeypatch):
    (block,) = checked_blocks()
    monkeypatch.chdir(ROOT)
    namespace: dict = {}
    exec(compile(block.code, block.where, "exec"), namespace)
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


# -- pages whose content is measured ---------------------------------------------------------

def test_json_report_page_names_every_key_a_report_has(tmp_path):
    (block,) = checked_blocks()  # a sketch of the document's shape
    sketch = block.code
    report = tmp_path / "r.json"
    subprocess.run([sys.executable, "-m", "faultsim.cli", "run", "scenario.toml", "--agent",
                    "receipts_agent.py:make_agent_without_intents", "--crash-model", "process",
                    "--crashes", "1", "--json", str(report)],
                   cwd=ROOT / "examples/receipts", capture_output=True, timeout=300)
    data = json.loads(report.read_text())
    run = data["runs"][0]
    keys = set(data) | set(run) | set(run["violations"][0])
    keys |= {k for s in run.get("schedules", {}).values() for k in s}
    missing = sorted(k for k in keys if f'"{k}"' not in sketch)
    assert missing == [], f"the JSON report page does not name {missing}"


def test_pydantic_ai_findings_table_is_what_findings_py_prints():
    pytest.importorskip("pydantic_ai", reason="the pydantic-ai extra is not installed")
    out = subprocess.run([sys.executable, "examples/pydantic_ai/findings.py"], cwd=ROOT,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    page = (ROOT / "docs/how-to/pydantic-ai.md").read_text()
    rows = [line for line in out.stdout.splitlines() if line.startswith("|")]
    assert len(rows) == 7
    for row in rows:
        assert row in page, row


def test_mkdocs_build_strict(tmp_path):
    import importlib.util
    import os
    if not (importlib.util.find_spec("mkdocs") and importlib.util.find_spec("material")):
        pytest.skip("mkdocs-material is not installed (pip install -e '.[test]' installs it)")
    out = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-q",
                          "-d", str(tmp_path / "site")], cwd=ROOT, capture_output=True,
                         text=True, timeout=300, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert out.returncode == 0, out.stderr[-3000:]
    assert (tmp_path / "site" / "reference" / "protocol" / "index.html").exists()


def test_protocol_page_cites_the_registrys_invariants_under_each_rule():
    from faultsim.judge import oracle
    page = (ROOT / "docs/reference/protocol.md").read_text()
    for n in range(1, 13):
        section = page[page.index(f"{{#p{n}}}"):]
        line = next(l for l in section.splitlines() if l.startswith("**Checked by:**"))
        cited = line.split("**Broken on purpose by:**")[0]
        named = [] if "no invariant of its own" in cited else re.findall(r"`(\w+)`", cited)
        assert named == [r.invariant for r in oracle.REGISTRY if f"P{n}" in r.rule.split("/")], n
