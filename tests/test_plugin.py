"""The pytest plugin, tested with pytester on generated projects. Expected figures come from
the engine (`faultsim.explore`) run here, never written down by hand."""
from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tomllib
import xml.etree.ElementTree as ET
from importlib.metadata import entry_points

import pytest

import faultsim
from faultsim.killpoints import categories as count_categories

from conftest import DATA, ROOT

# a few categories keep the projects small: 22 kill points of tiny.toml
CATS = ("after-effect", "after-B", "checkpoint-rename")


def make_project(pytester, agent: str = "reference_agent", scenario: str = "tiny.toml",
                 crashes: int = 1, categories=CATS, name: str = "test_agent") -> None:
    pytester.makeini("[pytest]\n")  # the project's own rootdir, as in a real project
    shutil.copy(DATA / scenario, pytester.path / scenario)
    pytester.makepyfile(**{name: f"""
        import faultsim
        from {agent} import make_agent

        @faultsim.parametrize(make_agent, "{scenario}", crashes={crashes},
                              categories={tuple(categories)!r})
        def test_agent(crash_safety):
            crash_safety.check()
        """})


# The pytest plugins of other packages this environment installs (langsmith's comes with
# a framework extra, hypothesis's with hypothesis), which no test here is about: together
# they cost each child session 1.2 s of CPU to import (an empty session: 1.74 s with them,
# 0.50 s without), and this file starts about thirty. faultsim's plugin needs neither (its
# engine imports hypothesis as a library where it searches); `-p no:NAME` is harmless where
# a plugin is not installed. The tests of what the plugin itself loads
# (test_the_plugin_is_registered_and_light, test_a_session_without_faultsim_tests_does_
# not_load_the_engine) keep every plugin.
OTHER_PLUGINS = ("-p", "no:langsmith_plugin", "-p", "no:hypothesispytest")


def run(pytester, *args):
    """pytest in a child process: in-process runs would unload, between runs, the modules
    they imported (pyfakefs's among them) while pyfakefs still caches them."""
    return pytester.runpytest_subprocess("-p", "no:cacheprovider", *OTHER_PLUGINS, *args)


# The session's shared results (tests/shared_runs.py): `engine_verdicts` of the same
# arguments (a deterministic sweep: two tests ask for save_b_only's) is computed once per
# session, whichever xdist worker asks first
_SHARED = None


@pytest.fixture(autouse=True)
def _shared_verdicts(shared_cache, monkeypatch):
    monkeypatch.setattr(sys.modules[__name__], "_SHARED", shared_cache)


def engine_verdicts(agent: str, scenario: str = "tiny.toml", crashes: int = 1,
                    categories=CATS, each: bool = False) -> dict[str, bool]:
    """Kill point id -> ok, as `faultsim.explore` judges it (one explore per point when
    `each`: then a pair counts for every first crash it starts from)."""
    if _SHARED is None:
        return _engine_verdicts(agent, scenario, crashes, categories, each)
    scenario_bytes = (DATA / scenario).read_bytes()
    key = f"engine_verdicts\n{agent}\n{scenario}\n{scenario_bytes!r}\n{crashes}\n" \
          f"{tuple(categories)!r}\n{each}"
    return _SHARED.get(key, lambda: _engine_verdicts(agent, scenario, crashes, categories,
                                                     each))


def engine_run(agent: str, scenario: str = "tiny.toml", crashes: int = 1, categories=CATS):
    """The engine's run of `agent` on the kill points of `categories` (`faultsim.explore`,
    in this process), made once per session (the run `engine_verdicts` reads)."""
    def run():
        report = faultsim.explore(faultsim.load_factory(agent),
                                  faultsim.load_scenario(DATA / scenario), crashes=crashes,
                                  workers=0, only=lambda p: p.category in categories)
        return report.runs[0]

    if _SHARED is None:
        return run()
    scenario_bytes = (DATA / scenario).read_bytes()
    return _SHARED.get(f"engine_run\n{agent}\n{scenario}\n{scenario_bytes!r}\n{crashes}\n"
                       f"{tuple(categories)!r}", run)


def _engine_verdicts(agent: str, scenario: str, crashes: int, categories,
                     each: bool) -> dict[str, bool]:
    make_agent = faultsim.load_factory(agent)
    scen = faultsim.load_scenario(DATA / scenario)
    if not each:
        run = engine_run(agent, scenario, crashes, categories)
        bad = {v.kill_point.id for v in run.failures}
        return {p.id: p.id not in bad for p in run.explored}
    points = [p for p in faultsim.explore(make_agent, scen, crashes=1, workers=0,
                                          only=lambda p: False).runs[0].kill_points
              if p.category in categories]
    return {p.id: faultsim.explore(make_agent, scen, crashes=crashes, workers=0,
                                   only=lambda q, p=p: q.id == p.id).ok for p in points}


def outcomes(result) -> dict[str, str]:
    """Item id -> PASSED/FAILED/SKIPPED/ERROR, from `-rA`'s short summary."""
    found = {}
    for line in result.outlines:
        m = re.match(r"(PASSED|FAILED|SKIPPED|ERROR) \S+?::test_agent\[([^\]]+)\]", line)
        if m:
            found[m.group(2)] = m.group(1)
    return found


def summary(result) -> list[str]:
    lines = result.outlines
    start = next(i for i, line in enumerate(lines) if re.match(r"=+ faultsim", line))
    end = next(i for i in range(start + 1, len(lines)) if lines[i].startswith("="))
    return lines[start + 1:end]


# -- registration ----------------------------------------------------------------------------
def test_the_plugin_is_registered_and_light():
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "entry-points"]["pytest11"]
    assert declared == {"faultsim": "faultsim.pytest.plugin"}
    installed = [e for e in entry_points(group="pytest11") if e.name == "faultsim"]
    assert [e.value for e in installed] == ["faultsim.pytest.plugin"]
    import faultsim.pytest.plugin

    assert installed[0].load() is faultsim.pytest.plugin
    heavy = ("anthropic", "faultsim.inprocess.explore", "pyfakefs", "hypothesis", "freezegun", "httpx2")
    out = subprocess.run([sys.executable, "-c", "import sys, faultsim.pytest.plugin, faultsim; "
                          f"print([m for m in {heavy!r} if m in sys.modules])"],
                         capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_a_session_without_faultsim_tests_does_not_load_the_engine(pytester):
    pytester.makepyfile("""
        import sys

        def test_plain():
            assert "faultsim.pytest.plugin" in sys.modules  # loaded by its entry point ...
            assert "faultsim.inprocess.explore" not in sys.modules  # ... and nothing heavy
            assert "anthropic" not in sys.modules
        """)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    assert not any(re.match(r"=+ faultsim", line) for line in result.outlines)  # no summary


def test_options_in_help(pytester):
    result = run(pytester, "--help")
    for option in ("--faultsim-seed", "--faultsim-crash-model", "--faultsim-crashes",
                   "--faultsim-budget", "--faultsim-shard", "--faultsim-record"):
        assert option in result.stdout.str()


# -- kill points as items ----------------------------------------------------------------
def test_a_passing_agent_gives_one_passing_item_per_kill_point(pytester):
    expected = engine_verdicts("reference_agent")
    assert len(expected) == 22 and all(expected.values())
    make_project(pytester)
    result = run(pytester, "-rA")
    result.assert_outcomes(passed=len(expected))
    assert outcomes(result) == {p: "PASSED" for p in expected}
    effect = next(p for p in expected if "-after-effect-payments.submit" in p)
    assert f"test_agent.py::test_agent[{effect}] PASSED" in \
        run(pytester, "-v", "-k", "payments").stdout.str()
    lines = summary(result)
    engine = engine_run("reference_agent")  # the run `expected` was read from
    cats = ", ".join(f"{c} {n}" for c, n in count_categories(engine.explored).items() if n)
    assert lines[0].startswith("test_agent.py::test_agent · tiny · reference_agent")
    assert lines[1].split() == (f"process {len(expected)}/{len(engine.kill_points)} kill "
                                f"points ({cats})").split()
    assert lines[2].split()[:7] == (f"{len(engine.verdicts)} crash states: "
                                    f"{len(engine.verdicts)} ok, 0 violate").split()
    assert lines[-1] == "violations: none"


def test_a_failing_agent_fails_exactly_the_kill_points_the_engine_condemns(pytester):
    agent = "reference_agent.mutants.save_b_only"
    expected = engine_verdicts(agent)
    failing = sorted(p for p, ok in expected.items() if not ok)
    assert failing and len(failing) < len(expected)  # a mix, or the test proves little
    make_project(pytester, agent=agent)
    result = run(pytester, "-rA")
    result.assert_outcomes(passed=len(expected) - len(failing), failed=len(failing))
    assert outcomes(result) == {p: "PASSED" if ok else "FAILED" for p, ok in expected.items()}
    text = result.stdout.str()
    # a plain assertion failure carrying the counterexample, without faultsim's frames
    assert "E       AssertionError: faultsim: 1 crash state violates the protocol at " \
           f"kill point {failing[0]}" in text
    assert "VIOLATED effects_exactly_once" in text
    assert f"rerun this test alone: pytest 'test_agent.py::test_agent[{failing[0]}]'" in text
    for internal in ("faultsim/pytest/", "faultsim/inprocess/", "faultsim/backends.py"):
        assert internal not in text
    lines = summary(result)
    assert f"violations: {len(failing)} crash states; the first of each kind per test, " \
           "with the commands that rerun and replay it" in lines
    tokens = re.findall(r"faultsim replay (fs1_\S+)", "\n".join(lines))
    assert len(tokens) == min(len(failing), 20)
    assert not faultsim.replay(tokens[0]).ok  # the printed command reproduces it


def test_a_baseline_fails_only_the_crash_states_a_change_adds_and_names_them(pytester):
    """--faultsim-baseline: states that fail in the baseline report too pass; a state the
    baseline passed fails, named by its identity."""
    import json

    agent, cats = "reference_agent.mutants.save_b_only", ("after-effect",)  # a few items
    report = faultsim.explore(faultsim.load_factory(agent), faultsim.load_scenario(
        DATA / "tiny.toml"), crashes=1, workers=0,
        only=lambda p: p.category in cats).to_json()
    states = report["runs"][0]["states"]
    failing = [s for s in states if s[2] not in ("passed", "escalated")]
    assert len(failing) >= 2
    new = failing[0]
    new[2] = "passed"  # the baseline passed this one: the change broke it
    make_project(pytester, agent=agent, categories=cats)
    (pytester.path / "base.json").write_text(json.dumps(report))
    result = run(pytester, "-rA", "--faultsim-baseline", "base.json")
    result.assert_outcomes(passed=len(states) - 1, failed=1)
    assert outcomes(result)[new[1]] == "FAILED"
    assert f"this run adds 1 failing crash state over the baseline base.json: {new[0]} " \
           f"({new[1]}: " in result.stdout.str()


def test_items_explore_pairs_from_their_kill_point(pytester):
    """`repeat_before_save` survives every single crash; some first crashes start a failing
    pair. Each item fails exactly when `explore`, asked about that first crash alone, does."""
    agent = "reference_agent.mutants.repeat_before_save"
    cats = ("between-A-and-tool", "in-tool")
    singles = engine_verdicts(agent, "pair.toml", crashes=1, categories=cats)
    assert all(singles.values())
    expected = engine_verdicts(agent, "pair.toml", crashes=2, categories=cats, each=True)
    assert 0 < sum(not ok for ok in expected.values()) < len(expected)
    make_project(pytester, agent=agent, scenario="pair.toml", crashes=2, categories=cats)
    result = run(pytester, "-rA")
    assert outcomes(result) == {p: "PASSED" if ok else "FAILED" for p, ok in expected.items()}
    text = result.stdout.str()
    assert "schedule of 2 crashes:" in text and "crash 2, in resumed run 1:" in text
    assert re.search(r"2 crashes: \d+ schedules, \d+ explored, \d+ resumed, [1-9]\d* "
                     "violate", "\n".join(summary(result)))


def _junit_items(path) -> dict[str, tuple]:
    items = {}
    for case in ET.parse(path).getroot().iter("testcase"):
        outcome = "failed" if case.find("failure") is not None else \
            "skipped" if case.find("skipped") is not None else "passed"
        entry = None
        for prop in case.iter("property"):
            if prop.get("name") == "faultsim":
                import json

                entry = json.loads(prop.get("value"))
                for model in entry["models"].values():
                    # what it cost depends on what else the process judged before
                    del model["seconds"], model["resumed"]
                    if model["pairs"]:
                        del model["pairs"]["explored"], model["pairs"]["resumed"]
        items[case.get("name")] = (outcome, repr(entry))
    return items


def test_xdist_explores_exactly_the_kill_points_of_a_serial_run(pytester):
    pytest.importorskip("xdist")
    make_project(pytester, agent="reference_agent.mutants.save_b_only")
    serial = run(pytester, "--junitxml=serial.xml")
    spread = run(pytester, "-n", "2",
                                "--junitxml=spread.xml")
    assert "2 workers" in spread.stdout.str()
    a, b = _junit_items(pytester.path / "serial.xml"), _junit_items(pytester.path / "spread.xml")
    assert len(a) == len(engine_verdicts("reference_agent.mutants.save_b_only")) and a == b
    assert any(outcome == "failed" for outcome, _ in a.values())
    def costless(lines):
        return [re.sub(r" \(\d+ resumed\)", "", line) for line in lines]

    assert costless(summary(serial)) == costless(summary(spread))


def test_shards_partition_the_kill_points(pytester):
    make_project(pytester, categories=faultsim.CATEGORIES)

    def collected(*args) -> set[str]:
        result = run(pytester, "--collect-only", "-q", *args)
        return {line.split("[", 1)[1][:-1] for line in result.outlines
                if line.startswith("test_agent.py::")}

    everything = collected()
    assert len(everything) == 315
    shards = [collected(f"--faultsim-shard={i}/3") for i in (1, 2, 3)]
    assert set().union(*shards) == everything
    assert all(not (shards[i] & shards[j]) for i in range(3) for j in range(i + 1, 3))
    assert all(100 <= len(s) <= 110 for s in shards)  # and balanced


def test_whole_scenario_tests_shard_their_crash_states(pytester):
    # A whole-scenario test crashes at every kill point in each shard and resumes the
    # crash states its shard owns (as `faultsim run --shard`): together, every state once.
    pytester.makeini("[pytest]\n")
    shutil.copy(DATA / "tiny.toml", pytester.path / "tiny.toml")
    pytester.makepyfile(test_whole="""
        import pytest
        from reference_agent import make_agent

        @pytest.mark.faultsim("tiny.toml", agent=make_agent, crashes=1)
        def test_whole(crash_safety):
            report = crash_safety.check()
            print("STATES", sorted((v.kill_point.id, v.order) for v in report.runs[0].verdicts))
            print("RESUMED", report.runs[0].judged)
        """)
    seen, resumed = [], []
    for i in (1, 2, 3):
        result = run(pytester, "-s", f"--faultsim-shard={i}/3")
        result.assert_outcomes(passed=1)
        seen.append(set(eval(re.search(r"STATES (\[.*?\])", result.stdout.str())[1])))
        resumed.append(int(re.search(r"RESUMED (\d+)", result.stdout.str())[1]))
        assert re.search(r"process +315/315 kill points", result.stdout.str())
        assert f"faultsim (shard {i}/3)" in result.stdout.str()
    assert all(seen) and not (seen[0] & seen[1] or seen[0] & seen[2] or seen[1] & seen[2])
    assert len(seen[0] | seen[1] | seen[2]) == 315  # one process crash state a kill point
    assert all(resumed) and sum(resumed) < 315  # the equal-state memo kept in every shard


def test_a_budget_skips_what_it_cannot_explore(pytester):
    make_project(pytester)
    result = run(pytester, "-rA", "--faultsim-budget=0.3")
    counts = result.parseoutcomes()
    skipped = counts.get("skipped", 0)
    # warnings aside: another package's (langsmith's pytest plugin warns on 3.14)
    assert skipped >= 1 and counts.get("passed", 0) + skipped == 22
    assert set(counts) - {"warnings"} == {"passed", "skipped"}, counts
    assert "the budget of 0.3 s is spent" in result.stdout.str()
    assert f"budget   {skipped} kill points skipped" in "\n".join(summary(result))


def test_options_reach_the_fixture(pytester):
    pytester.makeini("[pytest]\n")
    shutil.copy(DATA / "tiny.toml", pytester.path / "tiny.toml")
    pytester.makepyfile(test_opts="""
        import pytest
        from reference_agent import make_agent

        @pytest.mark.faultsim("tiny.toml", agent=make_agent, crash_model="process")
        def test_opts(crash_safety):
            print("SETTINGS", crash_safety.settings.crash_model, crash_safety.settings.crashes,
                  crash_safety.settings.seed, crash_safety.record, crash_safety.kill_point)
        """)
    result = run(pytester, "-s", "--faultsim-crash-model=all",
                                "--faultsim-crashes=1", "--faultsim-seed=7",
                                "--faultsim-record")
    result.assert_outcomes(passed=1)
    assert "SETTINGS all 1 7 True None" in result.stdout.str()


def test_the_scenarios_fault_profile_sits_between_the_marker_and_the_defaults(pytester):
    pytester.makeini("[pytest]\n")
    text = (DATA / "tiny.toml").read_text()
    (pytester.path / "tiny.toml").write_text(
        text + '\n[fault_profile]\ncrash_models = ["power"]\ncrashes = 1\n')
    pytester.makepyfile(test_profile="""
        import pytest
        from reference_agent import make_agent

        @pytest.mark.faultsim("tiny.toml", agent=make_agent)
        def test_from_profile(crash_safety):
            print("SETTINGS", crash_safety.settings.crash_model, crash_safety.settings.crashes)

        @pytest.mark.faultsim("tiny.toml", agent=make_agent, crashes=2)
        def test_marker_wins(crash_safety):
            print("SETTINGS", crash_safety.settings.crash_model, crash_safety.settings.crashes)
        """)
    out = run(pytester, "-s").stdout.str()
    assert "SETTINGS power 1" in out and "SETTINGS power 2" in out
    out = run(pytester, "-s", "--faultsim-crash-model=process").stdout.str()
    assert "SETTINGS process 1" in out and "SETTINGS process 2" in out


# -- what goes wrong is said plainly -------------------------------------------------------
def test_a_bad_shard_is_a_usage_error(pytester):
    result = run(pytester, "--faultsim-shard=3/2")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "--faultsim-shard=3/2: expected I/N with 1 <= I <= N" in result.stderr.str()


def test_mistakes_in_a_project_are_one_line_each(pytester):
    pytester.makeini("[pytest]\n")
    shutil.copy(DATA / "tiny.toml", pytester.path / "tiny.toml")
    pytester.makepyfile(
        agents="""
            def broken(env):
                raise RuntimeError("no config file")
            """,
        test_bad="""
            import pytest
            import faultsim
            from agents import broken
            from reference_agent import make_agent

            @faultsim.parametrize(broken, "tiny.toml")
            def test_broken_agent(crash_safety):
                crash_safety.check()

            @faultsim.parametrize(make_agent, "nope.toml")
            def test_missing_scenario(crash_safety):
                crash_safety.check()

            @pytest.mark.faultsim("tiny.toml", agent=make_agent, crashs=1)
            def test_typo(crash_safety):
                crash_safety.check()

            @faultsim.parametrize(make_agent, "tiny.toml", crashes=1,
                                  categories=("after-B",))
            def test_lazy(crash_safety):
                pass
            """)
    result = run(pytester, "-rA")
    text = result.stdout.str()
    assert "test_broken_agent[clean-run]" in text
    assert "the agent fails without any crash: RuntimeError: no config file" in text
    assert "scenario 'nope.toml' not found" in text
    assert "unknown setting(s) crashs" in text
    assert "explored nothing: a kill-point item must call crash_safety.check()" in text
    result.assert_outcomes(failed=7)  # 1 + 1 + 1 + the 4 lazy after-B items
    # the broken agent's own traceback is shown (as pytest shows a test's), never faultsim's
    assert "agents.py\", line 2, in broken" in text
    assert "faultsim/inprocess/explore.py" not in text and "faultsim/inprocess" not in text


def test_the_old_fixture_name_still_works_and_warns(pytester):
    pytester.makeini("[pytest]\n")
    shutil.copy(DATA / "tiny.toml", pytester.path / "tiny.toml")
    pytester.makepyfile(test_old="""
        import pytest
        from reference_agent import make_agent

        @pytest.mark.faultsim("tiny.toml", agent=make_agent, crashes=1,
                              categories=("after-B",))
        def test_old(faultsim):
            report = faultsim.check()
            assert report.runs and report.runs[0].verdicts
        """)
    result = run(pytester, "-W", "always::DeprecationWarning")
    result.assert_outcomes(passed=1)
    assert "the `faultsim` fixture is now `crash_safety`" in result.stdout.str()


def test_ini_keys_set_a_projects_defaults_and_the_header_says_so(pytester):
    pytester.makeini("[pytest]\nfaultsim_crashes = 1\nfaultsim_seed = 7\n"
                     "faultsim_crash_model = all\n")
    shutil.copy(DATA / "tiny.toml", pytester.path / "tiny.toml")
    pytester.makepyfile(test_ini="""
        import pytest
        from reference_agent import make_agent

        @pytest.mark.faultsim("tiny.toml", agent=make_agent)
        def test_ini(crash_safety):
            s = crash_safety.settings
            print("SETTINGS", s.crash_model, s.crashes, s.seed)
        """)
    result = run(pytester, "-s")
    result.assert_outcomes(passed=1)
    out = result.stdout.str()
    assert "SETTINGS all 1 7" in out
    from faultsim import __version__
    assert f"faultsim {__version__}: seed=7, crash-model=all, crashes=1" in out
    # the command line wins over the ini file
    result = run(pytester, "-s", "--faultsim-crashes=2")
    assert "SETTINGS all 2 7" in result.stdout.str()
    pytester.makeini("[pytest]\nfaultsim_crashes = many\n")
    result = run(pytester)
    assert "faultsim_crashes = many: expected a number" in result.stderr.str()


def test_the_plugin_reads_tool_faultsim_under_ini_keys_and_flags(pytester):
    # [tool.faultsim] (faultsim.settings.config, as `faultsim run` reads it) gives all three; the ini
    # key overrides its seed, the flag its crashes
    pytester.makepyprojecttoml("[tool.pytest.ini_options]\nfaultsim_seed = 9\n\n"
                               "[tool.faultsim]\ncrash_model = \"power\"\ncrashes = 1\n"
                               "seed = \"5\"\n")
    shutil.copy(DATA / "tiny.toml", pytester.path / "tiny.toml")
    pytester.makepyfile(test_project="""
        import pytest
        from reference_agent import make_agent

        @pytest.mark.faultsim("tiny.toml", agent=make_agent)
        def test_project(crash_safety):
            s = crash_safety.settings
            print("SETTINGS", s.crash_model, s.crashes, s.seed)
        """)
    result = run(pytester, "-s", "--faultsim-crashes=2")
    result.assert_outcomes(passed=1)
    assert "SETTINGS power 2 9" in result.stdout.str()


class _Config:
    """What read_options asks of a pytest config: options, ini keys, the rootdir."""

    def __init__(self, root, options=(), ini=()):
        self.rootpath, self.options, self.ini = root, dict(options), dict(ini)

    def getoption(self, key):
        return self.options.get(key, False if key == "faultsim_record" else None)

    def getini(self, key):
        return self.ini.get(key)


def test_a_bad_project_setting_is_named_where_it_was_given(tmp_path, monkeypatch):
    from faultsim.pytest.settings import FaultsimUsageError, read_options

    for name in ("FAULTSIM_SEED", "FAULTSIM_CRASHES", "FAULTSIM_CRASH_MODEL"):
        monkeypatch.delenv(name, raising=False)
    (tmp_path / "pyproject.toml").write_text('[tool.faultsim]\ncrashes = 0\n'
                                             'crash_model = "both"\n')
    with pytest.raises(FaultsimUsageError, match=r"^pyproject.toml: \[tool.faultsim\] "
                       r"crash_model = 'both': expected process, power, pause or all$"):
        monkeypatch.chdir(tmp_path)
        read_options(_Config(tmp_path))
    # a flag and an ini key override them, and are named when they are wrong
    ok = read_options(_Config(tmp_path, {"faultsim_crash_model": "all"},
                              {"faultsim_crashes": "3"}))
    assert (ok.crash_model, ok.crashes) == ("all", 3)
    with pytest.raises(FaultsimUsageError, match=r"^faultsim_crashes = 0: expected an "
                       r"integer >= 1$"):
        read_options(_Config(tmp_path, {"faultsim_crash_model": "all"},
                             {"faultsim_crashes": "0"}))
    monkeypatch.setenv("FAULTSIM_CRASHES", "2")  # the environment over pyproject.toml
    with pytest.raises(FaultsimUsageError, match="^pyproject.toml: .*crash_model"):
        read_options(_Config(tmp_path))
    assert read_options(_Config(tmp_path, {"faultsim_crash_model": "power"})).crashes == 2


def test_xdist_workers_share_one_runs_clean_runs(pytester):
    # collection runs the two clean runs of the flake guard; under xdist, once per run. The
    # factory counts itself with a datagram to this test's loopback socket (files are the
    # sandbox's), which the scenario allows
    import socket

    counter = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    counter.bind(("127.0.0.1", 0))
    port = counter.getsockname()[1]
    pytester.makeini("[pytest]\n")
    (pytester.path / "tiny.toml").write_text(
        (DATA / "tiny.toml").read_text() + f'\n[sandbox]\nallow = ["127.0.0.1:{port}"]\n')
    pytester.makepyfile(test_shared=f"""
        import socket
        import faultsim
        from reference_agent import make_agent as _make

        def make_agent(env):
            socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b"x", ("127.0.0.1", {port}))
            return _make(env)

        @faultsim.parametrize(make_agent, "tiny.toml", crashes=1, categories=("after-B",))
        def test_agent(crash_safety):
            pass
        """)
    result = run(pytester, "-n", "2", "-q")  # (the items explore nothing: they fail)
    assert "gw1" in result.stdout.str() or "2 workers" in result.stdout.str(), \
        result.stdout.str()[-1000:]
    counter.settimeout(0.5)
    seen = 0
    try:
        while True:
            counter.recv(16)
            seen += 1
    except socket.timeout:
        pass
    finally:
        counter.close()
    assert seen == 2  # the two clean runs, in one worker; not two per worker


def test_the_rerun_line_carries_the_sessions_faultsim_settings(pytester):
    """"rerun this test alone" once said `pytest 'ID'`: without the --faultsim-* settings
    the failure was found with (here a seed and a crash model from the command line, the
    crash count from an ini key) a rerun explores another run. The line and the summary
    now carry them (a second session to run the line would double the test's time: the
    replay token the failure printed shows the settings it ran with)."""
    import shlex

    make_project(pytester, agent="reference_agent.mutants.save_b_only",
                 categories=("after-effect",))
    pytester.makeini("[pytest]\nfaultsim_crashes = 1\n")
    result = run(pytester, "--faultsim-seed=7", "--faultsim-crash-model=process",
                 "-k", "payments")  # one item: kept cheap
    result.assert_outcomes(failed=1)
    text = result.stdout.str()
    found = re.search(r"rerun this test alone: (pytest .+)$", text, re.M)
    assert found, text[-3000:]
    command = found[1]
    words = shlex.split(command)
    assert words[:-1] == ["pytest", "--faultsim-seed=7", "--faultsim-crash-model=process",
                          "--faultsim-crashes=1"]
    assert words[-1].startswith("test_agent.py::test_agent[")
    assert f"  {command}" in summary(result)
    # the failure's replay token carries the same seed and crash model
    token = re.findall(r"faultsim replay (fs1_\S+)", text[:found.start()])[-1]
    from faultsim.token import ReplayToken

    decoded = ReplayToken.decode(token)
    assert (decoded.seed, decoded.crash_model) == ("7", "process")
