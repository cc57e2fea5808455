"""`faultsim replay`: re-run a counterexample's token exactly."""
from __future__ import annotations

import argparse

from .exits import EXIT_OK, EXIT_VIOLATION


def cmd_replay(ns: argparse.Namespace) -> int:
    import json

    from ..loading import factory_for
    from ..replayer import replay
    from ..token import ReplayToken

    token = ReplayToken.decode(ns.token)
    factory = factory_for(ns.agent, token.scenario) if ns.agent and \
        token.mode != "subprocess" else None
    result = replay(token, factory, timeout="auto" if ns.timeout is None else ns.timeout,
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
        with open(ns.json, "w", encoding="utf-8") as f:
            json.dump({"ok": result.ok, "runs": [result.run.to_json()]}, f, indent=2)
    return EXIT_OK if result.ok else EXIT_VIOLATION
