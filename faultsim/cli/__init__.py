"""The `faultsim` command (console script `faultsim.cli:entry`, which runs `main`), a package:

- `parser`: every subcommand, its flags and help, and the function it runs;
- `args`: what the flags mean (scenario paths, project defaults, exploration options);
- one module per command: `run`, `compare`, `listing` (list), `formats`, `validate`,
  `scenario`, `replay`, `report`;
- `output`: the report files a run writes (--json, --junit, --html, --summary-md);
- `exits`: exit codes, the error kinds that map to them, SIGTERM and Ctrl-C.
"""
from __future__ import annotations

import os
import sys
from typing import NoReturn

from ..errors import UsageError
from .args import project_defaults, scenario_paths
from .exits import (EXIT_ERROR, EXIT_OK, EXIT_USAGE, EXIT_VIOLATION, Terminated,
                    exiting_now, run_command)
from .parser import build_parser

__all__ = ["EXIT_ERROR", "EXIT_OK", "EXIT_USAGE", "EXIT_VIOLATION", "Terminated",
           "UsageError", "build_parser", "entry", "main", "scenario_paths"]


def main(argv: list[str] | None = None) -> int:
    ns = build_parser().parse_args(argv)
    ns.argv = list(sys.argv[1:] if argv is None else argv)  # what `run --ray` hands a shard
    try:
        project_defaults(ns)
    except UsageError as exc:
        print(f"faultsim: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    # `--agent my_agent` finds my_agent.py in the current directory, as `python -m` would:
    # the `faultsim` script's own folder is what Python put first on the path instead
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    return run_command(ns)


def entry() -> NoReturn:
    """The process's command (`faultsim`, `python -m faultsim`): `main`, then the exit
    without the interpreter's last garbage collection over the run's heap (0.3-1 s of CPU
    after a sweep, for nothing: every report is written and every clean-up has run by then,
    in `finally` blocks, never in a collector). `main` itself is for callers that go on."""
    code = main()
    exiting_now()
    sys.exit(code)
