"""`faultsim replay`: re-run a counterexample's token exactly, or `--show` what it would
run without importing or running anything."""
from __future__ import annotations

import argparse
import sys

from .exits import EXIT_OK, EXIT_VIOLATION


def cmd_replay(ns: argparse.Namespace) -> int:
    import json

    from .._version import __version__
    from ..token import ReplayToken
    from .output import Output, check_outputs, write_outputs

    token = ReplayToken.decode(ns.token)
    if ns.show:  # the token alone: its agent is named, never imported
        print("\n".join(token.show(__version__)))
        return EXIT_OK
    from ..replayer import check_replayable, replay

    check_replayable(token)  # before the agent is imported and run, as is the --json path
    check_outputs(ns, [("json", "--json")])
    other = token.other_version(__version__)
    if other:
        print(f"faultsim: warning: {other}", file=sys.stderr)

    # the token's backend imports --agent (a fixed version) as it needs it
    result = replay(token, timeout="auto" if ns.timeout is None else ns.timeout,
                    agent=ns.agent)
    crashes = len(result.schedule)
    print(f"replaying {crashes} crash{'es' if crashes > 1 else ''} of "
          f"{result.run.scenario.id} / {ns.agent or token.agent} / crash model "
          f"{token.crash_model}, seed {token.seed}")
    print(result.counterexample() if not result.ok else
          "\n".join([f"  crash {k}: {p.describe()}" for k, p in enumerate(result.schedule, 1)]
                    + ["ok: the schedule no longer violates the protocol"]))
    if ns.json:
        result.run.deep_failures = [result.verdict] if result.verdict.earlier else []
        result.run.verdicts = [] if result.verdict.earlier else [result.verdict]
        write_outputs([Output("--json", ns.json, lambda: json.dumps(
            {"ok": result.ok, "runs": [result.run.to_json()]}, indent=2))])
    return EXIT_OK if result.ok else EXIT_VIOLATION
