"""The command backend (faultsim.command): an agent run as a command, explored from
outside. Cheap: the agent is tests/command_agents/raw_agent.py (standard library only), on
examples/any_language/scenario.toml (two turns, one keyed payment), a few kill points."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from faultsim.command import explore, outcome
from faultsim.command.syscalls import parse, strace_unavailable
from faultsim.errors import NonDeterminismError
from faultsim.scenario import load_scenario

ROOT = Path(__file__).resolve().parent.parent
SCENARIO = ROOT / "examples" / "any_language" / "scenario.toml"
AGENT = ROOT / "tests" / "command_agents" / "raw_agent.py"
pytestmark = pytest.mark.skipif(strace_unavailable() is not None,
                                reason=f"strace: {strace_unavailable()}")

# one kill point of each boundary kind: before the first event (held at the first call),
# a model answer (the fake's), a rename (held at its entry), an effect (the wire's answer),
# the last event (held at the agent's exit)
KINDS = ("k0-start", "k1-after-model-response-model@s@0#1",
         "k4-checkpoint-rename-checkpoint.json.tmp#3", "k7-after-effect-payments.submit#1",
         "k18-after-model-response-.#3")


def _command(*flags: str) -> str:
    return f"cmd:{sys.executable} {AGENT} {' '.join(flags)}".strip()


@pytest.fixture(scope="module")
def clean_sweep():
    scenario = load_scenario(SCENARIO)
    return explore(_command(), scenario, crash_models=("process", "power"),
                   only=lambda p: p.id in KINDS)


def test_outcome_contract():
    done, why = outcome(0, "thinking...\nPaid INV-7.\n\n", "")
    assert why is None and done.status == "completed" and done.final_answer == "Paid INV-7."
    esc, why = outcome(3, "", "the card was declined twice\n")
    assert why is None and esc.status == "escalated" and "declined" in esc.escalation
    failed, why = outcome(1, "", "Traceback ...\nKeyError: 'x'\n")
    assert failed is None and "exit status 1" in why and "KeyError" in why
    assert outcome(0, "", "")[0] is None  # completed needs an answer
    assert "signal 9" in outcome(-9, "", "")[1]


def test_log_parser_reads_held_unfinished_and_resumed_calls():
    hx = lambda s: "".join(f"\\x{b:02x}" for b in s.encode())  # noqa: E731
    log = (f'7 openat(AT_FDCWD<{hx("/w")}>, "{hx("a.tmp")}", O_WRONLY|O_CREAT|O_TRUNC, 0666)'
           f' = 3<{hx("/w/a.tmp")}>\n'
           f'8 write(3<{hx("/w/a.tmp")}>, "{hx("abc")}", 3 <unfinished ...>\n'
           f'7 fsync(4<{hx("/w")}>) = 0\n'
           f'8 <... write resumed>) = 3\n'
           f'7 rename("{hx("a.tmp")}", "{hx("a")}"')  # held at its entry: no newline yet
    calls = parse(log)
    assert [(c.name, c.tid, c.ordinal, c.result) for c in calls] == [
        ("openat", 7, 1, 3), ("write", 8, 1, 3), ("fsync", 7, 1, 0), ("rename", 7, 1, None)]
    assert calls[1].strings == [b"abc"] and calls[1].fds == [("3", "/w/a.tmp")]
    assert calls[3].strings == [b"a.tmp", b"a"] and not calls[3].returned


OPS = """
import os
def dsync(p):
    fd = os.open(p, os.O_RDONLY); os.fsync(fd); os.close(fd)
with open("state.tmp", "w") as f:
    f.write("v1" * 300); f.flush(); os.fsync(f.fileno())
os.replace("state.tmp", "state.json")
dsync(os.getcwd())
os.mkdir("logs")
with open("logs/run.log", "a") as f:
    f.write("x" * 1300)
with open("state.tmp", "w") as f:
    f.write("v2" * 400)
os.replace("state.tmp", "state.json")
with open("notes", "wb") as f:
    f.write(b"n" * 10)
os.unlink("notes")
"""


def test_power_states_are_the_inprocess_model_on_the_same_calls(tmp_path, sandbox):
    """The same write sequence, in-process (pyfakefs, the interposer's durability) and
    on a real directory under strace (the durability the traced calls give): the same
    power-loss states, named the same."""
    from faultsim.command.disk import DiskModel
    from faultsim.command.incarnation import read_tree
    from faultsim.command.syscalls import command_line
    from faultsim.core.crashmodel import power_states

    fs, ip, _tracer = sandbox
    ip.restore({})
    cwd = os.getcwd()
    os.chdir("/sb")
    try:
        with ip:
            exec(compile(OPS, "ops", "exec"), {})
    finally:
        os.chdir(cwd)
    inprocess = power_states(ip.snapshot(), ip.inodes(), ip.durability)
    fs.pause()
    try:
        work = tmp_path / "work"
        work.mkdir()
        log = tmp_path / "log"
        subprocess.run(command_line(str(log), [sys.executable, "-c", OPS]), cwd=work,
                       check=True, timeout=60)
        model = DiskModel.of(str(work), {})
        for call in parse(log.read_text()):
            model.apply(call)
        assert model.mismatch(read_tree(work)) is None
        real = model.power_states()
    finally:
        fs.resume()
    assert len(inprocess) > 4  # the torn states of the unsynced log are among them
    assert [(s.persisted, s.files) for s in real] == [(s.persisted, s.files)
                                                       for s in inprocess]


def test_a_correct_agent_is_clean_at_every_kind_of_boundary_and_every_kill_lands(
        clean_sweep):
    found = clean_sweep
    assert [p.id for p in found.runs["process"].explored] == list(KINDS)
    assert found.points[-1].id == KINDS[-1]  # the exit, held
    assert found.kills_landed == found.crash_runs == len(KINDS)  # each proven, none retried
    process, power = found.runs["process"], found.runs["power"]
    assert len(process.verdicts) == len(KINDS) and len(power.verdicts) > len(KINDS)
    assert not [v for v in [*process.verdicts, *power.verdicts] if v.violations]
    # the power states came from the traced calls: after the first save, its rename's
    # unsynced name may be lost (data persisted, unsynced names lost) until the dir fsync
    at_rename = [v.persisted for v in power.verdicts if v.kill_point.id == KINDS[2]]
    assert "data persisted, unsynced names lost" in at_rename


def test_a_key_drawn_afresh_per_process_pays_twice_after_a_crash():
    scenario = load_scenario(SCENARIO)
    found = explore(_command("--mistake"), scenario, crash_models=("process", "power"),
                    only=lambda p: p.id in KINDS[2:4])
    assert found.kills_landed == 2
    caught = {(v.kill_point.id, v.crash_model) for run in found.runs.values()
              for v in run.verdicts if "effects_exactly_once" in {x.invariant
                                                                 for x in v.violations}}
    assert caught == {(KINDS[3], "process"), (KINDS[3], "power")}  # after the payment only


def test_a_kill_that_does_not_land_twice_is_its_points_finding(monkeypatch):
    import faultsim.command.incarnation as inc

    real = inc.kill_group
    monkeypatch.setattr(inc, "kill_group", lambda p, *a: (real(p), False)[1])
    found = explore(_command(), load_scenario(SCENARIO), only=lambda p: p.id == KINDS[1])
    (verdict,) = found.runs["process"].verdicts
    (violation,) = verdict.violations
    assert found.kills_landed == 0 and violation.invariant == "kill_point_judged"
    assert "did not land" in violation.explanation
    assert violation.explanation.endswith("(on a second try too)")


NAMED_BY_PID = """
import json, os, urllib.request
body = {"model": "m", "max_tokens": 64, "messages": [{"role": "user",
        "content": os.environ["FAULTSIM_TASK"]}]}
req = urllib.request.Request(os.environ["ANTHROPIC_BASE_URL"] + "/v1/messages",
    data=json.dumps(body).encode(), headers={"content-type": "application/json",
    "x-api-key": os.environ["ANTHROPIC_API_KEY"], "anthropic-version": "2023-06-01"})
answer = json.load(urllib.request.urlopen(req))["content"][0]["text"]
with open(f"checkpoint-{os.getpid()}.json", "w") as f:
    json.dump({"env": {k: os.environ.get(k) for k in ("FAULTSIM_SEED",
        "FAULTSIM_INCARNATION", "HOME", "TMPDIR", "MY_SECRET_TOKEN")}}, f)
print(answer)
"""


def test_two_clean_runs_that_part_are_named_in_the_agents_terms(tmp_path):
    (tmp_path / "agent.py").write_text(NAMED_BY_PID)
    (tmp_path / "s.toml").write_text(textwrap.dedent("""
        id = "pid_named"
        task = "Say done."
        expected_final_answer = "done"
        [[turns]]
        final = "done"
    """))
    with pytest.raises(NonDeterminismError, match=r"it created file checkpoint-\d+\.json") \
            as caught:
        explore(f"cmd:{sys.executable} {tmp_path / 'agent.py'}",
                load_scenario(tmp_path / "s.toml"))
    # faultsim seeds nothing inside a command's process: it must not say it does
    assert "already made deterministic" not in str(caught.value)
    assert "inside the command's own process it makes nothing deterministic" in \
        str(caught.value) and "$FAULTSIM_SEED" in str(caught.value)


def test_the_command_runs_in_the_sandbox_with_the_contracts_environment(tmp_path,
                                                                        monkeypatch):
    import json

    from faultsim.command.incarnation import incarnation

    monkeypatch.setenv("MY_SECRET_TOKEN", "real-credential")
    (tmp_path / "agent.py").write_text(NAMED_BY_PID)
    (tmp_path / "s.toml").write_text('id = "env"\ntask = "Say done."\nexpected_final_answer = '
                                     '"done"\n[[turns]]\nfinal = "done"\n')
    scenario = load_scenario(tmp_path / "s.toml")
    run = incarnation([sys.executable, str(tmp_path / "agent.py")], scenario,
                      scenario.build_world(), tmp_path / "base", work={}, rest={},
                      seed="7")
    assert run.outcome is not None and run.outcome.final_answer == "done", run.error
    (name,) = [p for p in run.work if p.startswith("checkpoint-")]
    env = json.loads(run.work[name])["env"]
    sandbox = tmp_path / "base" / "sandbox"
    assert env == {"FAULTSIM_SEED": "7", "FAULTSIM_INCARNATION": "1",
                   "HOME": str(sandbox / "home"), "TMPDIR": str(sandbox / "tmp"),
                   "MY_SECRET_TOKEN": None}
    assert [e.kind for e in run.events] == ["model.response", "fs.create", "fs.write"]
    assert run.left_behind == [] and run.contained == ""


def test_faultsim_run_list_and_replay_take_a_command(capsys):
    """The front ends reach the backend through faultsim.backends (cmd: -> command): a
    counterexample's token replays the same crash to the same verdict."""
    import re

    from faultsim.cli import main

    agent = _command("--mistake")
    assert main(["list", str(SCENARIO), "--agent", agent]) == 0
    listed = capsys.readouterr().out
    assert "kill points  19:" in listed and KINDS[3] in listed
    # the pause model's line: its pause points, every kill point after the first event
    # (a command has no torn points)
    ids = re.findall(r"^    k(\d+)-", listed, re.M)
    pauses = sum(1 for i in ids if int(i) > 0)
    assert len(ids) == 19 and 0 < pauses < 19
    assert f"  pause        {pauses} pause points (the boundary kill points after" in listed
    assert main(["run", str(SCENARIO), "--agent", agent, "--crash-model", "process",
                 "--kill-point", KINDS[3]]) == 1
    out = capsys.readouterr().out
    assert "VIOLATED effects_exactly_once" in out and "1 landed" in out
    token = re.search(r"replay: faultsim replay (\S+)", out).group(1)
    assert main(["replay", token]) == 1
    assert "VIOLATED effects_exactly_once" in capsys.readouterr().out


def test_a_process_left_running_after_a_clean_run_is_refused(tmp_path):
    from faultsim.errors import UncontainedProcess

    (tmp_path / "agent.py").write_text(NAMED_BY_PID.replace(
        "print(answer)", "import subprocess, sys\n"
        "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        "print(answer)").replace('f"checkpoint-{os.getpid()}.json"', '"checkpoint.json"'))
    (tmp_path / "s.toml").write_text('id = "left"\ntask = "Say done."\n'
                                     'expected_final_answer = "done"\n[[turns]]\n'
                                     'final = "done"\n')
    with pytest.raises(UncontainedProcess, match="left a process running.*sleep"):
        explore(f"cmd:{sys.executable} {tmp_path / 'agent.py'}",
                load_scenario(tmp_path / "s.toml"))


def test_one_resume_per_distinct_state_gives_the_verdicts_of_one_resume_each():
    """The shortcut: a state equal to one already resumed at the same kill point (the
    process state is the power model's "everything persisted") shares its verdict; it is
    sound because the resume starts from the same files and a copy of the same world.
    Checked against resuming every state."""
    scenario = load_scenario(SCENARIO)
    keep = lambda p: p.id == KINDS[2]  # noqa: E731
    short = explore(_command(), scenario, crash_models=("process", "power"), only=keep)
    long = explore(_command(), scenario, crash_models=("process", "power"), only=keep,
                   share=False)
    assert short.resumes < long.resumes == long.states == short.states

    def verdicts(found):
        return [(v.crash_model, v.persisted, [x.invariant for x in v.violations])
                for run in found.runs.values() for v in run.verdicts]
    assert verdicts(short) == verdicts(long)


def test_the_same_agent_paying_through_the_mcp_tool_is_clean():
    """The payment as an MCP tool call (FAULTSIM_MCP_URL, streamable HTTP): the same
    events, so the same kill points, and clean after the payment."""
    found = explore(_command("--mcp"), load_scenario(SCENARIO),
                    crash_models=("process", "power"), only=lambda p: p.id == KINDS[3])
    assert found.kills_landed == 1
    verdicts = [v for run in found.runs.values() for v in run.verdicts]
    assert verdicts and not [v for v in verdicts if v.violations]
    assert [e.kind for e in found.golden.trace].count("effect.applied") == 1


@pytest.mark.parametrize("flags, refused", [((), True), (("--any-version",), False)])
def test_the_version_probe_wants_an_unknown_checkpoint_version_refused(flags, refused):
    """P4, as in the other modes: the agent that checks its checkpoint's version refuses
    one from a future release (a failed run, the file untouched); its twin resumes from it."""
    found = explore(_command(*flags), load_scenario(SCENARIO), only=lambda p: False,
                    probe=True)
    (probe,) = found.runs["process"].probes
    assert found.kills_landed == 0 and found.crash_runs == 1  # the probe's own crash
    assert [v.invariant for v in probe.violations] == ([] if refused
                                                       else ["unknown_version_refused"])


def test_the_pytest_marker_takes_a_command(pytester):
    """The marker's whole-scenario test reaches the command backend through the seam."""
    import shutil

    pytester.makeini("[pytest]\n")
    shutil.copy(SCENARIO, pytester.path / "scenario.toml")
    pytester.makepyfile(test_cmd=f"""
        import pytest

        @pytest.mark.faultsim("scenario.toml", agent="{_command('--mistake')}",
                              crash_model="process", categories=["after-effect"])
        def test_scenario(crash_safety):
            crash_safety.check()
        """)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    assert "effects_exactly_once" in result.stdout.str()


# -- pairs (--crashes 2): a crash during recovery -----------------------------------------
AFTER_SAVE_A = "k6-after-model-response-.#1"  # checkpoint.json holds turn 1: a resume recovers
IN_PLACE = "--mistake=record-in-place"
EARLY = lambda p: p.index <= 3  # noqa: E731  the resumed run's first calls (its recovery)
# and, in the in-place agent's recovery course, its save point B's rename held, done (k7)
# and its directory fsync done (k8): the last two leave equal states
SECONDS = (0, 1, 2, 3, 7, 8)


def _pairs(flags=(IN_PLACE,), second=lambda p: p.index in SECONDS, share=True):
    return explore(_command(*flags), load_scenario(SCENARIO), crashes=2,
                   only=lambda p: p.id == AFTER_SAVE_A, second=second, share=share)


@pytest.fixture(scope="module")
def in_place_pairs():
    return _pairs()


def _deep(found):
    return [(v.kill_point.id, v.persisted, sorted(x.invariant for x in v.violations))
            for v in found.deep]


@pytest.mark.parametrize("caught", [True, False])
def test_a_crash_during_recovery_is_a_pair_and_every_second_kill_lands(caught,
                                                                       in_place_pairs):
    """The first crash state after save point A passes (its resume recovers); killed
    again during that recovery, the agent that writes its reconciliation record in place
    leaves checkpoint.json empty, and the next resume cannot read it. Its twin, which
    writes no record, is clean at the same pairs. (No single crash can show it: only a
    resumed run writes the record, and a single crash never kills one.)"""
    found = in_place_pairs if caught else _pairs((), second=EARLY)
    run = found.runs["process"]
    assert [v.ok for v in run.verdicts] == [True]  # the single crash is clean
    n = 6 if caught else 4
    assert found.pair_kills == n and found.kills_landed == found.crash_runs == 1 + n
    depth = run.depth(2)
    assert run.crashes == 2 and depth.explored == depth.total == n == len(found.deep)
    assert all(v.earlier[0].point.id == AFTER_SAVE_A for v in found.deep)
    failed = [(v.kill_point.id, sorted(x.invariant for x in v.violations))
              for v in run.deep_failures]
    assert failed == ([("k1-start-checkpoint.json#1",
                        ["checkpoint_whole", "completes_or_escalates"])] if caught else [])


def test_a_pairs_token_replays_its_two_crashes(capsys, in_place_pairs):
    from faultsim.cli import main
    from faultsim.command.backend import Command
    from faultsim.settings.options import ExploreOptions

    run = in_place_pairs.runs["process"]
    (verdict,) = run.deep_failures
    assert main(["replay", verdict.token(run)]) == 1
    out = capsys.readouterr().out
    assert "VIOLATED checkpoint_whole" in out and "crash 2, in resumed run 1" in out
    refuses = lambda n: Command().refuses(  # noqa: E731
        type("A", (), {"spec": _command()})(), None, ExploreOptions(crashes=n), "explore")
    assert refuses(2) is None and "--crashes 2 at most" in refuses(3)


def test_pairs_sharing_equal_second_states_gives_the_verdicts_of_resuming_each(
        in_place_pairs):
    """The shortcut: a second crash state equal (files, world, HOME/TMPDIR) to one
    resumed already shares its resumed run; checked against resuming every state."""
    kept = (1, 7, 8)
    long = _pairs(second=lambda p: p.index in kept, share=False)
    short = in_place_pairs
    assert long.resumes == 1 + len(kept) and short.resumes == 1 + len(SECONDS) - 1
    assert short.runs["process"].depth(2).resumed == len(SECONDS) - 1
    ids = {v.kill_point.id for v in long.deep}
    assert _deep(long) == [d for d in _deep(short) if d[0] in ids]


def test_pause_with_two_crashes_and_the_sdk_backend_refuse_pause_in_one_line(capsys):
    # A command is paused one incarnation per schedule (tests/test_command_pause.py runs
    # it); two pauses are refused, and the Claude Agent SDK backend refuses pause outright
    # rather than judging nothing and printing "all passed" (before 276b0f3: exit 0).
    from faultsim.adapters.claude_agent_sdk.backend import ClaudeAgentSdk
    from faultsim.backends import Agent
    from faultsim.cli import main
    from faultsim.settings.options import ExploreOptions

    code = main(["run", str(SCENARIO), "--agent", _command(), "--crash-model", "pause",
                 "--crashes", "2"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    assert "--crashes 2" in err[0] and "pause" in err[0]
    why = ClaudeAgentSdk().refuses(Agent(spec="claude-agent-sdk:x.py:agent"),
                                   load_scenario(SCENARIO),
                                   ExploreOptions(crash_model="pause"), "explore")
    assert why is not None and "--crash-model pause" in why and "\n" not in why
