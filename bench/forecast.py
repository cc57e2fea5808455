"""Benchmark: the forecast a sweep prints before it starts, beside what the sweep then costs.

For each task (the reference agent's bundled scenarios and N-step lookups, and example agents
of other shapes: SQLite notes, receipts, a JSONL transcript, pydantic-ai), one fresh
interpreter sweeps it single-crash, process model, in-process with `--workers 1`, and
prints the exhaustive forecast (pipeline/forecast.py: CPU seconds, from the clean run
alone) beside the CPU the sweep then used (this process and every child it forked, from
the plan to the end), and the forecast's error. Last, one JSON line:
  tasks            the task names, in order
  forecast_cpu     the forecast CPU seconds, by task
  measured_cpu     the sweep's CPU seconds, by task
  error            forecast / measured - 1, by task (+0.25: 25 % too high)
  worst_error      the largest |error|
  representative   per task: the representative sweep's kill points, forecast CPU,
                   measured CPU and error (each task is swept under both coverages)

Ratios within one run are the figures to read: timings on a loaded machine are noisy.
`--horizon H` sweeps (and forecasts) each task with resumed runs cut past the horizon.
Run: python bench/forecast.py [--max-steps 100] [--horizon H]
"""
from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

TASKS = [  # (name, scenario, agent spec, sys.path entry)
    ("tiny", "tests/data/tiny.toml", "reference_agent:make_agent", ""),
    ("flaky_api", "scenarios/flaky_api.toml", "reference_agent:make_agent", ""),
    ("refunds", "scenarios/refunds.toml", "reference_agent:make_agent", ""),
    ("support_tickets", "scenarios/support_tickets.toml", "reference_agent:make_agent", ""),
    ("research_50_steps", "scenarios/research_50_steps.toml", "reference_agent:make_agent",
     ""),
    ("pydantic_ai", "examples/pydantic_ai/scenario.toml", "billing_agent:make_agent",
     "examples/pydantic_ai"),
    ("receipts", "examples/receipts/scenario.toml", "receipts_agent:make_agent",
     "examples/receipts"),
    ("jsonl_transcript", "examples/jsonl_transcript/scenario.toml", "agent:make_agent",
     "examples/jsonl_transcript"),
]
LOOKUPS = (25, 50, 100)


def cpu() -> float:
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(
        resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def one(scenario: str, spec: str, path: str, horizon: str = "") -> dict:
    import faultsim
    from faultsim.settings.loading import load_factory

    if path:
        sys.path.insert(0, str(ROOT / path))
    if scenario.isdigit():
        import scaling

        tmp = Path(tempfile.mkdtemp(prefix="faultsim-forecast-")) / f"lookups_{scenario}.toml"
        tmp.write_text(scaling.scenario_text(int(scenario)))
        scenario = str(tmp)
    plans: list = []
    at_plan: list[float] = []
    extra = {"horizon": int(horizon)} if horizon else {}
    factory = load_factory(spec)
    report = faultsim.explore(factory, faultsim.load_scenario(ROOT / scenario),
                              crash_model="process", crashes=1, workers=1, **extra,
                              plan=lambda p: (plans.append(p), at_plan.append(cpu())))
    measured = cpu() - at_plan[0]
    forecasts = {f.coverage: f for f in plans[0].forecasts}
    out = {"kill_points": plans[0].kill_points,
           "forecast_cpu": round(forecasts["exhaustive"].cpu_seconds, 2),
           "classes_of_states": forecasts["exhaustive"].classes,
           "measured_cpu": round(measured, 2), "ok": report.ok}
    if "representative" in forecasts:
        rep = forecasts["representative"]
        at_plan.clear()
        faultsim.explore(factory, faultsim.load_scenario(ROOT / scenario),
                         crash_model="process", crashes=1, workers=1,
                         coverage="representative", **extra,
                         plan=lambda p: at_plan.append(cpu()))
        out["representative"] = {"kill_points": rep.kill_points,
                                 "forecast_cpu": round(rep.cpu_seconds, 2),
                                 "measured_cpu": round(cpu() - at_plan[0], 2)}
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--max-steps", type=int, default=100,
                        help="the N-step lookups swept, up to this N (of 25, 50, 100)")
    parser.add_argument("--horizon", type=int, default=None,
                        help="cut resumed runs past H model requests after recovery")
    parser.add_argument("--one", nargs=4, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one is not None:
        print(json.dumps(one(*args.one)))
        return
    tasks = TASKS + [(f"lookups_{n}", str(n), "reference_agent:make_agent", "")
                     for n in LOOKUPS if n <= args.max_steps]
    rows = []
    for name, scenario, spec, path in tasks:
        horizon = "" if args.horizon is None else str(args.horizon)
        done = subprocess.run([sys.executable, __file__, "--one", scenario, spec, path,
                               horizon],
                              capture_output=True, text=True, cwd=ROOT)
        if done.returncode != 0:
            sys.exit(f"bench/forecast.py: {name} failed:\n{done.stderr[-2000:]}")
        row = {"task": name, **json.loads(done.stdout.strip().splitlines()[-1])}
        row["error"] = round(row["forecast_cpu"] / max(row["measured_cpu"], 1e-9) - 1, 2)
        rows.append(row)
        rep = row.get("representative")
        if rep:
            rep["error"] = round(rep["forecast_cpu"] / max(rep["measured_cpu"], 1e-9) - 1, 2)
        print(f"{name:18} {row['kill_points']:6} kill points, "
              f"{row['classes_of_states']:5} classes of states: forecast "
              f"{row['forecast_cpu']:7.1f} s CPU, measured {row['measured_cpu']:7.1f} s "
              f"({row['error']:+.0%})"
              + (f"; representative: {rep['kill_points']} kill points, forecast "
                 f"{rep['forecast_cpu']:.1f} s, measured {rep['measured_cpu']:.1f} s "
                 f"({rep['error']:+.0%})" if rep else ""), flush=True)
    print(json.dumps({
        "tasks": [r["task"] for r in rows],
        "forecast_cpu": [r["forecast_cpu"] for r in rows],
        "measured_cpu": [r["measured_cpu"] for r in rows],
        "error": [r["error"] for r in rows],
        "worst_error": max(abs(r["error"]) for r in rows),
        "worst_representative_error": max((abs(r["representative"]["error"]) for r in rows
                                           if "representative" in r), default=None),
        "representative": {r["task"]: r["representative"] for r in rows
                           if "representative" in r},
    }))


if __name__ == "__main__":
    main()
