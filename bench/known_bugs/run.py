"""The known-bugs corpus: crash-safety bugs users reported in framework trackers, each run
on the release that has it (A) and the release or patch that fixes it (B), and the
differential verdict faultsim gives (`faultsim compare`) checked against the one expected.

    python bench/known_bugs/run.py                 # every bug: a venv per version, the table
    python bench/known_bugs/run.py langgraph_7417  # one
    python bench/known_bugs/run.py --here          # no venvs: the installed versions, side A
                                                   # only (what CI can afford)

Each folder holds `bug.json` (the report's link, A and B as pip requirements (and `drop`,
packages to remove again so faultsim's own versions serve, and `patch`, a diff of the
installed packages: a fix that exists only as a pull request), the agent spec,
the scenario, an optional control scenario that must pass on both, the expected verdicts),
the scenario and the agent. Venvs are built once under /tmp/faultsim-known-bugs/ (one per
set of requirements): the pinned packages are installed there, and a .pth file appends
this interpreter's site-packages and this checkout, so faultsim and its own dependencies
come from here while the pins win (a venv's site-packages come first on sys.path). Reports
go to /tmp/faultsim-known-bugs/reports/. Needs the network for pip, once per venv.

Not part of CI (tests/test_known_bugs.py runs one entry on the installed versions).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import site
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
CACHE = Path("/tmp/faultsim-known-bugs")


def bugs(names: list[str]) -> list[Path]:
    found = sorted(p.parent for p in HERE.glob("*/bug.json"))
    if names:
        found = [p for p in found if p.name in names]
        missing = set(names) - {p.name for p in found}
        if missing:
            sys.exit(f"no such bug folder: {', '.join(sorted(missing))}")
    return found


def venv_for(pins: list[str], drop: list[str] = (), patch: Path | None = None) -> Path:
    """A venv with `pins` installed, faultsim and its dependencies from this interpreter;
    `drop`: packages pip pulled in that faultsim's own must replace (the anthropic SDK an
    old framework pins below faultsim's: the fake serves faultsim's); `patch`: a unified
    diff (paths from site-packages, `a/`/`b/` prefixed) applied to the installed packages,
    a fix that exists only as a pull request (the venv is its own: the patch is part of its
    name)."""
    text = patch.read_text() if patch is not None else ""
    slug = hashlib.blake2b("\n".join(sorted(pins) + ["-"] + sorted(drop) + ["-", text])
                           .encode(), digest_size=6).hexdigest()
    where = CACHE / f"venv-{slug}"
    python = where / "bin" / "python"
    if not (where / "ok").exists():
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(where)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", *pins], check=True)
        if drop:
            subprocess.run([str(python), "-m", "pip", "uninstall", "-q", "-y", *drop],
                           check=True)
        lib = next((where / "lib").glob("python*/site-packages"))
        if patch is not None:  # fails loudly if the diff does not apply to these pins
            subprocess.run(["patch", "-p1", "--forward", "--no-backup-if-mismatch", "-d",
                            str(lib), "-i", str(patch)], check=True)
        (lib / "zz_faultsim_known_bugs.pth").write_text(
            "\n".join([str(ROOT), *site.getsitepackages()]) + "\n")
        (where / "ok").write_text("\n".join(pins) + "\n")
    return python


def run_side(python: str, folder: Path, spec: dict, scenario: str, out: Path) -> dict:
    out.parent.mkdir(parents=True, exist_ok=True)
    where = str((folder / scenario).relative_to(ROOT))  # tokens name it so, anywhere
    done = subprocess.run([python, "-m", "faultsim", "run", where, "--agent",
                           spec["agent"], "--json", str(out), "--examples", "0"],
                          capture_output=True, text=True, cwd=ROOT)
    if done.returncode not in (0, 1) or not out.exists():
        raise SystemExit(f"{folder.name}: faultsim run failed ({done.returncode}):\n"
                         f"{done.stdout[-2000:]}{done.stderr[-2000:]}")
    return json.loads(out.read_text())


def failing(report: dict) -> int:
    """Failing crash states, and each scenario whose clean run the agent already fails (a
    `refused` finding: one state, "the clean run", as `faultsim compare` counts it)."""
    return sum(1 for r in report["runs"] for _, _, v in r["states"]
               if v not in ("passed", "escalated")) + \
        sum(1 for r in report.get("refused", []) if r.get("category") == "finding")


def classes(report: dict) -> list[str]:
    return sorted({c["why"]["class"] for r in report["runs"] for c in r["counterexamples"]
                   if c.get("why")})


def check(folder: Path, here: bool) -> dict:
    sys.path.insert(0, str(ROOT))
    from faultsim.reports.compare import compare

    spec = json.loads((folder / "bug.json").read_text())
    reports, controls = {}, {}
    for side in ("a",) if here else ("a", "b"):
        patch = spec[side].get("patch")
        python = sys.executable if here else str(venv_for(
            spec[side]["pip"], spec[side].get("drop", []),
            folder / patch if patch else None))
        out = CACHE / "reports" / folder.name
        reports[side] = run_side(python, folder, spec, spec["scenario"], out / f"{side}.json")
        if spec.get("control"):
            controls[side] = run_side(python, folder, spec, spec["control"],
                                      out / f"{side}-control.json")
    want = spec["expected"]
    row = {"bug": spec["bug"], "link": spec["link"],
           "a": "installed" if here else spec["a"]["name"], "b": "-" if here else spec["b"]["name"],
           "a_failing": failing(reports["a"]), "why": classes(reports["a"])}
    problems = []
    if (row["a_failing"] > 0) != (want["a"] == "fails"):
        problems.append(f"A {'fails' if row['a_failing'] else 'passes'}, expected {want['a']}")
    if set(want.get("why", [])) - set(row["why"]):
        problems.append(f"why {row['why']}, expected {want['why']} among them")
    for side, report in controls.items():
        if failing(report):
            problems.append(f"the control fails on {side.upper()}")
    if not here:
        diff = compare(reports["a"], reports["b"], row["a"], row["b"])
        counts = {k: sum(r.counts()[k] for r in diff.runs if r.side is None)
                  for k in ("fixed by B", "broken by B", "fails in both")}
        row.update(b_failing=failing(reports["b"]), **counts)
        if (row["b_failing"] > 0) != (want["b"] == "fails"):
            problems.append(f"B {'fails' if row['b_failing'] else 'passes'}, "
                            f"expected {want['b']}")
        # the kinds of state the comparison holds (an empty one: passes in both)
        verdict = sorted(k for k, n in counts.items() if n) or ["passes in both"]
        row["differential"] = verdict
        if verdict != sorted(want["differential"]):
            problems.append(f"differential {verdict}, expected {sorted(want['differential'])}")
    row["as_expected"] = not problems
    row["problems"] = problems
    return row


def table(rows: list[dict], here: bool) -> str:
    head = ["bug", "A", "B", "A failing", "B failing", "fixed by B", "broken by B",
            "fails in both", "why", "as expected"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [f"[{r['bug']}]({r['link']})", r["a"], r["b"], r["a_failing"],
                 r.get("b_failing", "-"), r.get("fixed by B", "-"), r.get("broken by B", "-"),
                 r.get("fails in both", "-"), ", ".join(r["why"]) or "-",
                 "yes" if r["as_expected"] else "NO: " + "; ".join(r["problems"])]
        lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("bugs", nargs="*", help="bug folders (default: all)")
    parser.add_argument("--here", action="store_true",
                        help="no venvs: side A on the installed versions")
    ns = parser.parse_args()
    rows = [check(folder, ns.here) for folder in bugs(ns.bugs)]
    print(table(rows, ns.here))
    return 0 if all(r["as_expected"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
