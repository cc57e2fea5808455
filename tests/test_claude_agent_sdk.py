"""The Claude Agent SDK adapter: the billing agent (examples/claude_agent_sdk) run unchanged on
the bundled Claude Code CLI against the loopback fake, killed, resumed and judged.

The SDK internals and the CLI behaviour the adapter relies on are checked here first, so an
upgrade that moves them fails loudly. The CLI runs are few and shared (one clean run, one
crash after the email, three resumes: about 10 s); the full sweep is
examples/claude_agent_sdk/findings.py.
"""
from __future__ import annotations

import inspect
import json
import re
import sys
from pathlib import Path

import pytest

pytest.importorskip("claude_agent_sdk", reason="claude-agent-sdk is not installed "
                    "(pip install 'faultsim[claude-agent-sdk]')")

import claude_agent_sdk  # noqa: E402

import faultsim  # noqa: E402
from faultsim.adapters import claude_agent_sdk as cs  # noqa: E402
from faultsim.adapters.claude_agent_sdk import writes as cs_writes  # noqa: E402
from faultsim.adapters.claude_agent_sdk.states import is_transcript, orphaned  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "claude_agent_sdk"
SCENARIO = faultsim.load_scenario(EXAMPLE / "scenario.toml")
sys.path.insert(0, str(EXAMPLE))
import claude_billing_agent  # noqa: E402

# the clean run's kill points, by (category, detail, ordinal), in order
EXPECTED_POINTS = [
    ("model-request", "turn1", 1), ("after-tool-use", "turn1", 1),
    ("handler-entry", "pay_invoice", 1), ("before-effect", "pay", 1),
    ("after-effect", "pay", 1), ("handler-return", "pay_invoice", 1),
    ("model-request", "turn2", 1), ("after-tool-use", "turn2", 1),
    ("handler-entry", "send_email", 1), ("before-effect", "send", 1),
    ("after-effect", "send", 1), ("handler-return", "send_email", 1),
    ("model-request", "turn3", 1)]


# -- what the adapter relies on (claude-agent-sdk 0.2.184, CLI 2.1.327) -------------------
def test_the_sdk_internals_the_adapter_uses_are_where_it_expects():
    """Fails loudly when an upgrade moves them: pin the new release only after adapting
    faultsim/adapters/claude_agent_sdk to it."""
    import anyio
    from claude_agent_sdk._cli_version import __cli_version__
    from claude_agent_sdk._internal import query as sdk_query
    from claude_agent_sdk._internal.transport import subprocess_cli

    assert claude_agent_sdk.__version__ == cs.SDK_VERSION, \
        f"claude-agent-sdk {claude_agent_sdk.__version__}: the adapter is pinned to {cs.SDK_VERSION}"
    assert __cli_version__ == cs.CLI_VERSION
    # the transport starts the CLI through its module's `anyio.open_process`, which takes
    # start_new_session (the adapter puts the CLI in a process group of its own)
    assert subprocess_cli.anyio is anyio
    assert "anyio.open_process(" in inspect.getsource(subprocess_cli.SubprocessCLITransport.connect)
    assert "start_new_session" in inspect.signature(anyio.open_process).parameters
    # where the bundled CLI is found (cli_unavailable asks it for its version)
    assert subprocess_cli.SubprocessCLITransport._find_bundled_cli(None) is not None
    # every SDK MCP call passes here (handler-entry / handler-return kill points)
    assert list(inspect.signature(sdk_query.Query._handle_sdk_mcp_request).parameters) == [
        "self", "server_name", "message"]
    assert inspect.iscoroutinefunction(sdk_query.Query._handle_sdk_mcp_request)
    # hooks (builtin-start / builtin-end kill points): initialize() sends self.hooks, each
    # event a list of {"matcher", "hooks": [callback]}, and calls back (input, id, context)
    assert inspect.iscoroutinefunction(sdk_query.Query.initialize)
    source = inspect.getsource(sdk_query.Query.initialize)
    assert "self.hooks.items()" in source and 'matcher.get("hooks", [])' in source
    assert "callback(" in inspect.getsource(sdk_query.Query._handle_control_request)


def test_a_wrong_option_is_one_line_naming_it():
    with pytest.raises(ValueError) as caught:
        cs.explore(claude_billing_agent.run_billing, SCENARIO, prefixes="lines")
    assert str(caught.value).startswith("prefixes 'lines'") and "\n" not in str(caught.value)


def _line(kind: str, blocks: list | str = "") -> bytes:
    return json.dumps({"type": kind, "message": {"role": kind, "content": blocks}}).encode()


def test_crash_states_are_the_written_state_and_each_message_boundary_prefix():
    path = "claude/projects/-w/s.jsonl"
    lines = [b'{"type":"queue-operation"}', _line("user", "the task"),
             b'{"type":"attachment"}', _line("assistant", [{"type": "tool_use", "id": "t1"}]),
             b'{"type":"api-request"}']
    files = {path: b"\n".join(lines) + b"\n", "work/session.json": b"{}"}
    states = cs.crash_states(files)
    # no cut after entry 4: the conversation as written, less a metadata line
    assert [name for name, _ in states] == [
        "as written", "transcript not yet written", "transcript cut after entry 2 (user)"]
    assert all(s["work/session.json"] == b"{}" for _, s in states)  # the rest as written
    assert path not in states[1][1]
    assert states[2][1][path] == b"\n".join(lines[:2]) + b"\n"
    assert len(cs.crash_states(files, "entries")) == 1 + 5  # no file, entries 1..4 (5: as written)
    assert cs.crash_states(files, "written") == [("as written", files)]
    power = [n for n, _ in cs.crash_states(files, power=True) if n.startswith("power")]
    assert power == ["power loss: transcript cut after entry 2, entry 3 torn in half"]
    assert orphaned(files) and not orphaned({path: lines[1] + b"\n"})


# -- the bundled CLI, run ------------------------------------------------------------------
@pytest.fixture(scope="module")
def crashed(tmp_path_factory):
    """One clean run, one crash right after the email went out, and resumes from three of
    the states that kill may leave."""
    why = cs.cli_unavailable()
    if why:
        pytest.skip(why)
    root = tmp_path_factory.mktemp("claude-sdk") / "sandbox"
    run = claude_billing_agent.run_billing
    clean_world = SCENARIO.build_world()
    golden, points, clean = cs.golden_run(run, SCENARIO, root, world=clean_world)
    clean_files = cs.snapshot(root)
    target = next(kp for kp in points if kp.key == ("after-effect", "send", 1))
    world = SCENARIO.build_world()
    cs.restore(root, {})  # a fresh start, as the clean run had
    crash = cs.incarnation(run, SCENARIO, world, root, target=target)
    assert crash.files is not None, (crash.error, crash.seen, crash.outcome)
    states = dict(cs.crash_states(crash.files))
    prompt_only = next(n for n in states if n.endswith("(user)"))  # the shortest with the task
    missing = next(n for n in states if n.endswith("not yet written"))
    verdicts = {name: cs.resume(run, SCENARIO, golden, world, root, target, name, states[name])
                for name in ("as written", prompt_only, missing)}
    # the same kill and state for the agent whose email tool keeps intent records (P11)
    careful = claude_billing_agent.run_billing_careful
    careful_golden, careful_points, _ = cs.golden_run(careful, SCENARIO, root)
    careful_world = SCENARIO.build_world()
    cs.restore(root, {})
    careful_crash = cs.incarnation(careful, SCENARIO, careful_world, root, target=target)
    assert careful_crash.landed and careful_crash.files is not None
    careful_states = dict(cs.crash_states(careful_crash.files))
    careful_prompt_only = next(n for n in careful_states if n.endswith("(user)"))
    verdicts["careful"] = cs.resume(careful, SCENARIO, careful_golden, careful_world, root,
                                    target, careful_prompt_only,
                                    careful_states[careful_prompt_only])
    return {"root": root, "golden": golden, "points": points, "clean": clean,
            "files": clean_files,
            "requests": clean_world.model.requests,
            "crash": crash, "states": states, "verdicts": verdicts, "prompt_only": prompt_only,
            "missing": missing}


def test_the_agent_runs_unchanged_against_the_fake(crashed):
    golden = crashed["golden"]
    assert golden.outcome.final_answer == SCENARIO.expected_final_answer
    assert {n: len(golden.ledger.applied(n)) for n in ("payments", "email")} == \
        {"payments": 1, "email": 1}
    assert crashed["clean"].landed is False and crashed["clean"].error is None
    # the CLI's contract: three streamed Messages requests and nothing else (a call to any
    # other path is logged by the fake as a 404), none refused
    requests = crashed["requests"]
    assert [(q.position, q.status, q.stream) for q in requests] == [
        (0, 200, True), (1, 200, True), (2, 200, True)]
    transcripts = [p for p in crashed["files"] if p.startswith("claude/projects/")
                   and p.endswith(".jsonl")]
    assert len(transcripts) == 1, transcripts
    session = json.loads(crashed["files"]["work/session.json"])["session_id"]
    assert transcripts[0].endswith(f"/{session}.jsonl")
    kinds = [json.loads(line).get("type") for line in
             crashed["files"][transcripts[0]].splitlines()]
    assert kinds.count("user") == 3 and kinds.count("assistant") >= 3
    assert [kp.key for kp in crashed["points"]] == EXPECTED_POINTS
    assert golden.answers == (b"toolu_s_01_1", b"toolu_s_02_1")


def test_a_kill_after_the_email_lands_and_is_judged(crashed):
    crash = crashed["crash"]
    assert crash.landed and crash.files is not None  # the CLI's group died by SIGKILL
    assert crash.seen[-1].key == ("after-effect", "send", 1)
    verdicts = crashed["verdicts"]
    # as written: the transcript holds the email's tool_use, unanswered; the CLI answers it
    # with a made-up error on resume and the model goes on: no second email
    written = verdicts["as written"]
    assert written.orphaned and written.resumed_at == 2 and written.ok, written.violations
    # the finding: the batch with the tool_use not yet on disk, only the task: the
    # model is asked again from the start and the email goes out twice
    again = verdicts[crashed["prompt_only"]]
    assert again.resumed_at == 0
    assert "effects duplicated" in cs.classify(again)
    duplicated = next(v for v in again.violations if v.invariant == "effects_exactly_once")
    assert list(duplicated.fact("extra")) == [
        'email.send({"body":"We paid INV-7 (EUR 120.00) today.","to":"accounts@acme.example"})']
    # no transcript at all: the CLI cannot resume the session the agent kept
    gone = verdicts[crashed["missing"]]
    assert "unresumable" in cs.classify(gone) and "No conversation found" in gone.error


def test_the_duplicate_is_the_agents_not_the_guards(crashed):
    """Proven both ways in the same crash state (the transcript back to the task, the email
    already sent): the blind email tool sends it again and is caught; the one that keeps
    intent and completion records (P11) does not send twice and stops for a person."""
    blind = crashed["verdicts"][crashed["prompt_only"]]
    careful = crashed["verdicts"]["careful"]
    assert careful.resumed_at == 0
    assert "effects duplicated" in cs.classify(blind)
    assert "effects duplicated" not in cs.classify(careful), careful.violations
    assert not [v for v in careful.violations if v.invariant in (
        "effects_exactly_once", "completes_or_escalates")], careful.violations
    # what no agent code can fix: the lost batch makes the resume redo the task's turns
    assert {v.invariant for v in careful.violations} == {"one_step_repeated_per_crash"}


def test_no_cli_process_outlives_the_runs(crashed):
    from faultsim.adapters.claude_agent_sdk.control import RUNNING
    from faultsim.host.groups import dead

    pids = [p.pid for p in RUNNING.clis]
    assert all(dead(pid) for pid in pids)


def test_faultsim_list_gives_the_kill_points_and_the_budget(capsys):
    """Two clean runs (they must meet the same kill points) and the estimate."""
    if cs.cli_unavailable():
        pytest.skip(cs.cli_unavailable())
    from faultsim.cli import main

    spec = f"claude-agent-sdk:{EXAMPLE / 'claude_billing_agent.py'}:run_billing"
    assert main(["list", "--agent", spec, str(EXAMPLE / "scenario.toml")]) == 0
    out = capsys.readouterr().out
    assert "model-request 3, after-tool-use 2, handler-entry 2, before-effect 2, " \
           "after-effect 2, handler-return 2" in out
    assert "budget       about " in out and " incarnations at " in out
    if cs_writes.strace_unavailable():
        assert "kill points  13: crash states process about 82 " in out
        assert "no kills inside transcript writes: " in out
    else:  # a third clean run under strace counts the transcript writes: one point each
        writes = int(out.split("transcript-write ")[1].split()[0])
        assert writes >= 2
        assert f"kill points  {13 + writes}: crash states process about {82 + writes} " in out


def test_the_cli_connects_to_nothing_but_the_loopback_fake(tmp_path):
    """The CLI's contract under faultsim's environment (issue 23): its only connection is
    the fake's loopback endpoint, no DNS, no telemetry. Seen from outside, by strace."""
    import shutil
    import subprocess

    if cs.cli_unavailable():
        pytest.skip(cs.cli_unavailable())
    strace = shutil.which("strace")
    if strace is None or subprocess.run([strace, "-f", "-qq", "-o", "/dev/null", "true"],
                                        capture_output=True).returncode != 0:
        pytest.skip("strace is not installed or cannot trace here (.ci/run installs it)")
    log = tmp_path / "connect.log"

    def traced(command: list[str]) -> list[str]:
        return [strace, "-f", "-qq", "-e", "trace=connect,sendto,sendmsg", "-e",
                "signal=none", "-o", str(log), *command]

    world = SCENARIO.build_world()
    golden, _points, clean = cs.golden_run(claude_billing_agent.run_billing, SCENARIO,
                                           tmp_path / "sandbox", world=world, wrap_cli=traced)
    assert clean.outcome.final_answer == SCENARIO.expected_final_answer
    calls = [line for line in log.read_text().splitlines()
             if "AF_INET" in line or "AF_INET6" in line]
    assert calls, "strace saw no connection at all: the fake was not reached this way"
    outside = [c for c in calls if 'inet_addr("127.0.0.1")' not in c]
    assert not outside, outside[:3]


# -- kills inside the CLI's transcript writes (strace) -------------------------------------
_LOG = ('101 write(7, ""..., 300) = 300 (DELAYED)\n'
        '102 write(7, ""..., 40 <unfinished ...>\n'
        '101 write(7, ""..., 55')  # write 3 entered, held: the log ends mid-line


def _watch(tmp_path, text: str, n: int):
    log = tmp_path / "strace.log"
    log.write_text(text)
    return cs_writes.WriteWatch(log, n, lambda: None)


def test_a_write_kill_is_proven_by_the_log_and_the_bytes_on_disk(tmp_path):
    """Landed: write n entered and never returned, and the transcript holds exactly what
    the writes that returned wrote. Each way it can fail says so."""
    assert _watch(tmp_path, _LOG, 3).proof(on_disk=300) is None
    # write 2 is held too (another thread's), unfinished: it wrote nothing either
    assert _watch(tmp_path, _LOG, 2).proof(on_disk=300) is None
    assert "returned before the kill" in _watch(tmp_path, _LOG, 1).proof(on_disk=300)
    assert "returned before the kill" in _watch(
        tmp_path, _LOG + " <unfinished ...>\n102 <... write resumed>) = 40\n", 2
    ).proof(on_disk=340)
    assert "holds 340 bytes" in _watch(tmp_path, _LOG, 3).proof(on_disk=340)
    assert "never came" in _watch(tmp_path, _LOG, 4).proof(on_disk=300)


@pytest.fixture(scope="module")
def write_kills(crashed, tmp_path_factory):
    """The transcript writes of a clean run under strace, and kills inside the first and
    the third of them (the clean run without strace is `crashed`'s). Not the last: the
    CLI's batches follow its timer, and a crash run may write once less than the clean run
    (`explore` reports such a point as not reached)."""
    why = cs_writes.strace_unavailable()
    if why:
        pytest.skip(why)
    root = tmp_path_factory.mktemp("claude-writes") / "sandbox"
    run = claude_billing_agent.run_billing
    golden, points, clean = crashed["golden"], crashed["points"], crashed["files"]
    writes, untraced = cs.write_points(run, SCENARIO, root, len(points))
    assert untraced is None and writes is not None
    kills = {}
    for kp in (writes[0], writes[2]):
        world = SCENARIO.build_world()
        cs.restore(root, {})
        kills[kp.ordinal] = (kp, world, cs.incarnation(run, SCENARIO, world, root, target=kp))
    return {"root": root, "golden": golden, "clean": clean, "writes": writes, "kills": kills}


def test_the_transcript_is_where_faultsim_named_it(crashed):
    """The session id is faultsim's (`--session-id`), so the path strace watches is known
    before the CLI starts, and two runs write the same path."""
    expected = cs_writes.transcript_path(crashed["root"],
                                         cs_writes.session_id(SCENARIO.id, 1, 1))
    rel = expected.relative_to(crashed["root"]).as_posix()
    assert [p for p in crashed["files"] if is_transcript(p)] == [rel]


def test_a_kill_inside_a_transcript_write_lands_before_it(write_kills):
    writes, kills = write_kills["writes"], write_kills["kills"]
    assert len(writes) >= 3 and [kp.category for kp in writes] == ["transcript-write"] * len(writes)
    for n, (kp, _world, crash) in kills.items():
        assert crash.files is not None and crash.landed, (n, crash.error)
        assert crash.error is None and crash.writes >= n
    # killed at the entry of write 1: nothing of the transcript reached the disk
    _kp, _world, first = kills[1]
    assert not any(is_transcript(p) and d for p, d in first.files.items())
    # at the third: the batches before it (the proof checked their bytes), whole entries
    # only, and the run not finished
    _kp, _world, third = kills[3]
    for data in [d for p, d in third.files.items() if is_transcript(p)]:
        assert data.endswith(b"\n") and all(json.loads(line) for line in data.splitlines())
    assert third.outcome is None


def test_a_resume_after_a_kill_in_the_first_write_cannot_find_its_session(write_kills):
    kp, world, crash = write_kills["kills"][1]
    verdict = cs.resume(claude_billing_agent.run_billing, SCENARIO, write_kills["golden"],
                        world, write_kills["root"], kp, "as written", crash.files)
    assert "unresumable" in cs.classify(verdict), (verdict.error, verdict.violations)


@pytest.mark.parametrize("late", [None, 2])
def test_one_run_stopped_inside_each_transcript_write_reads_each_and_goes_on(
        write_kills, late, monkeypatch):
    """A run under strace stopped at the entry of each transcript write (while strace holds
    it: `Controller.stop_write`) reads a state per write, each proven as a write kill is
    (write m entered and not returned, the transcript the bytes of the writes that did),
    and goes on to its end. One run: each state's transcript is a prefix of the next's,
    whole entries only, the first with nothing written. Where the proof refuses a stop
    (`late`: as if write m had returned before the read), that point is not kept (it gets
    a crash run of its own in a sweep) and the run still goes on."""
    writes = write_kills["writes"][:-1]  # the last may not come: the CLI's timer batches
    if late is not None:
        real = cs_writes.WriteWatch.proof
        monkeypatch.setattr(cs_writes.WriteWatch, "proof", lambda self, on_disk, n=None: (
            "as if it had returned" if n == late else real(self, on_disk, n)))
    world = SCENARIO.build_world()
    root = write_kills["root"]
    cs.restore(root, {})
    inc = cs.incarnation(claude_billing_agent.run_billing, SCENARIO, world, root,
                         stops=writes)
    assert inc.error is None and inc.outcome is not None and inc.files is None
    assert inc.outcome.final_answer == write_kills["golden"].outcome.final_answer
    kept = [kp.ordinal for kp in writes if kp.key in inc.stopped]
    expected = [kp.ordinal for kp in writes if kp.ordinal != late]
    # each kept in order; a stop may come late on a loaded machine (the proof refuses it:
    # that point would get a crash run), and the CLI's timer may write less this run
    assert kept and set(kept) <= set(expected) and 2 * len(kept) >= len(expected), kept
    talks = []
    for m in kept:
        files = inc.stopped[("transcript-write", "session", m)].files
        data = b"".join(d or b"" for p, d in files.items() if is_transcript(p))
        assert data == b"" or (data.endswith(b"\n") and all(map(json.loads, data.splitlines())))
        talks.append(data)
    assert kept[0] != 1 or talks[0] == b""
    assert all(b.startswith(a) for a, b in zip(talks, talks[1:])), "one run's writes, in order"


# -- faultsim run / replay -----------------------------------------------------------------
SPEC = f"claude-agent-sdk:{EXAMPLE / 'claude_billing_agent.py'}"


def test_faultsim_run_finds_the_double_email_and_its_token_replays_it(tmp_path, capsys):
    if cs.cli_unavailable():
        pytest.skip(cs.cli_unavailable())
    from faultsim.cli import main

    report = tmp_path / "report.json"
    assert main(["run", str(EXAMPLE / "scenario.toml"), "--agent", f"{SPEC}:run_billing",
                 "--kill-point", "k11-after-effect-send#1", "--json", str(report),
                 "--no-transcript-writes"]) == 1
    out = capsys.readouterr().out
    assert "cs_billing · claude-agent-sdk:" in out and " kill points   1/" in out
    assert "kills         1 landed" in out
    assert "transcript writes not traced: not asked for" in out
    found = json.loads(report.read_text())
    assert found["ok"] is False and found["runs"][0]["mode"] == "subprocess"
    double = next(v for v in found["runs"][0]["violations"]
                  if v["invariant"] == "effects_exactly_once")
    assert double["replay"].startswith("faultsim replay fs1_")
    assert main(["replay", double["token"], "--timeout", "60"]) == 1
    replayed = capsys.readouterr().out
    assert "email.send(" in replayed and "applied 2 times" in replayed
    assert f"replay: {double['replay']}" in replayed  # the replay names the same state


def test_faultsim_run_passes_a_kill_point_every_state_of_which_resumes(capsys):
    """The exit code's other way: continue_conversation restarts the task when no
    transcript is left, which before the first answer repeats nothing."""
    if cs.cli_unavailable():
        pytest.skip(cs.cli_unavailable())
    from faultsim.cli import main

    assert main(["run", str(EXAMPLE / "scenario.toml"), "--agent",
                 f"{SPEC}:run_billing_continues",
                 "--kill-point", "k1-model-request-turn1#1"]) == 0
    out = capsys.readouterr().out
    assert "1 scenario, 1 run: all passed" in out and "crash states  2 judged" in out
    # its session id is the CLI's: said, not silently left out
    assert "transcript writes not traced: the CLI chose the session id itself" in out


@pytest.mark.parametrize("flags, said", [
    (["--crashes", "2"], "--crashes 2: a Claude Agent SDK agent is explored one crash"),
    (["--mode", "in-process"], "--mode in-process: a Claude Agent SDK agent runs its CLI"),
])
def test_what_this_agent_kind_cannot_do_is_one_line(flags, said, capsys):
    from faultsim.cli import main

    assert main(["run", str(EXAMPLE / "scenario.toml"), "--agent", f"{SPEC}:run_billing",
                 *flags]) == 2
    err = capsys.readouterr().err
    assert said in err and len(err.strip().splitlines()) == 1


# -- the same spec in every front end (faultsim.backends chooses the Claude backend) -------
# Each front end's test asks for what this backend refuses: its one-line reason proves the
# spec reached the Claude backend (before, these front ends said "no such file
# 'claude-agent-sdk:...'"), in milliseconds. The real runs through the same
# `backends.explore/survey/replay` are `faultsim run`, `faultsim list` and `faultsim
# replay`'s tests above and below (each incarnation costs seconds).
@pytest.mark.parametrize("mode, crashes, said", [
    ("auto", 2, "--crashes 2: a Claude Agent SDK agent is explored one crash per run"),
    ("in-process", 1, "--mode in-process: a Claude Agent SDK agent runs its CLI"),
])
def test_engine_run_and_explore_refuse_what_this_backend_cannot_do(mode, crashes, said):
    from faultsim.inprocess.explore import run
    from faultsim.errors import UsageError

    with pytest.raises(UsageError, match=re.escape(said)):
        run(SCENARIO, faultsim.ExploreOptions(mode=mode, crashes=crashes),
            spec=f"{SPEC}:run_billing")
    if mode == "auto":
        with pytest.raises(UsageError, match=re.escape(said)):
            faultsim.explore(f"{SPEC}:run_billing", SCENARIO, crashes=crashes)


def test_the_pytest_marker_takes_the_spec(pytester):
    """The marker's whole-scenario test reaches the Claude backend (its refusal of two
    crashes, as the test's one-line failure); kill-point items are refused at collection."""
    import shutil

    pytester.makeini("[pytest]\n")
    shutil.copy(EXAMPLE / "scenario.toml", pytester.path / "scenario.toml")
    pytester.makepyfile(test_claude=f"""
        import pytest

        @pytest.mark.faultsim("scenario.toml", agent="{SPEC}:run_billing", crashes=2)
        def test_scenario(crash_safety):
            crash_safety.check()

        @pytest.mark.faultsim("scenario.toml", agent="{SPEC}:run_billing", kill_points=True)
        def test_items(crash_safety):
            crash_safety.check()
        """)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(failed=2)
    out = result.stdout.str()
    assert "--crashes 2: a Claude Agent SDK agent is explored one crash per run" in out
    assert "kill-point items (kill_points=True, faultsim.parametrize) run a Python" in out
    assert "no such file" not in out


def test_faultsim_formats_refuses_it_in_one_line(tmp_path, capsys):
    from faultsim.cli import main

    assert main(["formats", "record", str(EXAMPLE / "scenario.toml"), "--out",
                 str(tmp_path / "corpus"), "--agent", f"{SPEC}:run_billing"]) == 2
    err = capsys.readouterr().err
    assert "faultsim formats resumes recorded checkpoints of a Python agent factory" in err
    assert len(err.strip().splitlines()) == 1 and not (tmp_path / "corpus").exists()


def test_assert_ok_fails_with_the_counterexample_and_never_on_nothing(crashed):
    """The helper a team's test calls, both ways: the double email fails it with the
    counterexample and its replay command; a sweep that judged nothing fails it too."""
    kp = crashed["points"][10]
    double = crashed["verdicts"][crashed["prompt_only"]]
    written = crashed["verdicts"]["as written"]
    found = cs.Exploration(SCENARIO, crashed["golden"], crashed["points"], [written],
                           kills_landed=1)
    found.assert_ok(f"{SPEC}:run_billing")  # as written: resumed correctly
    found.verdicts.append(double)
    with pytest.raises(AssertionError) as caught:
        found.assert_ok(f"{SPEC}:run_billing")
    assert kp.id in str(caught.value) and "applied 2 times" in str(caught.value)
    assert "replay: faultsim replay fs1_" in str(caught.value)
    with pytest.raises(AssertionError, match="nothing was tested"):
        cs.Exploration(SCENARIO, crashed["golden"], crashed["points"]).assert_ok()


def test_an_agent_on_claude_sdk_client_is_run_and_judged_the_same(tmp_path):
    """The SDK's other entry point: `ClaudeSDKClient` (streaming input to the CLI) instead of
    `query()`. Same kill points, and the same double email from the same kind of state."""
    if cs.cli_unavailable():
        pytest.skip(cs.cli_unavailable())
    run = claude_billing_agent.run_billing_client
    root = tmp_path / "sandbox"
    golden, points, clean = cs.golden_run(run, SCENARIO, root)
    assert golden.outcome.final_answer == SCENARIO.expected_final_answer, clean.error
    assert [kp.key for kp in points] == EXPECTED_POINTS
    target = next(kp for kp in points if kp.key == ("after-effect", "send", 1))
    world = SCENARIO.build_world()
    cs.restore(root, {})
    crash = cs.incarnation(run, SCENARIO, world, root, target=target)
    assert crash.landed and crash.files is not None, crash.error
    states = dict(cs.crash_states(crash.files))
    prompt_only = next(n for n in states if n.endswith("(user)"))
    verdict = cs.resume(run, SCENARIO, golden, world, root, target, prompt_only,
                        states[prompt_only])
    assert "effects duplicated" in cs.classify(verdict), verdict.violations


# -- the CLI's built-in tools --------------------------------------------------------------
SHELL_SCENARIO = '''
id = "cs_shell_receipt"
task = "Record that invoice INV-7 is paid in workspace/receipts.txt."
expected_final_answer = "Recorded INV-7 in workspace/receipts.txt."
start_time = "2026-11-02T09:00:00Z"
model = "claude-sonnet-4-5"

[[turns]]
text = "Appending the receipt."
tool_calls = [{ name = "Bash", input = { command = "mkdir -p workspace && echo 'INV-7 paid' >> workspace/receipts.txt", description = "Record the receipt" } }]
[[turns]]
final = "Recorded INV-7 in workspace/receipts.txt."
'''


async def run_shell_receipt(task: str, workdir: Path) -> str:
    """A user's agent whose only tool is the CLI's own Bash, appending to a file under its
    working directory; the session id kept in session.json, resumed after a restart."""
    from claude_agent_sdk import ClaudeAgentOptions, ResultMessage, SystemMessage, query

    state = workdir / "session.json"
    session_id = json.loads(state.read_text())["session_id"] if state.exists() else None
    options = ClaudeAgentOptions(model="claude-sonnet-4-5", cwd=workdir,
                                 allowed_tools=["Bash"], resume=session_id)
    answer = None
    async for message in query(prompt=task if session_id is None else
                               "Continue the task where you left off.", options=options):
        if isinstance(message, SystemMessage) and message.subtype == "init" and \
                session_id is None:
            session_id = message.data["session_id"]
            state.write_text(json.dumps({"session_id": session_id}))
        elif isinstance(message, ResultMessage):
            answer = message.result
    return answer


def test_a_builtin_tool_has_kill_points_and_its_files_are_crash_state(tmp_path):
    """The CLI's Bash acts on the sandbox's work/ (crash state; its workspace/ is the agent's
    output, compared with the clean run's); hooks on every tool give it kill points where the
    CLI waits on faultsim. Killed after the append ran and before the CLI recorded it, a
    resume from the transcript back to the task appends again: caught."""
    if cs.cli_unavailable():
        pytest.skip(cs.cli_unavailable())
    path = tmp_path / "shell.toml"
    path.write_text(SHELL_SCENARIO)
    scenario = faultsim.load_scenario(path)
    root = tmp_path / "sandbox"
    golden, points, clean = cs.golden_run(run_shell_receipt, scenario, root)
    assert clean.outcome.final_answer == scenario.expected_final_answer, clean.error
    assert cs.snapshot(root)["work/workspace/receipts.txt"] == b"INV-7 paid\n"
    assert [kp.key for kp in points] == [
        ("model-request", "turn1", 1), ("after-tool-use", "turn1", 1),
        ("builtin-start", "Bash", 1), ("builtin-end", "Bash", 1),
        ("model-request", "turn2", 1)]
    target = points[3]
    world = scenario.build_world()
    cs.restore(root, {})
    crash = cs.incarnation(run_shell_receipt, scenario, world, root, target=target)
    assert crash.landed and crash.files["work/workspace/receipts.txt"] == b"INV-7 paid\n"
    states = dict(cs.crash_states(crash.files))
    prompt_only = next(n for n in states if n.endswith("(user)"))
    again = cs.resume(run_shell_receipt, scenario, golden, world, root, target, prompt_only,
                      states[prompt_only])
    assert again.resumed_at == 0 and cs.snapshot(root)["work/workspace/receipts.txt"] == \
        b"INV-7 paid\nINV-7 paid\n"
    assert "outputs_match" in {v.invariant for v in again.violations}, again.violations
    # killed before the append: the same resume appends once, and passes
    before = points[2]
    world = scenario.build_world()
    cs.restore(root, {})
    crash = cs.incarnation(run_shell_receipt, scenario, world, root, target=before)
    assert crash.landed and "work/workspace/receipts.txt" not in crash.files
    states = dict(cs.crash_states(crash.files))
    prompt_only = next(n for n in states if n.endswith("(user)"))
    once = cs.resume(run_shell_receipt, scenario, golden, world, root, before, prompt_only,
                     states[prompt_only])
    assert cs.snapshot(root)["work/workspace/receipts.txt"] == b"INV-7 paid\n"
    assert not [v for v in once.violations if v.invariant != "one_step_repeated_per_crash"], \
        once.violations


# -- the equal-state memo (memo.py) ---------------------------------------------------------
def _findings(result) -> list:
    """Which crash states fail, with which rules: a state by its kill point, whether it is
    the state as written, and how many conversation entries its transcript holds (not by
    its entry numbers: the metadata lines between conversation entries vary from run to
    run)."""
    out = []
    for v in result.verdicts:
        talk = -1  # no transcript at all
        for path, data in v.crash_state.files:
            if is_transcript(path) and data is not None:
                talk = sum(1 for line in data.split(b"\n")[:-1]
                           if cs.states.entry_kind(line) in ("user", "assistant"))
        out.append((v.kill_point.id, v.state == "as written", talk,
                    tuple(sorted(x.invariant for x in v.violations))))
    return sorted(out)


def test_equal_crash_states_share_one_resumed_run_and_the_findings_do_not_change(tmp_path):
    """The memo and the stops on, and both off (the long way: a crash run killed at each
    point, every state resumed), on two kill points of the billing agent: the tool's handler
    entered and the payment about to be made leave the same sandbox (the CLI waits on the
    tool in both, its own ids and clock aside) and the same world, so each state of the
    second is the first's. The findings (which states fail, with which rules) are the same
    either way, and the report counts the shared states as the other backends do. With the
    stops, one run read both points' states (each stop proven: the CLI's group stopped)."""
    if cs.cli_unavailable():
        pytest.skip(cs.cli_unavailable())
    keep = {"k3-handler-entry-pay_invoice#1", "k4-before-effect-pay#1"}
    run = claude_billing_agent.run_billing
    on = cs.explore(run, SCENARIO, only=lambda kp: kp.id in keep, writes=False,
                    root=tmp_path / "on" / "sandbox")
    off = cs.explore(run, SCENARIO, only=lambda kp: kp.id in keep, writes=False,
                     root=tmp_path / "off" / "sandbox", share=False, stops=False)
    assert _findings(on) == _findings(off)
    assert any(v.violations for v in on.verdicts) and any(v.ok for v in on.verdicts)
    assert off.resumed == len(off.verdicts) and off.incarnations == 1 + 2 + len(off.verdicts)
    assert (off.kills_landed, off.stopped) == (2, 0)
    shared = [v for v in on.verdicts if v.shared]
    assert shared and on.incarnations == 1 + 1 + on.resumed
    assert (on.kills_landed, on.stopped) == (2, 2)
    for v in shared:  # each from the same state of the other point
        assert v.kill_point.id == "k4-before-effect-pay#1", v
        assert v.shared.startswith("k3-handler-entry-pay_invoice#1 ["), v.shared
    from faultsim.adapters.claude_agent_sdk.report import model_runs

    (model_run,) = model_runs(on, "claude-agent-sdk:agent", ("process",), timeout=60.0)
    assert (model_run.judged, model_run.reused) == (on.resumed, len(shared))
    assert model_run.to_json()["crash_states_resumed"] == on.resumed


@pytest.mark.parametrize("trouble", ["the group did not stop", "a call was refused"])
def test_a_stop_that_cannot_go_on_as_the_clean_run_is_that_points_kill(trouble, tmp_path,
                                                                      monkeypatch):
    """A stop reads a crash state and lets the run go on only where the run is still the
    clean run's and the stop is proven: where the CLI's group is not proven stopped, or the
    world refused a call while the state was read (the CLI got an error no clean run gets),
    the stop is that point's kill instead: the group SIGKILLed and checked dead, the run
    ended there, the state judged as a crash run's."""
    if cs.cli_unavailable():
        pytest.skip(cs.cli_unavailable())
    from faultsim.adapters.claude_agent_sdk import control

    if trouble == "the group did not stop":
        monkeypatch.setattr(control, "stop_groups", lambda pids: False)
    else:
        quiesce = control._quiesce

        def refused_meanwhile(root, settle):
            quiesce(root, settle)
            assert control.RUNNING.controller.world.sealed  # as a refused call asks

        monkeypatch.setattr(control, "_quiesce", refused_meanwhile)
    keep = "k3-handler-entry-pay_invoice#1"
    found = cs.explore(claude_billing_agent.run_billing, SCENARIO, prefixes="written",
                       only=lambda kp: kp.id == keep, writes=False, root=tmp_path / "sandbox")
    assert (found.kills_landed, found.stopped) == (1, 0)
    assert found.incarnations == 1 + 1 + 1  # clean, the stop turned kill, one resume
    monkeypatch.undo()
    long_way = cs.explore(claude_billing_agent.run_billing, SCENARIO, prefixes="written",
                          only=lambda kp: kp.id == keep, writes=False, stops=False,
                          root=tmp_path / "long" / "sandbox")
    assert [v.kill_point.id for v in found.verdicts] == [keep]
    assert _findings(found) == _findings(long_way)


def test_the_memo_key_renames_the_clis_ids_and_masks_its_clock_but_nothing_else():
    """Two sandboxes that differ only in the CLI's random ids and its clock have one key;
    any difference in what the conversation holds, in the agent's files, or in an id the
    agent keeps, gives another."""
    from faultsim.adapters.claude_agent_sdk.memo import canonical

    sid = "b2f40392-deb4-554a-8924-0aecc4a2fb53"
    path = f"claude/projects/-sandbox-work/{sid}.jsonl"

    def sandbox(u1, u2, when, pid, text="hi", kept=sid):
        lines = [{"type": "user", "uuid": u1, "parentUuid": None, "timestamp": when,
                  "sessionId": sid, "message": {"role": "user", "content": text}},
                 {"type": "assistant", "uuid": u2, "parentUuid": u1, "timestamp": when,
                  "thinkingDurationMs": pid % 97, "sessionId": sid,
                  "message": {"role": "assistant", "content": "ok"}}]
        return {path: b"".join(json.dumps(x).encode() + b"\n" for x in lines),
                "claude/.claude.json": json.dumps({"userID": "ab" * 32,
                                                   "firstStartTime": when}).encode(),
                f"claude/sessions/{pid}.json": json.dumps({"pid": pid}).encode(),
                f"claude/backups/.claude.json.backup.{pid}000000": b"{}",
                "work/session.json": json.dumps({"session_id": kept}).encode()}

    a = sandbox("11111111-1111-4111-8111-111111111111", "22222222-2222-4222-8222-222222222222",
                "2026-12-02T03:07:55.630Z", 1796180)
    b = sandbox("33333333-3333-4333-8333-333333333333", "44444444-4444-4444-8444-444444444444",
                "2026-12-02T03:09:01.002Z", 1796999)
    # the MCP server's debug log, flushed on the CLI's timer: there in one state only
    b["home/.cache/claude-cli-nodejs/-sandbox-work/mcp-logs-billing/"
      "2026-12-02T03-09-01-002Z.jsonl"] = b'{"debug":"Tool completed in 96ms"}\n'
    assert canonical(a).digest() == canonical(b).digest()
    # the link between two entries is part of the state: entry 2's parent is another id
    c = dict(b)
    c[path] = b[path].replace(b'"parentUuid": "33333333', b'"parentUuid": "55555555')
    assert canonical(a).digest() != canonical(c).digest()
    # what the model was sent is exact, even where it looks like an id or a clock
    ref = "66666666-6666-4666-8666-666666666666"
    d, g = (sandbox("33333333-3333-4333-8333-333333333333",
                    "44444444-4444-4444-8444-444444444444", "2026-12-02T03:09:01.002Z",
                    1796999, text=[{"type": "text", "text": x}]) for x in (ref, ref.replace("6", "7")))
    assert canonical(d).digest() != canonical(g).digest()
    # the agent's own files are exact, and an id it keeps (or a path names) stays itself in
    # the CLI's files: a transcript of another session at this session's path is another
    # state, though the renaming alone would make it the same
    other = "c0ffee00-deb4-454a-8924-0aecc4a2fb53"
    e = dict(b)
    e[path] = b[path].replace(sid.encode(), other.encode())
    assert canonical(a).digest() != canonical(e).digest()
    f = dict(b)
    f["work/session.json"] = b["work/session.json"].replace(b"}", b" }")
    assert canonical(a).digest() != canonical(f).digest()
    # and the world is in the key: the same sandbox after one more effect is another state
    from faultsim.adapters.claude_agent_sdk.memo import key

    world = SCENARIO.build_world()
    before = key(a, world)
    assert key(b, world)[1] == before[1]
    world.services["email"].send({"to": "x@example.com", "body": "again"})
    assert key(a, world)[1] != before[1]
