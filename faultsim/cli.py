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


class _Progress:
    """A one-line progress bar on a terminal (kill points done/total, rate, ETA)."""

    def __init__(self, label: str) -> None:
        import freezegun.api as real

        self.label, self.clock = label, real.real_perf_counter
        self.started = self.clock()
        self.enabled = sys.stderr.isatty()
        self.shown = False

    def __call__(self, done: int, total: int) -> None:
        if not self.enabled:
            return
        elapsed = self.clock() - self.started
        if elapsed < 1.0 and done < total:
            return  # runs shorter than a second get no bar
        rate = done / elapsed if elapsed else 0.0
        eta = (total - done) / rate if rate else 0.0
        width = 30
        filled = int(width * done / max(1, total))
        sys.stderr.write(f"\r{self.label} [{'#' * filled}{'.' * (width - filled)}] "
                         f"{done}/{total} kill points  {rate:5.1f}/s  ETA {eta:4.0f}s ")
        sys.stderr.flush()
        self.shown = True

    def close(self) -> None:
        if self.shown:
            sys.stderr.write("\n")


def _print_run(run) -> None:
    data = run.to_json()
    cats = ", ".join(f"{c} {n}" for c, n in data["categories"].items() if n)
    status = "ok" if run.ok else f"{len(run.failures)} VIOLATIONS"
    print(f"{run.scenario.id} · {run.agent} · {run.crash_model}: {status}")
    print(f"  kill points   {data['kill_points_explored']}/{data['kill_points_total']} "
          f"explored ({cats})")
    print(f"  crash states  {data['crash_states']} judged, {run.judged} resumed "
          f"({run.reused} shared with an equal or equivalent state), {run.seconds:.1f}s")
    for probe in run.probes:
        print(f"  probe         {probe.kill_point.id}: {'ok' if probe.ok else 'VIOLATED'}")


def cmd_run(ns: argparse.Namespace) -> int:
    import json

    from .agent import load_factory
    from .explore import explore
    from .report import Report
    from .scenario import load_scenario

    factory = load_factory(ns.agent)
    scenarios = [load_scenario(p) for p in scenario_paths(ns.scenarios)]
    only = None
    if ns.kill_point:
        wanted = set(ns.kill_point)
        only = lambda point: point.id in wanted  # noqa: E731
    report = Report()
    for sc in scenarios:
        progress = _Progress(f"{sc.id} ({ns.crash_model})")
        try:
            part = explore(factory, sc, crash_model=ns.crash_model, agent_name=ns.agent,
                           only=only, timeout=ns.timeout, workers=ns.workers,
                           progress=progress)
        finally:
            progress.close()
        for run in part.runs:
            if ns.kill_point and not run.explored:
                raise UsageError(f"{sc.path}: no kill point {', '.join(ns.kill_point)}; "
                                 "ids come from a report of this scenario and agent")
            report.runs.append(run)
            _print_run(run)
    if not report.ok:
        print()
        print("\n\n".join(report.counterexamples(limit=ns.examples)))
    print()
    print(report.summary())
    if ns.json:
        with open(ns.json, "w", encoding="utf-8") as f:
            json.dump(report.to_json(), f, indent=2)
    return EXIT_OK if report.ok else EXIT_VIOLATION


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="faultsim", description="Crash-safety testing for "
                                     "long-running AI agents.")
    parser.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="crash an agent at every kill point of scenario files, "
                         "resume it, judge it")
    run.add_argument("scenarios", nargs="*", default=["scenarios"],
                     help="scenario files or directories (default: scenarios/)")
    run.add_argument("--agent", default="reference_agent",
                     help="agent factory as MODULE[:ATTR] (default: reference_agent, "
                          "attribute make_agent)")
    run.add_argument("--crash-model", default="process", choices=["process", "power", "all"],
                     help="what a crash leaves on disk: a killed process, power loss, or "
                          "both (default: process)")
    run.add_argument("--json", metavar="FILE", help="write the report as JSON")
    run.add_argument("--kill-point", action="append", metavar="ID",
                     help="explore only this kill point (repeatable): replays a "
                          "counterexample")
    run.add_argument("--workers", type=int, default=None,
                     help="crash runs at once (default: one per core; 0 = one after "
                          "another in this process)")
    run.add_argument("--timeout", type=float, default=30.0,
                     help="seconds an incarnation may run before it counts as hung "
                          "(default: 30)")
    run.add_argument("--examples", type=int, default=3,
                     help="counterexamples to print, the first of each kind (default: 3)")
    run.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                     help=argparse.SUPPRESS)
    run.set_defaults(func=cmd_run)
    return parser


def main(argv: list[str] | None = None) -> int:
    from .agent import AgentLoadError
    from .explore import AgentFailedCleanly, NonDeterminismError
    from .scenario import ScenarioError

    ns = build_parser().parse_args(argv)
    try:
        return ns.func(ns)
    except (UsageError, ScenarioError, AgentLoadError) as exc:
        if ns.debug:
            traceback.print_exc()
        print(f"faultsim: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except (NonDeterminismError, AgentFailedCleanly) as exc:  # findings about the agent
        if ns.debug:
            traceback.print_exc()
        print(f"faultsim: {exc}", file=sys.stderr)
        return EXIT_VIOLATION
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
