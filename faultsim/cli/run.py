"""`faultsim run`: crash an agent at every kill point of scenario files, resume it, judge it
(LangGraph graphs per durability mode), on the backend `faultsim.backends` chooses for the
agent (a Claude Agent SDK agent on its own processes)."""
from __future__ import annotations

import argparse
import os
import sys

from .args import agents_for, check_plan, durability_modes, explore_options, scenario_paths
from .exits import EXIT_OK, EXIT_VIOLATION, Terminated
from .output import (OutputsFailed, check_outputs, read_baseline, refusals_reported,
                     write_reports, write_reports_saying)


def cmd_run(ns: argparse.Namespace) -> int:
    import json
    import time

    from ..backends import Agent, explore as explore_one
    from .console import Progress, print_run
    from ..settings.loading import load_factory, names_graph, prefix_of
    from ..reports.report import Report
    from ..scenario import load_scenario

    only = None
    if ns.kill_point:
        wanted = set(ns.kill_point)
        only = lambda point: point.id in wanted  # noqa: E731
    options = explore_options(ns, only)
    # before any work: a typo in an output path or a bad baseline must not cost the sweep
    check_outputs(ns)
    baseline = read_baseline(ns.baseline) if ns.baseline else None
    if getattr(ns, "ray", None) is not None:
        return run_on_ray(ns, baseline)
    scenarios = [load_scenario(p) for p in scenario_paths(ns.scenarios)]
    # a plain spec is imported once, here (a prefixed one by its backend, per scenario)
    factory = None if prefix_of(ns.agent) else load_factory(ns.agent)
    settings = {"transcript_writes": ns.transcript_writes}  # the backend's to honour
    modes = durability_modes(ns.durability)
    report = Report()
    graphs = []  # runs of LangGraph scenarios: summed up per durability mode at the end
    jobs = [(sc, agent) for sc in scenarios for agent in agents_for(sc, ns, modes)]
    names = [sc.id if agent == ns.agent else f"{sc.id} [{agent}]" for sc, agent in jobs]
    plans: dict = {}  # job -> its Plan, told before its sweep (an interrupt's "planned")
    current, started = 0, time.perf_counter()
    try:
        for current, (sc, agent) in enumerate(jobs):
            progress = Progress(names[current], every=ns.progress_seconds).start()

            def check(plan, sc=sc, progress=progress, job=current) -> None:
                plans[job] = plan
                check_plan(plan, sc, ns, progress)

            started = time.perf_counter()
            try:
                with refusals_reported(ns, report, sc.path, agent):
                    part = explore_one(Agent(agent, factory if agent == ns.agent else None,
                                             agent), sc, options, progress=progress,
                                       plan=check, settings=settings)
            finally:
                progress.close()
            for n, run in enumerate(part.runs):  # measured once, on the first (faultsim.reports.junit)
                run.wall_seconds = time.perf_counter() - started if n == 0 else 0.0
            for run in part.runs:
                report.runs.append(run)
                print_run(run)
                for line in run.notes:  # what only its backend can say
                    print(line)
                if names_graph(agent):  # not another agent run on a graph's scenario
                    graphs.append(run)
            sys.stdout.flush()
    except (KeyboardInterrupt, Terminated) as exc:
        # what was judged is still a report: printed and written, marked partial; the
        # interrupt then ends the run with its own exit code (130, 143)
        leave_partial(ns, report, exc, names, current, plans.get(current), started)
        raise
    if graphs:
        from ..adapters.langgraph.verdicts import breaks, table

        print()
        print("LangGraph, per scenario and durability mode (crash states):")
        print(table(graphs))
        print()
        print("per durability mode and kill-point category, over these scenarios:")
        print(table(graphs, by_category=True))
        print()
        print("each break, replayable:")
        for line in breaks(graphs):
            print("  " + line)
    if not report.ok and ns.examples > 0:
        print()
        print("\n\n".join(report.counterexamples(limit=ns.examples)))
    print()
    print(report.summary())
    unwritten = None
    try:
        write_reports(ns, report)
    except OutputsFailed as exc:  # each report was tried; the failed ones end the run (3)
        unwritten = exc
    if ns.annotations or (ns.annotations is None
                          and os.environ.get("GITHUB_ACTIONS") == "true"):
        from ..reports.ci import annotations

        for line in annotations(report):
            print(line)
    verdict = EXIT_OK if report.ok else EXIT_VIOLATION
    if baseline is not None:  # the verdict is the difference: only crash states B adds fail
        from ..reports.compare import compare

        diff = compare(baseline, report.to_json(), ns.baseline, "this run")
        print()
        print(diff.text())
        verdict = EXIT_OK if diff.ok else EXIT_VIOLATION
    if unwritten is not None:
        raise unwritten
    return verdict


def leave_partial(ns: argparse.Namespace, report, exc: BaseException, names: list[str],
                  current: int, plan, started: float) -> None:
    """An interrupted run's report: the runs finished, and the interrupted one's verdicts
    judged so far (carried by the interrupt, faultsim.reports.interrupted), printed as the table
    and written to every report asked for, marked partial."""
    import time

    from ..reports.interrupted import Partial, judged, reason, settle

    finished = sum(len(run.verdicts) for run in report.runs)
    cut = [settle(run) for run in judged(exc)]
    seconds = time.perf_counter() - started
    for n, run in enumerate(cut):  # the crash models were swept together: time apportioned
        run.wall_seconds = seconds if n == 0 else 0.0
        run.seconds = seconds * len(run.verdicts) / max(1, sum(len(r.verdicts) for r in cut))
        report.runs.append(run)
    report.partial = Partial(
        reason(exc), crash_states_judged=sum(len(run.verdicts) for run in report.runs),
        crash_states_planned=None if plan is None else finished + sum(
            plan.crash_states.values()),
        finished=names[:current], interrupted=names[current] if names else None,
        not_started=names[current + 1:])
    if not report.ok and ns.examples > 0 and any(run.failures for run in report.runs):
        print()
        print("\n\n".join(report.counterexamples(limit=ns.examples)))
    print()
    print(report.summary())
    sys.stdout.flush()
    write_reports_saying(ns, report)



def run_on_ray(ns: argparse.Namespace, baseline: dict | None) -> int:
    """`run --ray`: the shards as Ray tasks (faultsim.pipeline.ray_shards), their reports merged
    into the whole run's, printed and written as `report merge` writes a merged one. Each
    shard holds one CPU and forks one crash run at a time (`--workers 1`); `--workers N`
    sizes the local cluster instead."""
    from ..errors import UsageError
    from ..pipeline.ray_shards import check_address, run_shards, shard_args
    from ..reports.merge import as_report
    from ..settings.table import setting
    from .output import write_outputs
    from .report import merged_outputs

    address = check_address(ns.ray)
    if ns.shard is not None:
        raise UsageError(f"--shard {ns.shard} with --ray: --ray runs every shard itself "
                         "(their number: --ray-shards N)")
    shards = setting("ray_shards")
    try:
        shards.check(ns.ray_shards)
    except ValueError:
        raise UsageError(f"--ray-shards {ns.ray_shards}: expected {shards.expected}") from None
    if ns.workers is not None and (address is not None or ns.workers < 1):
        raise UsageError(f"--workers {ns.workers} with --ray: expected an integer >= 1, "
                         "the local cluster's CPUs (a running cluster has its own)")
    argv = ns.argv[ns.argv.index("run") + 1:]
    args = shard_args(argv, ns.ray) + ["--workers", "1"]
    try:
        merged, shards = run_shards(args, address=address, shards=ns.ray_shards,
                                    num_cpus=ns.workers, say=print)
    except (KeyboardInterrupt, Terminated) as exc:
        leave_ray_partial(ns, exc)
        raise
    report = as_report(merged)
    if not report.ok and ns.examples > 0:
        print()
        print("\n\n".join(report.counterexamples(limit=ns.examples)))
    print()
    print(report.summary())
    print(f"faultsim: {len(shards)} shards on Ray, merged into the whole run's report")
    write_outputs(merged_outputs(ns, merged))
    verdict = EXIT_OK if merged["ok"] else EXIT_VIOLATION
    if baseline is not None:  # as a run's: only crash states this run adds fail
        from ..reports.compare import compare

        diff = compare(baseline, merged, ns.baseline, "this run")
        print()
        print(diff.text())
        verdict = EXIT_OK if diff.ok else EXIT_VIOLATION
    return verdict


def leave_ray_partial(ns: argparse.Namespace, exc: BaseException) -> None:
    """`run --ray` cut short: every shard's report that came back (whole, or the shard's
    own partial one: ray_shards cancels the running ones, which then write it), printed
    and written as one report marked partial. Their runs stand side by side, each with
    its shard: a merge would pass the crash states the cut and lost shards never judged
    for judged ones (`report merge` refuses partial reports for that reason)."""
    from ..reports.interrupted import Partial, reason
    from ..pipeline.ray_shards import judged_shards
    from ..reports.merge import as_report
    from .output import write_outputs
    from .report import merged_outputs

    got = judged_shards(exc)
    if got is None:  # cut before any shard was started: nothing was judged
        return
    n, shards = got
    shards = sorted(shards, key=lambda s: s.index)
    runs = [run for s in shards for run in s.report["runs"]]
    name = lambda s: f"{s.index}/{n}"  # noqa: E731
    have = {s.index for s in shards}
    planned: int | None = 0
    for s in shards:  # a whole shard planned what it judged; a cut one says its plan
        part = s.report.get("partial")
        mine = (sum(r["crash_states"] for r in s.report["runs"]) if not part
                else part.get("crash_states_planned"))
        planned = None if planned is None or mine is None else planned + mine
    partial = Partial(
        reason(exc), crash_states_judged=sum(r["crash_states"] for r in runs),
        crash_states_planned=planned if len(have) == n else None,
        shards={"whole": [name(s) for s in shards if not s.report.get("partial")],
                "cut": [name(s) for s in shards if s.report.get("partial")],
                "lost": [f"{i}/{n}" for i in range(1, n + 1) if i not in have]})
    combined = {"ok": False, "version": shards[0].report.get("version") if shards else None,
                "runs": runs, "partial": partial.to_json()}
    report = as_report(combined)
    print()
    print(report.summary())
    sys.stdout.flush()
    try:
        write_outputs(merged_outputs(ns, combined))
    except OutputsFailed as failed:  # the interrupt's exit code stands; each failure said
        for line in failed.lines:
            print(f"faultsim: error: {line}", file=sys.stderr)
