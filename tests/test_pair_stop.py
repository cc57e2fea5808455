"""The representative pair stage's two cost cuts (issue 52): each resumed course's driver
ends after its last chosen second crash (faultsim.inprocess.pairs.sweep_after_first, the
argument beside the call), checked against the long way (every driver to its end), and
the classes' seeded draws land in the sampled courses only (classes.cover_courses)."""
from __future__ import annotations

import json
import sys
from pathlib import Path

from conftest import DATA
from faultsim.cli import main
from faultsim.inprocess import forking, pairs

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
from same_json import strip  # noqa: E402  (the bench's own rule for what is a timing)

LOOP = str(DATA / "loop.toml")
# pair.toml (187 kill points, three turns): its first crashes are every kill point (each
# class there occurs too few times to leave one out), but the pair stage classes the kill
# points of its 30 resumed courses together and leaves second crashes out of the middle
# courses (1,167 of 3,431), so drivers stop early; the mutant fails there. About a third
# of the CPU of loop_pairs.toml's 67 courses (7 s a run to 19 s, one run each, same hour).
PAIR = str(DATA / "pair.toml")
ARGS = ["run", PAIR, "--agent", "reference_agent.mutants.repeat_before_save",
        "--crash-model", "process", "--crashes", "2", "--coverage", "representative",
        "--seed", "7", "--workers", "1"]


def _run(tmp_path, name: str) -> dict:
    out = tmp_path / f"{name}.json"
    assert main(ARGS + ["--json", str(out)]) == 1  # the mutant fails, in pairs
    return strip(json.loads(out.read_text()))


def _counted(monkeypatch) -> list:
    drivers: list = []

    class Counted(forking.ForkAt):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            drivers.append(self)

    monkeypatch.setattr(forking, "ForkAt", Counted)
    return drivers


def test_a_pair_driver_stopped_after_its_last_chosen_point_gives_the_same_report(
        tmp_path, monkeypatch):
    """The same report, every count and verdict, with each course's driver stopped after
    its last chosen point and run to its end; the stops landed (counted); and a stop one
    event too early (a chosen point behind it never crashed) changes the report, so the
    comparison can fail."""
    drivers = _counted(monkeypatch)
    short = _run(tmp_path, "short")
    stopped = sum(d.stopped for d in drivers)
    assert stopped > 0, "no driver was stopped early: nothing compared"
    real = pairs.sweep_forking
    monkeypatch.setattr(pairs, "sweep_forking",
                        lambda *a, stop=False, **k: real(*a, **k))  # the long way
    drivers.clear()
    long = _run(tmp_path, "long")
    assert drivers and not any(d.stopped for d in drivers)
    assert short == long
    (run,) = short["runs"]
    pair = run["coverage"]["pairs"]
    assert pair["judged"] == pair["chosen"] and run["schedules"]["2"]["explored"] > 0
    # the guard's own failure: stopping one event before the last chosen point
    monkeypatch.setattr(pairs, "sweep_forking", real)
    monkeypatch.setattr(forking, "_last", lambda points: max(p.index for p in points) - 1)
    early = tmp_path / "early.json"
    main(ARGS + ["--json", str(early)])
    assert strip(json.loads(early.read_text())) != long


def test_the_seeded_draws_land_in_the_sampled_courses():
    """Over six copies of a course, each class's seeded draws (the class rule's choices
    other than its first and last occurrence) fall in the sampled courses: the first, the
    last and per_class seeded others; the same call samples the same; the report says
    which (`sampled_courses`)."""
    from faultsim.core.classes import cover_courses, pair_ranks, sampled_courses
    from faultsim.inprocess.sandbox import Explorer
    from faultsim.scenario import load_scenario
    from reference_agent import make_agent

    with Explorer(make_agent, load_scenario(LOOP), agent_name="a", timeout=30) as ex:
        ex.convergence = False
        golden = ex.golden()
        points, trace = golden.kill_points(), golden.trace
    courses = [(points, trace)] * 6
    choice = cover_courses(courses, 2, "0")
    sampled = sampled_courses([len(points)] * 6, 2, "0")
    assert choice.sampled == sampled and len(sampled) == 4 and {0, 5} <= set(sampled)
    assert cover_courses(courses, 2, "0") == choice
    # each class's draws: the ranks the class rule judged, bar its first and last
    ranks = pair_ranks(choice.classes, choice.occurrences, 2, "0",
                       [[r for r in range(n) if r // (n // 6) in sampled]
                        for n in choice.occurrences])
    seen = [0] * len(choice.classes)
    drawn_in = set()
    for k, row in enumerate(choice.class_of):
        for n, c in enumerate(row):
            if seen[c] in ranks[c] and 0 < seen[c] < choice.occurrences[c] - 1:
                assert n in choice.chosen[k]
                drawn_in.add(k)
            seen[c] += 1
    assert drawn_in and drawn_in <= set(sampled)
    # the middle courses not sampled: their first step only (no class draw lands there)
    counts = {k: len(choice.chosen[k]) for k in range(1, 5)}
    outside = [k for k in counts if k not in sampled]
    assert outside and all(counts[k] == counts[outside[0]] for k in outside)
    assert all(counts[k] >= counts[outside[0]] for k in counts)
    assert choice.to_json([set(c) for c in choice.chosen])["sampled_courses"] == list(sampled)
