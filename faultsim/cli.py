"""The `faultsim` command."""
from __future__ import annotations

import argparse
import sys
import traceback
from pathlib import Path

EXIT_OK, EXIT_VIOLATION, EXIT_USAGE = 0, 1, 2


class UsageError(Exception):
    pass


def scenario_paths(args: list[str]) -> list[Path]:
    paths: list[Path] = []
    for arg in args:
        p = Path(arg)
        if p.is_dir():
            found = sorted(p.glob("*.toml"))
            if not found:
                raise UsageError(f"{arg}: no *.toml scenario files in this directory")
            paths += found
        elif p.exists():
            paths.append(p)
        else:
            raise UsageError(f"{arg}: no such scenario file or directory")
    return paths


def _print_record(record, agent_spec: str) -> bool:
    sc, out, model = record.scenario, record.outcome, record.world.model
    matches = out.status == "completed" and out.final_answer == sc.expected_final_answer
    effects = ", ".join(f"{name} {n}" for name, n in record.effects_by_service().items())
    print(f"{sc.id}  ({sc.path}) with {agent_spec}")
    print(f"  outcome         {out.status}" + (f": {out.escalation}" if out.escalation else ""))
    print(f"  final answer    {out.final_answer}")
    print(f"  as expected     {'yes' if matches else 'NO, expected: ' + sc.expected_final_answer}")
    print(f"  turns           {out.turns}")
    print(f"  tokens used     {out.tokens_used}")
    print(f"  model requests  {len(model.requests)} ({len(model.repeated_requests())} repeated, "
          f"{len(model.invalid_requests)} invalid)")
    print(f"  effects applied {effects}")
    dups = record.world.ledger.duplicates()
    if dups:
        print(f"  DUPLICATED      {dups}")
    return matches and not dups and not model.invalid_requests


def cmd_run(ns: argparse.Namespace) -> int:
    from .agent import load_factory
    from .runner import run_once
    from .scenario import load_scenario

    factory = load_factory(ns.agent)
    scenarios = [load_scenario(p) for p in scenario_paths(ns.scenarios)]
    ok = True
    for sc in scenarios:
        ok &= _print_record(run_once(sc, factory), ns.agent)
    return EXIT_OK if ok else EXIT_VIOLATION


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="faultsim", description="Crash-safety testing for "
                                     "long-running AI agents.")
    parser.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run an agent through scenario files")
    run.add_argument("scenarios", nargs="*", default=["scenarios"],
                     help="scenario files or directories (default: scenarios/)")
    run.add_argument("--agent", default="reference_agent",
                     help="agent factory as MODULE[:ATTR] (default: reference_agent, "
                          "attribute make_agent)")
    run.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                     help=argparse.SUPPRESS)
    run.set_defaults(func=cmd_run)
    return parser


def main(argv: list[str] | None = None) -> int:
    from .agent import AgentLoadError
    from .scenario import ScenarioError

    ns = build_parser().parse_args(argv)
    try:
        return ns.func(ns)
    except (UsageError, ScenarioError, AgentLoadError) as exc:
        if ns.debug:
            traceback.print_exc()
        print(f"faultsim: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("faultsim: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:
        if ns.debug:
            traceback.print_exc()
        print(f"faultsim: error: the run failed: {type(exc).__name__}: {exc} "
              "(--debug shows the traceback)", file=sys.stderr)
        return EXIT_VIOLATION


if __name__ == "__main__":
    sys.exit(main())
