"""The forecast a run prints before its sweep (pipeline/forecast.py), from the counting pass
(inprocess/counting.py): what it counts agrees with what the sweep then does."""
import functools
import json

import pytest

import faultsim
import reference_agent
from faultsim.inprocess.explore import _forecasts
from faultsim.inprocess.counting import census
from faultsim.inprocess.sandbox import Explorer
from faultsim.pipeline.forecast import RESUMED_SHARE, Forecast, duration, estimate, words

from conftest import DATA, SCENARIOS


@functools.lru_cache(maxsize=None)  # read only: the two tests of the 50-step task share it
def _counted(path):
    scenario = faultsim.load_scenario(path)
    with Explorer(reference_agent.make_agent, scenario, agent_name="reference_agent",
                  timeout=None, seed="0") as ex:
        golden = ex.golden()
        points = golden.kill_points()
        return scenario, points, golden, census(ex, points, ["process"]), ex.clean_seconds


@pytest.mark.parametrize("path", [DATA / "tiny.toml", SCENARIOS / "flaky_api.toml"])
def test_the_classes_counted_predict_the_resumed_runs_of_the_sweep(path):
    """The counting pass's classes of states (masked as the memo's insensitive classes)
    times RESUMED_SHARE is within a third of the runs the sweep then resumes; and the
    per-point counts add up to the plan's totals."""
    scenario, points, golden, counted, _ = _counted(path)
    assert counted.counts_at(points) == counted.counts
    report = faultsim.explore(reference_agent.make_agent, scenario, crash_model="process",
                              crashes=1, workers=1)
    (run,) = report.runs
    assert counted.counts["process"] == len(run.verdicts)
    predicted = RESUMED_SHARE * counted.classes_at(points)
    assert abs(predicted - run.judged) <= run.judged / 3, (predicted, run.judged)


def test_a_narrower_run_forecasts_less_and_each_coverage_is_said():
    scenario, points, golden, counted, clean = _counted(SCENARIOS / "research_50_steps.toml")
    # the clean run's time as measured on an idle 2-core machine (0.33 s), not this run's:
    # under load it stretches (1-4 s seen in the suite), and the resumed runs' share of
    # the forecast with it, where a sparse sweep pays more per run (pipeline/forecast.py)
    idle = 0.33
    whole = _forecasts(counted, points, golden.trace, ["process"], clean_seconds=idle)
    assert [f.coverage for f in whole] == ["exhaustive", "representative"]
    exhaustive, representative = whole
    assert exhaustive.kill_points == len(points) > 3 * representative.kill_points
    assert exhaustive.cpu_seconds > representative.cpu_seconds  # (measured: 31.5 s, 25.1 s)
    first_ten = {p.id for p in points[:10]}
    narrow = _forecasts(counted, points, golden.trace, ["process"], clean_seconds=idle,
                        only=lambda p: p.id in first_ten, first="representative")
    assert narrow[0].coverage == "representative" and narrow[1].kill_points == 10
    assert narrow[1].cpu_seconds < exhaustive.cpu_seconds / 10
    assert counted.classes_at(points[:10]) < counted.classes_at(points)



def test_the_forecast_in_words():
    one = estimate("exhaustive", 1000, 100, 0.2, 500)
    assert one.cpu_seconds == pytest.approx(1000 * 0.0027 + 0.62 * 100 * 0.2 * 0.665
                                            * 500 ** -0.2)
    assert words([]) == ""
    assert words([Forecast("exhaustive", 5352, 531, 34.6),
                  Forecast("representative", 965, 200, 12.4)]) == (
        "single-crash forecast: about 35 s of CPU (representative: about 12 s, "
        "965 kill points)")
    assert [duration(s) for s in (40, 210, 9000)] == ["40 s", "3.5 min", "2.5 h"]


def test_a_budget_the_forecast_is_over_stops_before_any_crash_run(tmp_path, capsys,
                                                                   monkeypatch):
    """--budget: over it, exit 2 and one line naming the forecast and the coverage that
    fits, before any crash run (no run block; the report lists the refusal); within it,
    nothing is said."""
    from faultsim.cli import main

    out = tmp_path / "r.json"
    args = ["run", str(SCENARIOS / "research_50_steps.toml"), "--crashes", "1",
            "--workers", "1", "--json", str(out)]
    assert main(args + ["--budget", "0.01"]) == 2
    captured = capsys.readouterr()
    (error,) = [line for line in captured.err.splitlines() if "error" in line]
    assert error.startswith(f"faultsim: error: {SCENARIOS / 'research_50_steps.toml'}: the "
                            "exhaustive sweep is forecast at about ")
    assert error.endswith("over --budget 0.01 s; no coverage fits (representative: about "
                          + error.rsplit("about ", 1)[1])
    # stopped before crashing anything: no run block; the report says it was refused
    assert captured.out == ""
    written = json.loads(out.read_text())
    assert written["runs"] == [] and written["refused"][0]["kind"] == "OverBudget"
    # the same from the environment, and a budget only the representative sweep fits
    monkeypatch.setenv("FAULTSIM_BUDGET", "0.01")
    assert main(args) == 2
    capsys.readouterr()
    monkeypatch.delenv("FAULTSIM_BUDGET")
    scenario, points, golden, counted, clean = _counted(SCENARIOS / "research_50_steps.toml")
    # the idle clean time, as in test_a_narrower_run_forecasts_less_and_each_coverage_is_said
    exhaustive, representative = _forecasts(counted, points, golden.trace, ["process"],
                                            clean_seconds=0.33)
    between = (exhaustive.cpu_seconds + representative.cpu_seconds) / 2
    from faultsim.inprocess.explore import within_budget
    from faultsim.errors import OverBudget

    with pytest.raises(OverBudget, match="representative coverage fits, about .* "
                                         "--coverage representative$"):
        within_budget("x.toml", (exhaustive, representative), between, workers=1)
    within_budget("x.toml", (exhaustive, representative), 2 * exhaustive.cpu_seconds, 1)
    within_budget("x.toml", (representative, exhaustive), between, workers=1)


def test_a_budget_where_no_forecast_is_made_is_refused(capsys):
    from faultsim.cli import main

    assert main(["run", str(DATA / "tiny.toml"), "--budget", "60", "--mode",
                 "subprocess"]) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        "faultsim: error: --budget: subprocess mode makes no forecast to weigh it against "
        "(in-process mode only; drop --budget)")


def test_a_horizon_caps_each_resumed_run_at_a_few_of_the_clean_runs_requests():
    """--horizon H (convergence.py, "The horizon"): a resumed run is cut at about its
    (H+1)-th model request, so the forecast charges it H + HORIZON_FIXED of the clean
    run's requests, never more than without a horizon; a horizon past the task changes
    nothing."""
    from faultsim.pipeline.forecast import HORIZON_FIXED, PER_POINT

    free = estimate("exhaustive", 1000, 100, 20.0, 4000)
    cut = estimate("exhaustive", 1000, 100, 20.0, 4000, horizon=1, requests=200)
    assert cut.cpu_seconds == pytest.approx(
        1000 * PER_POINT + RESUMED_SHARE * 100 * 20.0 / 200 * (1 + HORIZON_FIXED))
    assert cut.cpu_seconds < free.cpu_seconds / 4
    assert estimate("exhaustive", 1000, 100, 20.0, 4000, horizon=10_000,
                    requests=200) == free
    # the run's own forecast: the 50-step task's, with the horizon the run asked for
    scenario, points, golden, counted, _ = _counted(SCENARIOS / "research_50_steps.toml")
    plain = _forecasts(counted, points, golden.trace, ["process"], clean_seconds=0.33)
    capped = _forecasts(counted, points, golden.trace, ["process"], clean_seconds=0.33,
                        horizon=1)
    for a, b in zip(plain, capped):
        assert a.kill_points == b.kill_points and b.cpu_seconds < a.cpu_seconds


def test_the_forecast_weighs_the_clean_runs_cpu_not_its_wall_time():
    """A busy machine stretches the clean run's wall time, not its CPU: the forecast (CPU
    seconds) is made from the CPU (the suite saw the wall at 1-4 s against 0.33 s idle).
    Here the agent waits 0.3 s of real time in each clean incarnation, using no CPU."""
    import threading

    def waiting_agent(env):
        threading.Event().wait(0.3)  # a lock's timeout: real time, whatever the clock says
        return reference_agent.make_agent(env)

    scenario = faultsim.load_scenario(DATA / "tiny.toml")
    with Explorer(waiting_agent, scenario, agent_name="waiting", timeout=None,
                  seed="0") as ex:
        golden = ex.golden()
        points = golden.kill_points()
        counted = census(ex, points, ["process"])
        wall, cpu = ex.clean_seconds, ex.clean_cpu_seconds
    assert wall >= 0.3 and 0 < cpu < wall - 0.2, (wall, cpu)
    plans = []

    class Planned(Exception):
        pass

    def stop(plan):  # the plan is made before any crash run: stop there
        plans.append(plan)
        raise Planned

    with pytest.raises(Planned):
        faultsim.explore(waiting_agent, scenario, crash_model="process", crashes=1,
                         workers=1, plan=stop)
    (own, _) = plans[0].forecasts
    by_wall = _forecasts(counted, points, golden.trace, ["process"], clean_seconds=wall)[0]
    by_cpu = _forecasts(counted, points, golden.trace, ["process"], clean_seconds=cpu)[0]
    assert by_wall.cpu_seconds > 2 * by_cpu.cpu_seconds  # the wait weighs, if it is weighed
    # (seen, weighed by the wall: 5.3 s for the run, against 1.6 s by the CPU)
    assert own.cpu_seconds < 1.5 * by_cpu.cpu_seconds, (own, by_cpu, by_wall)
