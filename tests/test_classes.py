"""Kill-point classes and representative coverage (faultsim.core.classes): a class does not
depend on the step; the representative choice keeps each class's first and last
occurrence, its seeded draws and every kill point of the first and last step, the same on
any worker count and split by shards; a representative run judges those points as the
exhaustive run does and keeps the violated classes of every mutant caught here by one
crash (and of one caught only by two); agents written the way users write them, whose
mistake shows at one step only, are caught or not, and the reason is checked; and the run
says what it covered, in every report, while --kill-point and replay tokens reach any
kill point."""
from __future__ import annotations

import importlib
import json
import xml.etree.ElementTree as ET

import pytest

from conftest import DATA
from faultsim.core.classes import cover, signature, steps
from faultsim.cli import main
from faultsim.inprocess.explore import explore
from faultsim.inprocess.sandbox import Explorer
from faultsim.settings.options import ExploreOptions, select
from faultsim.scenario import load_scenario
from tests import periodic_agent

LOOP, PERIODIC, TINY = (str(DATA / f"{n}.toml") for n in ("loop", "periodic",
                                                        "tiny"))
# the pair tests' loop: loop.toml without its charges, 482 kill points to its 664 (a pair
# sweep costs about the square: half of loop.toml's); both double-crash mutants still fail
LOOP_PAIRS = str(DATA / "loop_pairs.toml")
# the mutants of tests/test_engine.py that one crash catches on loop.toml, with the crash
# model that exposes each (unknown_version_parsed is caught by the version probe, which
# runs under either coverage; progress_trusted's power-loss window needs tiny.toml's
# workspace file, which loop.toml's course never writes)
MUTANTS = [("messages_only", "process"), ("save_b_only", "process"),
           ("overwrite_in_place", "process"), ("rename_without_fsync", "power"),
           ("counters_reset", "process"), ("reask_instead_of_reconcile", "process"),
           ("orphan_tool_use", "process"), ("key_after_effect", "process"),
           ("progress_appended", "process"), ("blind_without_intent", "process")]


def clean(make_agent, path):
    with Explorer(make_agent, load_scenario(path), agent_name="a", timeout=30) as ex:
        ex.convergence = False
        golden = ex.golden()
        return golden.kill_points(), golden.trace


def representative(run, per_class=None, seed="0"):
    """The coverage a representative run of `run`'s scenario makes (the engine's call)."""
    options = ExploreOptions(coverage="representative", per_class=per_class, seed=seed)
    return options.resolve(run.scenario).cover(run.kill_points,
                                               run.verdicts[0].golden.trace)


def violated(run, coverage, chosen_only=False):
    """(class, invariant) of each failing single crash of `run` (at the chosen points)."""
    position = {p.id: n for n, p in enumerate(run.kill_points)}
    chosen = set(coverage.chosen)
    return {(coverage.classes[coverage.class_of[position[v.kill_point.id]]], x.invariant)
            for v in run.verdicts for x in v.violations
            if not chosen_only or position[v.kill_point.id] in chosen}


@pytest.fixture
def mutant_sweep(shared_cache):
    """`mutant_sweep(name, model)`: the exhaustive single-crash sweep of
    reference_agent.mutants.NAME on loop.toml, made once per session (tests/shared_runs.py)
    and read by every test here that sweeps that mutant so (save_b_only by three,
    counters_reset by two). Sound: the same call gives the same report, timings aside (the
    project's rule; a worker count changes nothing, as the representative test below checks
    on its own runs), and each test only reads the run it gets (a fresh copy)."""

    def sweep(name: str, model: str = "process"):
        module = f"reference_agent.mutants.{name}"
        return shared_cache.get(
            f"test_classes: {module} on {LOOP}, crashes=1, {model}",
            lambda: explore(importlib.import_module(module).make_agent, load_scenario(LOOP),
                            crashes=1, crash_model=model, agent_name=module)).runs[0]

    return sweep


def test_a_class_does_not_depend_on_the_step():
    points, trace = clean(periodic_agent.make_agent, PERIODIC)
    step = steps(points, trace)

    def of(n, torn=False):
        return [signature(p, trace) for p, s in zip(points, step)
                if s == n and p.torn == torn]

    # the same code at steps 9 and 12 (their checkpoint writes both between 4 and 8 KiB):
    # the same classes in the same order, though the model's turn (s@8, s@11), the
    # tool-use ids and the write sizes differ; the torn cuts of the larger write add sector
    # cuts of a kind the smaller already has
    assert of(9) == of(12) and len(of(9)) > 10
    assert set(of(9, torn=True)) == set(of(12, torn=True))
    assert any("model@s@<n>" in s for s in of(9))
    # steps 3 and 7: the same classes but for the size bucket of their writes (2 KiB and
    # 4 KiB: a checkpoint that outgrows a power of two starts new classes)
    three, seven = of(3), of(7)
    assert len(three) == len(seven)
    differ = [(a, b) for a, b in zip(three, seven) if a != b]
    assert differ and all(a.replace("<=2KiB", "<=4KiB") == b for a, b in differ)


def test_the_representative_choice():
    points, trace = clean(importlib.import_module("reference_agent").make_agent, LOOP)
    cov = cover(points, trace, "representative", 2, "0")
    chosen = set(cov.chosen)
    assert 0 < cov.not_crashed() < len(points)
    members = {}
    for n, c in enumerate(cov.class_of):
        members.setdefault(c, []).append(n)
    for c, where in members.items():
        assert where[0] in chosen and where[-1] in chosen, cov.classes[c]
        assert len(chosen & set(where)) >= min(len(where), 4), cov.classes[c]
    step = steps(points, trace)
    assert all(n in chosen for n, s in enumerate(step) if s <= 1 or s == step[-1])
    # seeded: the same choice every time; fewer draws choose a subset; every kill point
    # is chosen under exhaustive coverage
    assert cover(points, trace, "representative", 2, "0") == cov
    assert set(cover(points, trace, "representative", 0, "0").chosen) < chosen
    assert len(cover(points, trace).chosen) == len(points)
    # a subprocess shard is a part of the choice: the shards partition it
    parts = [select(points, None, (i, 3), cov) for i in (1, 2, 3)]
    ids = [p.id for part in parts for p in part]
    assert sorted(ids) == sorted(points[n].id for n in chosen) and len(set(ids)) == len(ids)


def _stripped(report):
    timing = {"seconds", "wall_seconds", "timeout_seconds", "crash_states_converged",
              "convergence", "converged", "resumed", "crash_states_resumed", "shortcuts"}

    def strip(value):
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items() if k not in timing}
        if isinstance(value, list):
            return [strip(v) for v in value]
        return value

    return strip(report.to_json())


def test_a_representative_run_judges_its_points_as_the_exhaustive_run_on_any_worker_count(
        mutant_sweep):
    module = importlib.import_module("reference_agent.mutants.save_b_only")
    scenario = load_scenario(LOOP)
    whole = mutant_sweep("save_b_only")
    one, two = (explore(module.make_agent, scenario, crashes=1, workers=w,
                        coverage="representative") for w in (1, 2))
    assert _stripped(one) == _stripped(two)
    run = one.runs[0]
    cov = representative(whole)
    assert [p.id for p in run.explored] == [whole.kill_points[n].id for n in cov.chosen]
    assert len(run.explored) < len(run.kill_points)
    chosen = {p.id for p in run.explored}
    verdicts = lambda r, keep: [(v.kill_point.id, v.order,  # noqa: E731
                                 [x.explanation for x in v.violations])
                                for v in r.verdicts if v.kill_point.id in keep]
    assert verdicts(run, chosen) == verdicts(whole, chosen)
    assert violated(run, cov) == violated(whole, cov) != set()


@pytest.mark.parametrize("name,model", MUTANTS, ids=[m[0] for m in MUTANTS])
def test_every_mutant_violates_the_same_classes_under_representative_coverage(name, model,
                                                                            mutant_sweep):
    """One exhaustive sweep; the representative run's verdicts are the exhaustive run's at
    its chosen points (the test above, and engine.md: a verdict never depends on which
    other kill points ran)."""
    run = mutant_sweep(name, model)
    cov = representative(run)
    assert cov.not_crashed() > 0
    found = violated(run, cov)
    assert found and violated(run, cov, chosen_only=True) == found


def test_first_and_last_occurrences_alone_would_miss_a_class_of_counters_reset(mutant_sweep):
    """Why `per_class` draws more than the ends: counters_reset fails a class of loop.toml
    at its middle occurrence only (the stored counters differ from step to step), which a
    choice of first and last occurrences (per_class=0) leaves out and the default keeps."""
    run = mutant_sweep("counters_reset")  # loop.toml's own crash model: process
    ends = representative(run, per_class=0)
    assert violated(run, ends, chosen_only=True) < violated(run, ends)
    assert violated(run, representative(run), chosen_only=True) == violated(run, ends)


def test_a_mutant_caught_only_by_two_crashes_is_caught_from_representative_first_crashes():
    """loop_pairs.toml, not the smaller pair.toml: pair.toml is three turns, and since a
    class names the tools of the turn before, its middle turn's points are classes of their
    own and the representative choice is every kill point (nothing left to check). (With
    per_class=0 the first crashes' classes differ: a failing second crash state shared by
    several first crashes is reported once, under the first of them the run met, so the
    class it is reported under depends on which first crashes ran.) The second crashes
    are classed over the resumed courses (classes.cover_courses): the representative
    pair stage leaves some out and violates the same pair classes. (Checked to fail on
    loop_pairs.toml when cover_courses keeps of each course's first step only the classes'
    first and last occurrences: pair classes of the email's intent write go missing.)"""
    module = importlib.import_module("reference_agent.mutants.repeat_before_save")
    scenario = load_scenario(LOOP_PAIRS)

    def first_classes(report):
        run = report.runs[0]
        position = {p.id: n for n, p in enumerate(run.kill_points)}
        cov = representative(run)
        return {(cov.classes[cov.class_of[position[f.schedule[0].id]]], x.invariant)
                for f in run.deep_failures for x in f.violations}, run

    whole, every = first_classes(explore(module.make_agent, scenario, crashes=2, seed="7",
                                         crash_model="process"))
    some, run = first_classes(explore(module.make_agent, scenario, crashes=2, seed="7",
                                      crash_model="process", coverage="representative"))
    assert len(run.explored) < len(run.kill_points)
    assert whole and some == whole
    # the pair stage: fewer second crashes, every chosen one judged, the same pair classes
    assert every.pair_coverage is None  # exhaustive: every kill point of every course
    pairs = run.pair_coverage
    assert pairs["not_crashed"] > 0 and pairs["judged"] == pairs["chosen"]
    assert sum(c["judged"] for c in pairs["classes"]) == pairs["judged"]
    assert pairs["kill_points"] == sum(c["occurrences"] for c in pairs["classes"])
    assert run.depth(2).explored < every.depth(2).explored
    found = second_classes(every)
    assert found and {i for _, i in found} == {"effects_exactly_once"}
    assert second_classes(run) == found


def test_reconcile_in_place_needs_two_crashes_and_is_caught_by_the_representative_pairs():
    """The other mutant only two crashes expose in process (reference_agent.mutants
    DOUBLE_CRASH_NAMES): the save that completes a reconciled turn, in place, torn by a
    second crash in the recovery of the first. Its failing second crashes fall in each
    course's recovery (classes.cover_courses judges every course's first step, bar a torn
    write's later sector cuts, which its class covers): the same pair classes fail under both
    coverages, with second crashes left out. (Checked to fail on loop_pairs.toml when
    cover_courses drops each course's first step: no pair class is found.)"""
    module = importlib.import_module("reference_agent.mutants.reconcile_in_place")
    scenario = load_scenario(LOOP_PAIRS)
    assert explore(module.make_agent, scenario, crashes=1, crash_model="process").ok
    every = explore(module.make_agent, scenario, crashes=2, seed="7",
                    crash_model="process").runs[0]
    run = explore(module.make_agent, scenario, crashes=2, seed="7", crash_model="process",
                  coverage="representative").runs[0]
    pairs = run.pair_coverage
    assert pairs["not_crashed"] > 0 and run.depth(2).explored < every.depth(2).explored
    found = second_classes(every)
    assert found and second_classes(run) == found


def second_classes(run) -> set:
    """(class of the second crash in its resumed course, invariant) of each failing pair:
    the pair stage's own classes (classes.signature over the course the first crash's
    resumed run took), whichever first crash that course followed."""
    return {(signature(f.kill_point, f.earlier[0].next_trace), x.invariant)
            for f in run.deep_failures for x in f.violations}


PERIODIC_CAUGHT = [
    # a mistake of the first step (every kill point of the first step is judged; its
    # in-place save is also a class of its own)
    "make_agent_first_in_place",
    # of the last step (every kill point of the last step is judged; its append is also a
    # class of its own)
    "make_agent_last_appends_twice",
    # every 10th step takes another code path (an in-place save): its events are classes
    # no other step makes, judged at their first occurrence
    "make_agent_compact_every_10th",
    # once the checkpoint passes 4 KiB: its writes are a new size bucket, new classes
    "make_agent_big_in_place",
]


@pytest.mark.parametrize("factory", PERIODIC_CAUGHT)
def test_an_agent_whose_mistake_shows_at_one_step_is_caught(factory):
    run = explore(getattr(periodic_agent, factory), load_scenario(PERIODIC), crashes=1,
                  agent_name=factory).runs[0]
    cov = representative(run)
    found = violated(run, cov)
    assert found and violated(run, cov, chosen_only=True) == found


def test_a_mistake_in_the_data_of_every_10th_step_is_caught_only_where_a_draw_lands():
    """Every 10th charge goes with a fresh key: the same events as every other step, so
    the crash points that fail (after that charge, before the save) are of classes every
    step has, and pass at their other occurrences; a representative run judges the
    failing occurrence only where a seeded draw chose it (guarantees.md)."""
    careful = explore(periodic_agent.make_agent, load_scenario(PERIODIC), crashes=1,
                      agent_name="careful").runs[0]
    run = explore(periodic_agent.make_agent_new_key_every_10th, load_scenario(PERIODIC),
                  crashes=1, agent_name="flawed").runs[0]
    cov = representative(run)
    position = {p.id: n for n, p in enumerate(run.kill_points)}
    step = steps(run.kill_points, run.verdicts[0].golden.trace)
    failing = {position[v.kill_point.id] for v in run.verdicts if not v.ok}
    assert failing and {step[n] for n in failing} == {10}  # the 10th charge's step
    # the same classes as the careful agent's: nothing new to judge at a first occurrence
    careful_classes = set(representative(careful).classes)
    assert {cov.classes[cov.class_of[n]] for n in failing} <= careful_classes
    for n in failing:  # each failing class passes at its first and last occurrence
        where = [m for m, c in enumerate(cov.class_of) if c == cov.class_of[n]]
        assert where[0] not in failing and where[-1] not in failing
    caught = violated(run, cov, chosen_only=True)
    assert caught == {(cov.classes[cov.class_of[n]], "effects_exactly_once")
                      for n in failing & set(cov.chosen)}
    assert caught < violated(run, cov)  # some of its classes are missed at this seed


def test_the_run_says_what_it_covered_and_any_kill_point_stays_reachable(tmp_path, capsys):
    out, xml, md = (tmp_path / n for n in ("r.json", "r.xml", "r.md"))
    assert main(["run", LOOP, "--crashes", "1", "--crash-model", "process",
                 "--coverage", "representative", "--json", str(out), "--junit", str(xml),
                 "--summary-md", str(md)]) == 0
    text = capsys.readouterr().out
    run = json.loads(out.read_text())["runs"][0]
    cov = run["coverage"]
    line = (f"representative: {len(cov['classes'])} classes of {run['kill_points_total']} "
            f"kill points, each judged at >= 4 occurrences (every one of a class with "
            f"fewer); {cov['not_crashed']} kill points not crashed")
    assert cov["mode"] == "representative" and cov["not_crashed"] > 0
    assert cov["chosen"] == run["kill_points_explored"] == \
        run["kill_points_total"] - cov["not_crashed"]
    assert len(cov["class_of"].split(",")) == run["kill_points_total"]
    assert sum(c["judged"] for c in cov["classes"]) == run["kill_points_explored"]
    assert f"loop [process]: {line}" in text and f"coverage      {line}" in text
    assert line in md.read_text()
    props = {p.get("name"): p.get("value") for p in ET.parse(xml).iter("property")}
    assert props["coverage"] == line
    # exhaustive (the default) says nothing of the kind, and classes its kill points
    assert main(["run", TINY, "--crashes", "1", "--crash-model", "process", "--json",
                 str(out), "--junit", str(xml)]) == 0
    assert "representative" not in capsys.readouterr().out
    run = json.loads(out.read_text())["runs"][0]
    assert run["coverage"]["mode"] == "exhaustive" and run["coverage"]["not_crashed"] == 0
    assert "coverage" not in {p.get("name") for p in ET.parse(xml).iter("property")}
    # a kill point the representative run left out: --kill-point reaches it
    points, trace = clean(importlib.import_module("reference_agent").make_agent, LOOP)
    left = [points[n].id for n in set(range(len(points))) -
            set(cover(points, trace, "representative", 2, "0").chosen)]
    assert main(["run", LOOP, "--crashes", "1", "--crash-model", "process", "--coverage",
                 "representative", "--kill-point", left[0], "--json", str(out)]) == 0
    run = json.loads(out.read_text())["runs"][0]
    assert run["kill_points_explored"] == 1 and run["coverage"]["mode"] == "exhaustive"
    capsys.readouterr()


def test_a_replay_token_reaches_a_kill_point_the_representative_run_left_out(mutant_sweep):
    from faultsim import replay

    run = mutant_sweep("save_b_only")  # named by its module: the token imports it
    cov = representative(run)
    chosen = {run.kill_points[n].id for n in cov.chosen}
    verdict = next(v for v in run.verdicts if not v.ok and v.kill_point.id not in chosen)
    again = replay(verdict.token(run))
    assert [p.id for p in again.schedule] == [verdict.kill_point.id]
    assert [x.explanation for x in again.violations] == \
        [x.explanation for x in verdict.violations]


@pytest.mark.parametrize("args,message", [
    (["--coverage", "most"], "invalid choice: 'most'"),
    (["--per-class", "-1"], "--per-class -1: expected an integer >= 0"),
])
def test_a_bad_coverage_flag_is_a_usage_error(args, message, capsys):
    try:
        code = main(["run", TINY, *args])
    except SystemExit as exc:
        code = exc.code
    assert code == 2 and message in capsys.readouterr().err


def test_a_bad_fault_profile_coverage_names_the_file_and_key(tmp_path, capsys):
    bad = tmp_path / "bad.toml"
    bad.write_text((DATA / "tiny.toml").read_text() + '\n[fault_profile]\ncoverage = "some"\n')
    assert main(["run", str(bad)]) == 2
    err = capsys.readouterr().err
    assert f"{bad}: fault_profile.coverage" in err and "representative" in err
    assert len(err.strip().splitlines()) == 1


def test_shards_of_a_representative_run_merge_into_the_whole_run(tmp_path):
    """Shards split the representative choice (in process: its crash states), and
    `faultsim report merge` joins them into the whole run's report, coverage included."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
    from same_json import strip

    base = ["run", LOOP, "--agent", "reference_agent.mutants.save_b_only", "--crashes", "1",
            "--crash-model", "process", "--coverage", "representative", "--per-class", "0",
            "--workers", "1", "--examples", "0"]
    assert main(base + ["--json", str(tmp_path / "whole.json")]) == 1
    shards = [str(tmp_path / f"s{i}.json") for i in (1, 2)]
    for i, out in enumerate(shards, 1):
        main(base + ["--shard", f"{i}/2", "--json", out])
    assert main(["report", "merge", *shards, "--json", str(tmp_path / "merged.json")]) == 1
    whole, merged = (json.loads((tmp_path / f"{n}.json").read_text())
                     for n in ("whole", "merged"))
    assert whole["runs"][0]["coverage"]["not_crashed"] > 0
    assert strip(merged) == strip(whole)


def test_the_coverage_settings_come_from_flags_ini_keys_and_the_project(tmp_path,
                                                                         monkeypatch):
    from faultsim.pytest.settings import FaultsimUsageError, read_options
    from tests.test_plugin import _Config

    for name in ("FAULTSIM_COVERAGE", "FAULTSIM_PER_CLASS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "pyproject.toml").write_text('[tool.faultsim]\ncoverage = "representative"\n'
                                             'per_class = 1\n')
    got = read_options(_Config(tmp_path))
    assert (got.coverage, got.per_class) == ("representative", 1)
    got = read_options(_Config(tmp_path, {"faultsim_coverage": "exhaustive"},
                               {"faultsim_per_class": "3"}))
    assert (got.coverage, got.per_class) == ("exhaustive", 3)
    with pytest.raises(FaultsimUsageError, match=r"^faultsim_per_class = -1: expected an "
                       r"integer >= 0$"):
        read_options(_Config(tmp_path, ini={"faultsim_per_class": "-1"}))
    (tmp_path / "pyproject.toml").write_text('[tool.faultsim]\ncoverage = "most"\n')
    with pytest.raises(FaultsimUsageError, match=r"^pyproject.toml: \[tool.faultsim\] "
                       r"coverage = 'most': expected exhaustive or representative$"):
        read_options(_Config(tmp_path))
    # and `faultsim run` reads the same keys
    from faultsim.settings.config import load

    monkeypatch.setenv("FAULTSIM_PER_CLASS", "5")
    assert load(tmp_path).values["per_class"] == 5


def first_step(points, trace) -> set:
    """The positions of the first step (setup or recovery, and first turn) of a course,
    bar a torn write's sector cuts after its first: what cover_courses judges per course."""
    from faultsim.core.classes import _cut

    step, out, sectors = steps(points, trace), set(), set()
    for n, p in enumerate(points):
        if step[n] > 1:
            break
        if p.torn and _cut(trace[p.index - 1].size, p.offset) == "sector":
            if p.index in sectors:
                continue
            sectors.add(p.index)
        out.add(n)
    return out


def test_the_pair_stage_shares_classes_across_resumed_courses():
    """classes.cover_courses over three copies of one course (the clean run's, standing for
    three resumed runs that took the same course): each class occurs three times as often,
    its first occurrence falls in the first course and its last in the third; the first and
    the last course are crashed at every kill point of their first and last step, the
    middle one only at its first step (bar a torn write's later sector cuts) and the seeded
    draws, never at a class's ends nor at its last step's other points; with per_class=0,
    exactly at that first step. The same call makes the same choice (nothing but its input
    decides it), and `chosen_by` counts every chosen point once."""
    from faultsim.core.classes import cover_courses
    from reference_agent import make_agent

    points, trace = clean(make_agent, LOOP)
    one = cover(points, trace, "exhaustive")
    for per_class in (0, 2):
        pairs = cover_courses([(points, trace)] * 3, per_class, "0")
        assert pairs.classes == one.classes
        counts = [0] * len(one.classes)
        for c in one.class_of:
            counts[c] += 1
        assert pairs.occurrences == tuple(3 * n for n in counts)
        step = steps(points, trace)
        ends = {n for n, s in enumerate(step) if s <= 1 or s == step[-1]}
        firsts = first_step(points, trace)
        assert firsts and firsts < ends
        first = {one.class_of.index(c) for c in range(len(one.classes))}
        last = {len(one.class_of) - 1 - one.class_of[::-1].index(c)
                for c in range(len(one.classes))}
        assert first | ends <= set(pairs.chosen[0]) and last | ends <= set(pairs.chosen[2])
        middle = set(pairs.chosen[1])
        assert firsts <= middle and len(middle - firsts) <= per_class * len(one.classes)
        by = dict(pairs.chosen_by)
        assert sum(by.values()) == sum(map(len, pairs.chosen))
        if per_class == 0:
            assert middle == firsts
            assert by["first_step"] >= len(firsts)  # the middle course's at least
        assert cover_courses([(points, trace)] * 3, per_class, "0") == pairs
        block = pairs.to_json([set(c) for c in pairs.chosen])
        assert block["not_crashed"] == 3 * len(points) - sum(map(len, pairs.chosen)) > 0
        assert block["chosen_by"] == by


def test_the_pair_stage_chooses_a_bounded_number_beside_the_classes():
    """Why the pair stage is linear: over k copies of a course, the points chosen beside
    the classes' own are each course's first step (bar later sector cuts) plus the first
    and last step of two courses, so k + 1 courses add exactly one first step's worth
    (the rule before judged every course's first and last step, every sector cut)."""
    from faultsim.core.classes import cover_courses
    from reference_agent import make_agent

    points, trace = clean(make_agent, LOOP)
    totals = [sum(map(len, cover_courses([(points, trace)] * k, 0, "0").chosen))
              for k in (3, 4, 5)]
    assert totals[1] - totals[0] == totals[2] - totals[1] == len(first_step(points, trace))


def test_a_shard_of_a_representative_pair_stage_is_refused_in_subprocess_mode(capsys):
    """In-process, a shard makes the whole run's choice and judges its own states of it
    (tests/test_shards.py); subprocess mode's pair stage does not split that choice: one
    line, exit 2, before any crash."""
    assert main(["run", LOOP, "--coverage", "representative", "--crashes", "2",
                 "--shard", "1/2", "--mode", "subprocess"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--shard with --coverage representative and --crashes 2 in " \
        "subprocess mode" in err[0] and "loop.toml" in err[0]
