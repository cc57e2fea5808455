"""Each framework adapter's declared version range (pyproject.toml's extras), tested at its
floor and its ceiling: a venv per end under /tmp/faultsim-ranges/, the adapter's own test
file run in it. A range is true when both ends pass.

    python bench/adapter_ranges.py              # every adapter
    python bench/adapter_ranges.py langgraph    # one

The floor is the range's lower bound pinned (`langgraph>=1.2,<1.3` -> `langgraph==1.2.0`;
the other requirements of the extra as declared), the ceiling the newest release pip picks
inside the range; an exact pin (`==`) has one end, "pinned". A venv gets the pinned
packages; a .pth file appends this interpreter's site-packages, so faultsim's other
dependencies (and pytest) come from here while the pins win. Needs the network for pip,
once per venv: a built venv is reused, so `rm -r /tmp/faultsim-ranges` before a run that
should find a newer ceiling. Not part of CI: it builds venvs.

Measured 2026-12-01 (`python bench/adapter_ranges.py langgraph`): floor 1.2.0 and ceiling
1.2.24 pass the adapter's tests (7 each, about 2.5 min per end on the shared 2-core machine);
1.2.11, the version of langgraph #8039's report, passes them too. It failed before with an
ImportError: the adapter imported a helper that later 1.2 releases added.

Measured 2026-12-02 (`python bench/adapter_ranges.py pydantic-ai`, then `openai-agents`,
then `claude-agent-sdk`), every end passing the adapter's whole test file:
pydantic-ai-slim[anthropic] >=2.68,<2.69: floor and ceiling are both 2.68.0, the only 2.68
release on PyPI that day (19 tests, 42 s and 54 s); openai-agents >=0.24,<0.25: both 0.24.0,
the only 0.24 release (26 tests, 58 s and 181 s); claude-agent-sdk ==0.2.184, pinned
exactly (the CLI it bundles, 2.1.327, is what the adapter relies on): 26 tests, 97 s.
LangGraph's newest 1.2 release was still 1.2.24, the ceiling measured the day before (`pip
index versions`). A later 2.68.x or 0.24.x is the ceiling the next run tests.
"""
from __future__ import annotations

import argparse
import os
import re
import site
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CACHE = Path("/tmp/faultsim-ranges")
# extra -> (the package whose range is tested, the adapter's test file, a quick -k filter)
ADAPTERS = {
    "langgraph": ("langgraph", "tests/test_langgraph.py",
                  "internals or each_bundled or superstep or interrupt or sqlite_saver"),
    "pydantic-ai": ("pydantic-ai-slim", "tests/test_pydantic_ai.py", ""),
    "openai-agents": ("openai-agents", "tests/test_openai_agents.py", ""),
    "claude-agent-sdk": ("claude-agent-sdk", "tests/test_claude_agent_sdk.py", ""),
}


def extras() -> dict[str, list[str]]:
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return data["project"]["optional-dependencies"]


def floor(requirement: str) -> str:
    """`pkg[x]>=1.2,<1.3` -> `pkg[x]==1.2.0` (a bound of two parts gets `.0`)."""
    match = re.match(r"^([A-Za-z0-9_.\-\[\]]+)\s*>=\s*([0-9][0-9.]*)", requirement)
    if not match:
        raise SystemExit(f"{requirement!r}: no lower bound to test")
    name, low = match.groups()
    return f"{name}=={low if low.count('.') >= 2 else low + '.0'}"


def ends(ranged: str, reqs: list[str]) -> list[tuple[str, list[str]]]:
    """The ends to test: floor and ceiling, or the one version an exact pin (`==`) allows."""
    if re.match(r"^[A-Za-z0-9_.\-\[\]]+\s*==", ranged):
        return [("pinned", reqs)]
    return [("floor", [floor(ranged)] + [r for r in reqs if r != ranged]), ("ceiling", reqs)]


def venv(pins: list[str], tag: str) -> Path:
    where = CACHE / tag
    python = where / "bin" / "python"
    if not (where / "ok").exists():
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(where)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", *pins], check=True)
        lib = next((where / "lib").glob("python*/site-packages"))
        (lib / "zz_faultsim_ranges.pth").write_text("\n".join(site.getsitepackages()) + "\n")
        (where / "ok").write_text("\n".join(pins) + "\n")
    return python


def version(python: Path, package: str) -> str:
    return subprocess.run([str(python), "-c", "import importlib.metadata as m, sys; "
                           f"print(m.version({package!r}))"], capture_output=True,
                          text=True).stdout.strip()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("adapters", nargs="*", help=f"some of {', '.join(ADAPTERS)}")
    ns = parser.parse_args()
    unknown = set(ns.adapters) - set(ADAPTERS)
    if unknown:
        parser.error(f"unknown adapters: {', '.join(sorted(unknown))}")
    declared = extras()
    rows, ok = ["| adapter | declared | end | version | tests |", "|---|---|---|---|---|"], True
    for extra in ns.adapters or list(ADAPTERS):
        package, tests, only = ADAPTERS[extra]
        reqs = declared[extra]
        ranged = next(r for r in reqs if re.match(rf"^{re.escape(package)}\b", r))
        for end, pins in ends(ranged, reqs):
            python = venv(pins, f"{extra}-{end}")
            args = [str(python), "-m", "pytest", "-p", "no:xdist", "-q", "-x", tests]
            done = subprocess.run(args + (["-k", only] if only else []), cwd=ROOT,
                                  capture_output=True, text=True,
                                  env={**os.environ, "PYTHONPATH": str(ROOT)})
            last = (done.stdout.strip().splitlines() or ["(no output)"])[-1]
            ok &= done.returncode == 0
            rows.append(f"| {extra} | `{ranged}` | {end} | {version(python, package)} | "
                        f"{'pass' if done.returncode == 0 else 'FAIL'}: {last} |")
    print("\n".join(rows))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
