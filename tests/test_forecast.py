"""The forecast a run prints before its sweep (pipeline/forecast.py), from the counting pass
(inprocess/counting.py): what it counts agrees with what the sweep then does."""
import json

import pytest

import faultsim
import reference_agent
from faultsim.engine import _forecasts
from faultsim.inprocess.counting import census
from faultsim.inprocess.sandbox import Explorer
from faultsim.pipeline.forecast import RESUMED_SHARE, Forecast, duration, estimate, words

from conftest import DATA, SCENARIOS


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
    from faultsim.engine import within_budget
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
