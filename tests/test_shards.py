"""`--shard I/N` splits distinct crash states, not kill points: every shard crashes at
every kill point and resumes only the states it owns (faultsim.inprocess.sharding). The
shards' resumed runs add up to the whole run's, and together they judge every crash state
with the whole run's verdict; `faultsim report merge` joins their reports into the whole
run's report, timings aside."""
from __future__ import annotations

import re

import pytest

import faultsim
from faultsim.settings.loading import load_factory

from conftest import ROOT

RECEIPTS = ROOT / "examples" / "receipts" / "scenario.toml"
CASES = {  # a clean agent and one with findings (a kill swallowed in a best-effort note)
    "receipts": (f"{ROOT / 'examples' / 'receipts' / 'receipts_agent.py'}:make_agent", RECEIPTS),
    "swallows_a_kill": (f"{ROOT / 'tests' / 'company_agent.py'}:make_agent", RECEIPTS),
}


def _verdicts(report) -> dict:
    return {(run.crash_model, v.kill_point.id, v.order):
            tuple(sorted((x.invariant, x.explanation) for x in v.violations))
            for run in report.runs for v in run.verdicts}


def _explore(case, workers, shard=None):
    spec, scenario = CASES[case]
    return faultsim.explore(load_factory(spec), faultsim.load_scenario(scenario),
                            crash_model="all",
                            crashes=1, workers=workers, shard=shard)


@pytest.mark.parametrize("case,workers", [("receipts", 2), ("swallows_a_kill", 1)])
def test_shards_partition_the_states_and_their_resumed_runs(case, workers):
    whole = _explore(case, workers)
    shards = [_explore(case, workers, (i, 3)) for i in (1, 2, 3)]
    judged = lambda r: sum(run.judged for run in r.runs)  # noqa: E731
    reused = lambda r: sum(run.reused for run in r.runs)  # noqa: E731
    assert judged(whole) > 3  # enough states that three shards each get some
    # exactly the whole run's resumed runs, split: the equal-state memo is kept
    assert sum(judged(s) for s in shards) == judged(whole)
    assert sum(reused(s) for s in shards) == reused(whole)
    assert all(judged(s) < judged(whole) for s in shards)  # and really split
    together: dict = {}
    for s in shards:
        mine = _verdicts(s)
        assert not (together.keys() & mine.keys())  # no state judged twice
        together.update(mine)
    assert together == _verdicts(whole)  # every state, with the whole run's verdict
    if case == "swallows_a_kill":
        assert any(together.values())  # the findings are there, in some shard


# Pairs: a small agent whose second crashes fail (its state file is written in place), on
# which main's pair shards (pairs with their first crash's shard) resumed more second crash
# states than the whole run: 26 against 20 in two shards, workers 2
PAIRS = (f"{ROOT / 'tests' / 'user_agents.py'}:make_agent", ROOT / "tests" / "data" /
         "one_charge.toml")
DEPTH2 = ("explored", "resumed", "total", "after_convergence", "composed", "converged")


def _pairs(workers, shard=None):
    spec, scenario = PAIRS
    return faultsim.explore(load_factory(spec), faultsim.load_scenario(scenario),
                            crash_model="all", crashes=2, workers=workers, shard=shard)


def _depth2(report) -> dict:
    return {(run.crash_model, k): getattr(run.depth(2), k) for run in report.runs
            for k in DEPTH2}


def _deep(report) -> dict:
    return {(run.crash_model, tuple((e.point.id, e.order) for e in v.earlier),
             v.kill_point.id, v.order):
            tuple(sorted((x.invariant, x.explanation) for x in v.violations))
            for run in report.runs for v in run.deep_failures}


@pytest.mark.parametrize("n,workers", [(2, 2), (3, 1), (2, 0)])
def test_pair_shards_resume_exactly_the_whole_runs_second_crash_states(n, workers):
    """The pair stage splits second crash states by class too (sharding.PairSurvey): the
    shards' depth-2 counts (resumed, composed, explored ...) add up to the whole run's,
    and every failing pair is found in exactly one shard with the whole run's verdict."""
    whole = _pairs(workers)
    shards = [_pairs(workers, (i, n)) for i in range(1, n + 1)]
    want = _depth2(whole)
    assert sum(v for (m, k), v in want.items() if k == "resumed") > n  # enough to split
    got = {key: sum(_depth2(s)[key] for s in shards) for key in want}
    assert got == want
    for s in shards:  # really split
        assert sum(v for (m, k), v in _depth2(s).items() if k == "resumed") < \
            sum(v for (m, k), v in want.items() if k == "resumed")
    together: dict = {}
    single: dict = {}
    for s in shards:
        mine = _deep(s)
        assert not (together.keys() & mine.keys())  # no pair reported twice
        together.update(mine)
        single.update(_verdicts(s))
    assert together == _deep(whole) and together  # the failing pairs, the whole run's
    assert single == _verdicts(whole)
    # the single crashes still split as without pairs: each state reported once
    assert sum(run.judged for s in shards for run in s.runs) == \
        sum(run.judged for run in whole.runs)


def test_merged_pair_shard_reports_are_the_whole_runs_report(tmp_path):
    """`faultsim report merge` of pair shards is the whole run's report, its depth-2
    counts (`schedules`) included."""
    import json
    import sys

    sys.path.insert(0, str(ROOT / "bench"))
    from faultsim.cli import main

    spec, scenario = PAIRS
    base = ["run", str(scenario), "--agent", spec, "--crash-model", "all", "--crashes", "2",
            "--workers", "2", "--examples", "0"]
    assert main(base + ["--json", str(tmp_path / "whole.json")]) == 1
    shards = [str(tmp_path / f"s{i}.json") for i in (1, 2, 3)]
    for i, out in enumerate(shards, 1):
        main(base + ["--shard", f"{i}/3", "--json", out])
    assert main(["report", "merge", *shards, "--json", str(tmp_path / "merged.json")]) == 1
    whole = json.loads((tmp_path / "whole.json").read_text())
    merged = json.loads((tmp_path / "merged.json").read_text())
    assert whole["runs"][0]["schedules"]["2"]["resumed"]  # pairs were resumed
    assert _strip(merged) == _strip(whole)


def test_representative_pair_shards_add_up_and_merge_into_the_whole_run(tmp_path):
    """Representative pairs under --shard (issue 53): every shard makes the whole run's
    choice of second crashes over every first crash's course, cut at the horizon where
    its run was (inprocess.pairs._survey), and judges the chosen states it owns. The
    shards' depth-2 counts and second crashes past a cut add up to the whole run's, each
    failing pair is reported by one shard, and `faultsim report merge` is the whole run's
    report, `coverage.pairs` (what was judged of the choice) included. Power loss on
    one_charge with a horizon of 0 requests, two shards (bench/pair_shards.py: tiny.toml
    in two and three): some first crashes' runs are cut, others not, and pairs fail in
    both shards; the shards judge states at some of the same positions, so the merged
    `coverage.pairs.judged` is their union (111 of 60 + 73), not their sum."""
    import json
    import sys

    sys.path.insert(0, str(ROOT / "bench"))
    from faultsim.cli import main

    spec, scenario = PAIRS
    base = ["run", str(scenario), "--agent", spec, "--crash-model", "power", "--crashes",
            "2", "--coverage", "representative", "--horizon", "0", "--workers", "2"]
    assert main(base + ["--json", str(tmp_path / "whole.json")]) == 1
    shards = [str(tmp_path / f"s{i}.json") for i in (1, 2)]
    for i, out in enumerate(shards, 1):
        assert main(base + ["--shard", f"{i}/2", "--json", out]) == 1
    (whole,) = json.loads((tmp_path / "whole.json").read_text())["runs"]
    parts = [json.loads(open(s).read())["runs"][0] for s in shards]
    pairs = whole["coverage"]["pairs"]
    assert 0 < pairs["chosen"] < pairs["kill_points"]  # a choice, not every point
    assert whole["horizon"]["schedules_past_cut"]["2"] > 0  # some courses were cut
    for key in ("total", "explored", "resumed", "converged", "after_convergence",
                "composed"):
        assert sum(p["schedules"]["2"][key] for p in parts) == whole["schedules"]["2"][key], key
    assert sum(p["horizon"]["schedules_past_cut"]["2"] for p in parts) == \
        whole["horizon"]["schedules_past_cut"]["2"]
    assert all(p["schedules"]["2"]["resumed"] < whole["schedules"]["2"]["resumed"]
               for p in parts)  # really split
    failing = lambda run: [(v["schedule"], v["invariant"]) for v in run["violations"]  # noqa
                           if len(v["schedule"]) == 2]
    together = [f for p in parts for f in failing(p)]
    assert all(failing(p) for p in parts)  # pairs fail in each shard
    assert sorted(together) == sorted(failing(whole))  # each pair once
    # some positions were judged in both shards (crash states apart): merged, they count once
    assert sum(p["coverage"]["pairs"]["judged"] for p in parts) > pairs["judged"]
    assert main(["report", "merge", *shards, "--json", str(tmp_path / "merged.json")]) == 1
    merged = json.loads((tmp_path / "merged.json").read_text())
    assert _strip(merged) == _strip(json.loads((tmp_path / "whole.json").read_text()))
    # shards of different choices are refused, naming the file and the field
    other = json.loads(open(shards[1]).read())
    other["runs"][0]["coverage"]["pairs"]["chosen"] += 1
    (tmp_path / "other.json").write_text(json.dumps(other))
    from faultsim.reports.merge import MergeError, load, merge

    with pytest.raises(MergeError, match=r"other.json: runs\[0\]\.coverage\.pairs\.chosen"):
        merge(load([shards[0], str(tmp_path / "other.json")]))


def _strip(value):
    from same_json import strip

    return strip(value)


def test_merged_shard_reports_are_the_whole_runs_report(tmp_path):
    import json
    import sys

    sys.path.insert(0, str(ROOT / "bench"))
    from faultsim.cli import main

    # a run with findings (so violations, counterexamples and the map's failures merge)
    spec, scenario = CASES["swallows_a_kill"]
    base = ["run", str(scenario), "--agent", spec, "--crash-model", "all", "--crashes", "1",
            "--workers", "1", "--examples", "0"]
    outputs = lambda name: ["--json", str(tmp_path / f"{name}.json"), "--junit",  # noqa
                            str(tmp_path / f"{name}.xml"), "--summary-md",
                            str(tmp_path / f"{name}.md")]
    assert main(base + outputs("whole")) == 1
    shards = [str(tmp_path / f"s{i}.json") for i in (1, 2, 3)]
    for i, out in enumerate(shards, 1):
        main(base + ["--shard", f"{i}/3", "--json", out])
    assert main(["report", "merge", *reversed(shards), *outputs("merged")]) == 1
    whole = json.loads((tmp_path / "whole.json").read_text())
    merged = json.loads((tmp_path / "merged.json").read_text())
    assert whole["runs"][0]["violations"]  # there was something to merge
    parts = [json.loads(open(s).read()) for s in shards]
    assert all(len(p["runs"][0]["violations"]) < len(whole["runs"][0]["violations"])
               for p in parts)  # each shard has only some
    assert _strip(merged) == _strip(whole)
    # the JUnit XML and the Markdown summary too (their only timings: wall seconds)
    timed = re.compile(r'time="[0-9.]+"|\| [0-9.]+s \||Time is measured[^\n]*')
    for kind in ("xml", "md"):
        got, want = ((tmp_path / f"{n}.{kind}").read_text() for n in ("merged", "whole"))
        assert timed.sub("", got) == timed.sub("", want), kind

    # what is not the shards of one run is refused, naming the file and the field
    from faultsim.reports.merge import MergeError, merge

    def refused(reports) -> str:
        with pytest.raises(MergeError) as err:
            merge(reports)
        return str(err.value)

    named = list(zip(shards, parts))
    assert refused(named[:2]) == f"{shards[0]}: runs[0].shard: shard 3/3 missing"
    assert refused(named + named[2:]) == (f"{shards[2]}: runs[0].shard.index: 3 again "
                                          f"(also {shards[2]})")
    other = json.loads(json.dumps(parts[1]))
    other["runs"][0]["seed"] = "7"
    assert refused([named[0], ("other.json", other), named[2]]) == (
        f"other.json: runs[0].seed: '7', but '0' in {shards[0]}")
    assert refused([named[0], ("whole.json", whole)]).startswith("whole.json: runs[0].")


def test_a_shards_table_counts_only_the_kill_points_it_judged(tmp_path, capsys):
    """A shard crashes at every kill point but judges only the crash states it owns: its
    table once said every kill point passed. It counts the kill points where it judged a
    crash state, of all, and says it is a shard."""
    import json

    from faultsim.cli import main

    spec, scenario = CASES["receipts"]
    out = tmp_path / "s2.json"
    assert main(["run", str(scenario), "--agent", spec, "--crash-model", "process",
                 "--crashes", "1", "--workers", "1", "--shard", "2/3", "--json",
                 str(out)]) == 0
    text = capsys.readouterr().out
    (run,) = json.loads(out.read_text())["runs"]
    judged = {state[1] for state in run["states"]}  # the kill points of its crash states
    total = run["kill_points_total"]
    assert 0 < len(judged) < total == run["kill_points_explored"]
    lines = text.splitlines()
    head = next(n for n, line in enumerate(lines) if line.startswith("scenario  crash model"))
    assert re.split(r"\s{2,}", lines[head + 1])[:5] == [
        "receipts", "process", f"{len(judged)} of {total}", str(len(judged)), "0"]
    assert lines[head + 2].startswith("shard 2/3: each row counts the kill points where "
                                      "this shard judged a crash state")
    assert "explored (" in text and f"; a crash state judged here at {len(judged)} of them" \
        in text


def test_subprocess_mode_shards_split_crash_states_and_merge_into_the_whole_run(tmp_path):
    """Subprocess mode shards by crash state as the in-process mode does
    (faultsim.real.judging.owned): each shard kills at every kill point, resumes whole
    classes of the states, and the merged report is the whole run's, resumed runs
    included; on a mutant, so failures merge too."""
    import json
    import sys

    sys.path.insert(0, str(ROOT / "bench"))
    from faultsim.cli import main

    base = ["run", str(ROOT / "tests" / "data" / "tiny.toml"), "--mode", "subprocess",
            "--agent", "reference_agent.mutants.save_b_only", "--crashes", "1",
            "--workers", "2", "--examples", "0"]
    assert main(base + ["--json", str(tmp_path / "whole.json")]) == 1
    shards = [str(tmp_path / f"s{i}.json") for i in (1, 2)]
    for i, out in enumerate(shards, 1):
        main(base + ["--shard", f"{i}/2", "--json", out])
    parts = [json.loads(open(s).read())["runs"][0] for s in shards]
    whole = json.loads((tmp_path / "whole.json").read_text())
    run = whole["runs"][0]
    assert run["violations"] and run["crash_states_resumed"] < run["crash_states"]
    for part in parts:  # every kill point crashed, a share of the states judged
        assert part["shard"]["by"] == "crash state"
        assert part["kill_points_explored"] == run["kill_points_explored"]
        assert 0 < part["crash_states"] < run["crash_states"]
    # the resumed runs add up: whole classes per shard, the memo kept
    assert sum(p["crash_states_resumed"] for p in parts) == run["crash_states_resumed"]
    assert main(["report", "merge", *shards, "--json", str(tmp_path / "merged.json")]) == 1
    merged = json.loads((tmp_path / "merged.json").read_text())
    assert _strip(merged) == _strip(whole)


# Three first crashes late in the run (short courses) whose second crash states meet: on
# main's code the pair stage ran the pairs of each shard's own first crashes, and a
# second crash state met after first crashes of both shards was resumed in both (38 + 9
# resumed pairs in 2 shards against 42 in the whole run; in another run SQLite's random
# journal nonce put a first crash in both shards: 316 pairs explored against 214). The
# first one's recovery save is torn by a second crash: failing pairs.
SPP_FIRST = ["k76-checkpoint-commit-sqlite.exec#6", "k87-after-model-response-summary.json#1",
             "k101-after-model-response-progress.json#3"]


def test_subprocess_mode_pair_shards_split_second_crash_states(tmp_path):
    """With --crashes 2, subprocess-mode shards split the second crash states by class
    (faultsim.real.pairs._sharded): the shards' resumed pairs add up to the whole run's,
    and the merged report, failing pairs included, is the whole run's."""
    import json
    import sys

    sys.path.insert(0, str(ROOT / "bench"))
    from faultsim.cli import main

    base = ["run", str(ROOT / "tests" / "data" / "sppshard_pair_sqlite.toml"), "--mode",
            "subprocess", "--agent", "reference_agent.mutants.recovery_two_writes",
            "--crashes", "2", "--workers", "2", "--examples", "0", "--kill-point", *SPP_FIRST]
    assert main(base + ["--json", str(tmp_path / "whole.json")]) == 1
    shards = [str(tmp_path / f"s{i}.json") for i in (1, 2)]
    for i, out in enumerate(shards, 1):
        main(base + ["--shard", f"{i}/2", "--json", out])
    whole = json.loads((tmp_path / "whole.json").read_text())
    run = whole["runs"][0]
    parts = [json.loads(open(s).read())["runs"][0] for s in shards]
    pairs = run["schedules"]["2"]
    assert pairs["resumed"] < pairs["explored"]  # equal second crash states shared a run
    assert any(len(v["schedule"]) == 2 for v in run["violations"])  # failing pairs
    for key in ("explored", "resumed", "total"):  # every second crash state in one shard
        assert sum(p["schedules"]["2"][key] for p in parts) == pairs[key], key
    assert all(0 < p["schedules"]["2"]["resumed"] < pairs["resumed"] for p in parts)
    # the first crashes: each shard judged every one, but counts only its own
    assert sum(p["crash_states"] for p in parts) == run["crash_states"]
    assert sum(p["crash_states_resumed"] for p in parts) == run["crash_states_resumed"]
    assert main(["report", "merge", *shards, "--json", str(tmp_path / "merged.json")]) == 1
    merged = json.loads((tmp_path / "merged.json").read_text())
    assert _strip(merged) == _strip(whole)
