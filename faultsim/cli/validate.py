"""`faultsim validate`: every problem of scenario files, one line each, without an agent."""
from __future__ import annotations

import argparse
import sys

from .exits import EXIT_OK, EXIT_USAGE


def cmd_validate(ns: argparse.Namespace) -> int:
    # no agent, no SDK: only the loader's table and the world's names are imported
    from ..scenario.validate import scenario_files, validate_file

    files, problems = scenario_files(ns.scenarios)
    invalid = len({p.path for p in problems})
    for path in files:
        found = validate_file(path)
        problems += found
        invalid += bool(found)
    for problem in problems:
        print(problem)
    if problems:
        print(f"faultsim validate: {invalid} of {len(files)} file"
              f"{'s' if len(files) != 1 else ''} invalid, {len(problems)} problem"
              f"{'s' if len(problems) != 1 else ''}", file=sys.stderr)
        return EXIT_USAGE
    print(f"faultsim validate: {len(files)} scenario file{'s' if len(files) != 1 else ''}, "
          "all valid", file=sys.stderr)
    return EXIT_OK
