"""`faultsim run --ray`: the shards of a sweep as Ray tasks on a local cluster (num_cpus=2),
merged into exactly the unsharded run's report (timings aside), and no Ray process left
behind. Needs the `ray` extra (`pip install 'faultsim[ray]'`): skipped without it."""
from __future__ import annotations

import json
import os
import sys

import pytest

from faultsim.errors import UsageError
from faultsim.pipeline.ray_shards import check_address, shard_args

from conftest import ROOT

# other packages' pytest plugins, not loaded in the generated projects' sessions (1.2 s of
# CPU each; why that is sound: tests/test_plugin.py's OTHER_PLUGINS)
OTHER_PLUGINS = ("-p", "no:langsmith_plugin", "-p", "no:hypothesispytest")

TINY = str(ROOT / "tests" / "data" / "tiny.toml")
PAIR = str(ROOT / "tests" / "data" / "pair.toml")
MUTANT = "reference_agent.mutants.save_b_only"


def _strip(report: dict) -> dict:
    sys.path.insert(0, str(ROOT / "bench"))
    from same_json import strip

    return strip(report)  # timings and how the work was done aside; resumed counts kept


TAG = "FAULTSIM_RAY_TEST"  # in a test's environment: its clusters' processes inherit it


def _tagged(monkeypatch) -> str:
    import uuid

    tag = uuid.uuid4().hex
    monkeypatch.setenv(TAG, tag)
    return tag


def _processes(tag: str, *names: str) -> list[str]:
    """The processes whose command line names one of `names` and whose environment carries
    this test's tag: its own clusters' and shards', not another test's (xdist) or
    program's, and found after their parent is gone too."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
            if not any(n in cmd for n in names):
                continue
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = f.read().split(b"\0")
        except OSError:
            continue
        if f"{TAG}={tag}".encode() in env:
            found.append(f"{pid} {cmd}")
    return found


def _each_forked(found: list[str]) -> bool:
    """Whether each shard among `found` (`_processes` lines) has forked a crash run: its
    command line twice or more."""
    import collections
    import re

    per = collections.Counter(m[1] for line in found
                              if (m := re.search(r"--shard (\d+/\d+)", line)))
    return len(per) >= 2 and all(n >= 2 for n in per.values())


def _ray_processes(tag: str) -> list[str]:
    """Ray's own daemons (raylet, gcs_server) of this test's clusters."""
    return _processes(tag, "raylet", "gcs_server")


def test_driver_flags_are_not_handed_to_a_shard():
    argv = [TINY, "--ray", "--crashes", "1", "--json", "a.json", "--html=a.html",
            "--workers", "2", "--baseline", "b.json", "--no-annotations", "--seed", "3"]
    assert shard_args(argv, "") == [TINY, "--crashes", "1", "--seed", "3"]
    assert shard_args(["--ray", "10.0.0.1:6379", TINY], "10.0.0.1:6379") == [TINY]
    assert shard_args(["--ray=auto", TINY], "auto") == [TINY]


def test_an_address_is_checked_in_one_line():
    assert check_address("") is None  # a local cluster
    assert check_address("head.example:6379") == "head.example:6379"
    assert check_address("ray://10.0.0.1:10001") == "ray://10.0.0.1:10001"
    assert check_address("auto") == "auto"
    with pytest.raises(UsageError, match=r"--ray tests/data/tiny.toml: expected HOST:PORT"):
        check_address("tests/data/tiny.toml")  # a scenario taken for the address


def test_the_ray_page_commands_parse():
    """docs/how-to/ray.md's commands are `faultsim run`'s own: each parses, its --ray value
    is an address or the local cluster, and what reaches a shard is the rest."""
    import re
    import shlex

    from faultsim.cli import build_parser

    page = (ROOT / "docs" / "how-to" / "ray.md").read_text()
    marker = "<!-- docs: checked-by tests/test_ray.py::test_the_ray_page_commands_parse -->"
    blocks = re.findall(re.escape(marker) + r"\n```console\n(.*?)```", page, re.S)
    lines = [line[2:] for b in blocks for line in b.splitlines() if line.startswith("$ ")]
    assert len(blocks) == 2 and len(lines) == 3
    for line in lines:
        argv = shlex.split(line)
        assert argv[:2] == ["faultsim", "run"]
        ns = build_parser().parse_args(argv[1:])
        check_address(ns.ray)  # no scenario taken for the address
        rest = shard_args(argv[2:], ns.ray)
        assert "--ray" not in rest and "--json" not in rest and rest[0].startswith("scenarios/")


def test_what_ray_cannot_do_is_refused_before_any_work(tmp_path, capsys):
    from faultsim.cli import main

    assert main(["run", "--ray", TINY]) == 2  # the scenario taken for the address
    assert "--ray " + TINY + ": expected HOST:PORT" in capsys.readouterr().err
    assert main(["run", TINY, "--shard", "1/2", "--ray"]) == 2
    assert "--ray runs every shard itself" in capsys.readouterr().err
    assert main(["run", TINY, "--ray-shards", "0", "--ray"]) == 2
    assert main(["run", TINY, "--ray", "head:6379", "--workers", "2"]) == 2
    assert "a running cluster has its own" in capsys.readouterr().err


def test_the_pytest_options_are_checked_in_one_line(pytester):
    pytester.makeini("[pytest]\n")
    pytester.makepyfile(test_x="def test_x():\n    pass\n")
    for args, said in ((["--faultsim-ray=tiny.toml"], "--faultsim-ray tiny.toml: expected"),
                       (["--faultsim-ray", "--faultsim-shard=1/2"], "with --faultsim-ray"),
                       (["--faultsim-ray-shards=0"], "expected an integer >= 1")):
        result = pytester.runpytest_subprocess("-p", "no:cacheprovider", *OTHER_PLUGINS,
                                               *args)
        assert result.ret == pytest.ExitCode.USAGE_ERROR and said in result.stderr.str()


def test_without_ray_the_flag_says_how_to_install_it(monkeypatch):
    from faultsim.pipeline.ray_shards import RayMissing, run_shards

    monkeypatch.setitem(sys.modules, "ray", None)  # import ray fails
    with pytest.raises(RayMissing, match=r"pip install 'faultsim\[ray\]'"):
        run_shards([TINY], address=None, shards=2)


needs_ray = pytest.mark.skipif(
    __import__("importlib").util.find_spec("ray") is None,
    reason="Ray is not installed (pip install 'faultsim[ray]'): the Ray tests need it")


def _every_nth_point(agent: str, n: int) -> list[str]:
    """Every n-th kill point of tiny.toml for `agent` (its clean runs only, no crash).

    Why the Ray tests sweep a stretch, not all of tiny: what they test is the driver's
    (the arguments a shard gets, the merge, the cluster's end), and a shard gets
    `--kill-point` as it gets every other flag (shard_args keeps it); the shards split the
    stretch's crash states as they split the whole run's (faultsim.inprocess.sharding
    hashes a state, not its kill point's place). That the shards of a whole sweep add up
    to it is tests/test_shards.py's. Every 6th keeps both crash models, kill points of
    every turn and the mutant's failures, at a sixth of the crash runs. (Not in the test
    of a failing shard: its two shards of one crash model cost less than this survey's
    import of the engine into its process, measured.)"""
    import faultsim

    run = faultsim.explore(faultsim.load_factory(agent), faultsim.load_scenario(TINY),
                           crashes=1, workers=0, only=lambda p: False).runs[0]
    return [p.id for p in run.kill_points][::n]


@needs_ray
def test_ray_shards_merge_into_the_unsharded_report(tmp_path, capsys, monkeypatch):
    """The reference agent (exit 0) and a mutant (exit 1), each run whole, then on Ray. One
    local cluster serves both Ray runs (its start costs more than a shard of tiny): it is
    started as `--ray` starts its own (ray_shards.cluster, num_cpus=2), and a run inside a
    driver's Ray session uses that session, as in a notebook. That `--ray`'s own local
    cluster is gone with the run is checked by
    test_the_local_cluster_leaves_no_process_even_when_a_shard_fails and
    test_ctrl_c_ends_the_local_cluster_and_every_shard; here, that this one is."""
    from faultsim.cli import main
    from faultsim.pipeline.ray_shards import cluster

    tag = _tagged(monkeypatch)
    cases = (("reference_agent", 0), (MUTANT, 1))
    points = {agent: _every_nth_point(agent, 6) for agent, _ in cases}
    base = lambda agent: ["run", TINY, "--agent", agent, "--crash-model", "all",  # noqa: E731
                          "--crashes", "1", "--kill-point", *points[agent]]
    said = {}
    for n, (agent, code) in enumerate(cases):  # before the cluster: a sweep forks
        assert main(base(agent) + ["--workers", "1", "--json", str(tmp_path / f"w{n}.json")]
                    ) == code
        said[agent] = capsys.readouterr().out
    with cluster(None, 2) as (ray, _):
        assert _ray_processes(tag)  # the runs below are this cluster's: the check can fail
        # its workers (and so the shards' sweeps) at the driver's niceness, not Ray's 15
        # (a lambda: Ray sends it by value, and a worker cannot import this module)
        niceness = ray.remote(num_cpus=1)(lambda: os.nice(0))
        assert ray.get(niceness.remote()) == os.nice(0)
        for n, (agent, code) in enumerate(cases):
            merged = tmp_path / f"r{n}.json"
            assert main(base(agent) + ["--ray", "--workers", "2", "--json", str(merged)]
                        ) == code
            out = capsys.readouterr().out
            assert "faultsim: shard 1/2 on" in out and "faultsim: shard 2/2 on" in out
            whole_ = json.loads((tmp_path / f"w{n}.json").read_text())
            merged_ = json.loads(merged.read_text())
            run = merged_["runs"][0]
            # every state, once: the stretch (every 6th kill point) reached both shards
            assert run["shard"] is None and \
                run["crash_states"] == whole_["runs"][0]["crash_states"] and \
                run["kill_points_explored"] == len(points[agent])
            assert _strip(merged_) == _strip(whole_)  # verdicts, counts, map, examples
            if code:  # the finding is there, as in the whole run, the same counterexamples
                assert any(r["violating"] for r in merged_["runs"])
                texts = [c["text"] for r in whole_["runs"] for c in r["counterexamples"]]
                shown = [t for t in texts if t in out]
                assert len(shown) == min(3, len(texts)) > 0  # --examples' default
                assert shown == [t for t in texts if t in said[agent]]  # the whole run's
    assert _ray_processes(tag) == []  # the cluster is gone with the session


@needs_ray
def test_the_local_cluster_leaves_no_process_even_when_a_shard_fails(tmp_path, monkeypatch):
    from faultsim.pipeline.ray_shards import run_shards

    tag = _tagged(monkeypatch)

    seen: list[list[str]] = []
    merged, shards = run_shards([TINY, "--crash-model", "process", "--crashes", "1",
                                 "--workers", "1"], address=None, shards=2, num_cpus=2,
                                say=lambda line: seen.append(_ray_processes(tag)))
    # while the shards ran, the cluster's raylet and GCS were there: the check can fail
    assert seen and all(len(s) >= 2 for s in seen)
    assert [s.index for s in shards] == [1, 2] and merged["runs"][0]["crash_states"] == 315
    assert _ray_processes(tag) == []
    # a shard whose faultsim run fails (no such agent): the same one-line error, exit 2's
    # kind, and the cluster still shut down
    with pytest.raises(UsageError, match=r"shard 1/2 .*exited 2: .*no_such_agent"):
        run_shards([TINY, "--agent", "no_such_agent", "--workers", "1"], address=None,
                   shards=2, num_cpus=2)
    assert _ray_processes(tag) == []


@needs_ray
def test_the_pytest_option_runs_whole_scenario_tests_on_ray(pytester, monkeypatch):
    import shutil
    import re

    import faultsim

    tag = _tagged(monkeypatch)  # the pytest run below inherits it

    pytester.makeini("[pytest]\n")
    # pair.toml, not tiny: a whole-scenario test sweeps every kill point (categories= is
    # refused with Ray), and pair's 187 and 168 are fewer than tiny's 315 and 273, with
    # the reference agent passing and the mutant failing as on tiny
    shutil.copy(PAIR, pytester.path / "pair.toml")
    pytester.makepyfile(test_whole=f"""
        import pytest
        import reference_agent
        from {MUTANT} import make_agent as broken

        @pytest.mark.faultsim("pair.toml", agent=reference_agent.make_agent, crashes=1)
        def test_clean(crash_safety):
            run = crash_safety.check().runs[0]
            print("CLEAN", len(run.verdicts), run.judged, run.shard)

        @pytest.mark.faultsim("pair.toml", agent=broken, crashes=1)
        def test_broken(crash_safety):
            run = crash_safety.explore().runs[0]
            print("BROKEN", len(run.verdicts), run.judged, len(run.failures))
            crash_safety.check()
        """)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", *OTHER_PLUGINS, "-s",
                                           "--faultsim-ray", "--faultsim-ray-shards", "2")
    result.assert_outcomes(passed=1, failed=1)
    out = result.stdout.str()
    assert "ray=local" in out  # the header says it
    expected = {}
    for name, agent in (("CLEAN", "reference_agent"), (("BROKEN", MUTANT))):
        run = faultsim.explore(faultsim.load_factory(agent), faultsim.load_scenario(PAIR),
                               crash_model="process", crashes=1, workers=1).runs[0]
        expected[name] = (len(run.verdicts), run.judged, len(run.failures))
    clean = re.search(r"CLEAN (\d+) (\d+) None", out)
    assert clean and (int(clean[1]), int(clean[2])) == expected["CLEAN"][:2]
    broken = re.search(r"BROKEN (\d+) (\d+) (\d+)", out)
    assert broken and tuple(map(int, broken.groups())) == expected["BROKEN"]
    assert expected["BROKEN"][2] > 0  # the mutant's failures, found through Ray
    assert "the protocol at" in out and "rerun this test alone" in out
    assert _ray_processes(tag) == []


def _sigint_default() -> None:
    """In the driver's child before exec: SIGINT's default action, whatever this process
    inherited. A shell without job control starts a background command (`pytest ... &`,
    a CI step's wrapper) with SIGINT ignored, an ignored signal stays ignored across exec,
    and Python then installs no KeyboardInterrupt: the driver ignored the Ctrl-C below and
    ran to the end (exit 0: seen under `nohup /usr/bin/time pytest ... &`)."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)


@needs_ray
@pytest.mark.skipif(sys.platform != "linux", reason="the parent-death signal is Linux's")
@pytest.mark.parametrize("signame", ["SIGINT", "SIGTERM"])  # Ctrl-C; `timeout`, a CI limit
def test_ctrl_c_ends_the_local_cluster_and_every_shard(tmp_path, monkeypatch, signame):
    import signal
    import subprocess
    import time

    # SIGTERM raised inside Ray's wait was made SystemExit(1) by Ray: exit 1, no report
    sig = getattr(signal, signame)

    tag = _tagged(monkeypatch)
    shards = lambda: _processes(tag, "--shard")  # noqa: E731 (the shards' faultsim runs)
    out = tmp_path / "report.json"
    driver = subprocess.Popen(
        # pairs: a shard's sweep takes far longer than the 10 s it is given to end below
        [sys.executable, "-m", "faultsim", "run", TINY, "--agent", "reference_agent",
         "--crash-model", "all", "--crashes", "2", "--ray", "--workers", "2",
         "--json", str(out)], cwd=tmp_path,
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, start_new_session=True,
        text=True, preexec_fn=_sigint_default)
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and len(shards()) < 2:
            time.sleep(0.2)
        # both shards were running (the check below can fail)
        assert len(shards()) >= 2 and _ray_processes(tag)  # (and their crash runs)
        # both into their sweeps: a shard forks its crash runs (same command line), while
        # one still in its clean runs has judged nothing to report (waiting for any third
        # process let one shard be cut in its clean runs: a cut shard with no run, seen
        # in CI once the sweeps got faster)
        while time.monotonic() < deadline and not _each_forked(shards()):
            time.sleep(0.2)
        time.sleep(1)
        driver.send_signal(sig)
        printed, _ = driver.communicate(timeout=180)  # a cut shard has 15 s to report
        assert driver.returncode == 128 + sig
    finally:
        if driver.poll() is None:
            driver.kill()
    # gone with the driver; the bound only keeps a failure from hanging (Ray's daemons
    # take a few seconds to end at a load of 15)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and (shards() or _ray_processes(tag)):
        time.sleep(0.2)
    assert shards() == [] and _ray_processes(tag) == []
    # what the shards judged is a report, marked partial: each cut shard's own partial
    # report (the shard wrote it on the SIGTERM its task sent), side by side, not merged
    report = json.loads(out.read_text())
    partial = report["partial"]
    why = "interrupted (SIGINT)" if signame == "SIGINT" else "terminated (SIGTERM)"
    assert report["ok"] is False and partial["reason"] == why
    said = partial["shards"]
    assert sorted(said["whole"] + said["cut"] + said["lost"]) == ["1/2", "2/2"]
    assert said["cut"]  # two-crash sweeps of tiny take minutes: at least one was cut
    runs = report["runs"]
    assert runs and {(r["shard"]["index"], r["shard"]["of"]) for r in runs} == {
        tuple(map(int, s.split("/"))) for s in said["whole"] + said["cut"]}
    assert partial["crash_states_judged"] == sum(r["crash_states"] for r in runs)
    assert f"PARTIAL REPORT: {why}" in printed
    assert f"shard{'s' if len(said['cut']) > 1 else ''} {', '.join(said['cut'])} cut short" \
        in printed
