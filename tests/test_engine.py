"""The crash engine end to end: the reference agent passes every kill point under both
crash models; every mutant is caught with its rule named; verdicts are deterministic;
bad agents are reported, not waited on."""
from __future__ import annotations

import importlib
import os

import pytest

import broken_agents as agents  # not `agents`: the OpenAI Agents SDK's package name
import reference_agent
from conftest import DATA, SCENARIOS
from faultsim import NonDeterminismError, explore, load_scenario
from faultsim.errors import AgentFailedCleanly, SandboxEscape
from faultsim.killpoints import REQUIRED_ON_REFERENCE, categories


@pytest.fixture(scope="module")
def tiny():
    return load_scenario(DATA / "tiny.toml")


def violated(report) -> set[str]:
    return {v.invariant for run in report.runs for f in run.failures for v in f.violations}


# The whole library passes under each scenario's own fault profile: README's first command,
# run by tests/test_docs.py. Here the model scenario goes through both crash models.
@pytest.mark.parametrize("path", [SCENARIOS / "support_tickets.toml"], ids=lambda p: p.stem)
def test_reference_agent_passes_every_kill_point_under_both_models(path):
    report = explore(reference_agent.make_agent, load_scenario(path), crashes=1, crash_model="all")
    assert report.ok, "\n\n".join(report.counterexamples())
    assert {run.crash_model for run in report.runs} == {"process", "power"}
    for run in report.runs:
        assert len(run.explored) == len(run.kill_points) > 500
        assert len(run.verdicts) >= len(run.kill_points)  # power: several states per point
        assert run.judged > 50  # states really resumed, not all taken from the memo
    found = {c for c, n in categories(report.runs[0].explored).items() if n}
    assert set(REQUIRED_ON_REFERENCE) <= found
    assert all(p.ok for p in report.runs[0].probes) and report.runs[0].probes


MUTANTS = [  # mutant, the crash model that exposes it, the guard that must fire
    ("messages_only", "process", "api_valid"),
    ("save_b_only", "process", "effects_exactly_once"),
    ("overwrite_in_place", "process", "checkpoint_whole"),
    ("rename_without_fsync", "power", "checkpoint_whole"),
    ("unknown_version_parsed", "process", "unknown_version_refused"),
    ("counters_reset", "process", "counters_continue"),
    ("reask_instead_of_reconcile", "process", "effects_exactly_once"),
    ("orphan_tool_use", "process", "api_valid"),
    ("key_after_effect", "process", "effects_exactly_once"),
    ("progress_appended", "process", "progress_recorded_once"),
    ("progress_trusted", "power", "outputs_match"),
    ("blind_without_intent", "process", "effects_exactly_once"),
]


@pytest.mark.parametrize("name,model,guard", MUTANTS, ids=[m[0] for m in MUTANTS])
def test_every_mutant_is_caught_with_its_rule_named(name, model, guard, tiny):
    module = importlib.import_module(f"reference_agent.mutants.{name}")
    report = explore(module.make_agent, tiny, crashes=1, crash_model=model, agent_name=module.__name__)
    assert not report.ok
    assert guard in violated(report)
    text = "\n".join(report.counterexamples(limit=20))
    # a crash replays from its token; the version probe by re-running the scenario
    assert f"VIOLATED {guard}" in text and ("replay: faultsim replay fs1_" in text or
                                           "probe-unknown-version" in text)
    rule = module.__doc__.split()[0]  # "P3", "P1/P5", ...
    rules = {v.rule for run in report.runs for f in run.failures for v in f.violations}
    assert any(set(rule.split("/")) & set(r.split("/")) for r in rules), (rule, rules)


def test_rename_without_fsync_survives_a_process_kill(tiny):
    from reference_agent.mutants import rename_without_fsync

    report = explore(rename_without_fsync.make_agent, tiny, crashes=1, crash_model="process")
    assert report.ok, "\n".join(report.counterexamples())


def _verdicts(report):
    return [(run.crash_model, v.kill_point.id, v.persisted,
             [(x.invariant, x.explanation) for x in v.violations])
            for run in report.runs for v in run.verdicts]


def test_same_seed_same_verdicts_and_counterexamples(tiny):
    from reference_agent.mutants import key_after_effect

    runs = [explore(key_after_effect.make_agent, tiny, crashes=1, crash_model="all") for _ in range(2)]
    assert _verdicts(runs[0]) == _verdicts(runs[1])
    assert runs[0].counterexamples(10) == runs[1].counterexamples(10)


def test_forking_and_replaying_executors_agree(tiny):
    from reference_agent.mutants import save_b_only

    def every_7th(point):
        return point.index % 7 == 0

    forked = explore(save_b_only.make_agent, tiny, crashes=1, crash_model="all", only=every_7th)
    replayed = explore(save_b_only.make_agent, tiny, crashes=1, crash_model="all", only=every_7th,
                       workers=0)
    assert _verdicts(forked) == _verdicts(replayed)
    assert not forked.ok


def test_assert_ok_raises_a_readable_counterexample(tiny):
    from reference_agent.mutants import blind_without_intent

    report = explore(blind_without_intent.make_agent, tiny, crashes=1)
    with pytest.raises(AssertionError) as info:
        report.assert_ok()
    text = str(info.value)
    assert "VIOLATED effects_exactly_once (P8/P11)" in text
    assert "email.send" in text and "applied 2 times, the clean run 1" in text
    assert "---- KILL ----" in text and "checkpoint on disk at the kill" in text
    assert "replay: faultsim replay fs1_" in text and "   or: faultsim run" in text
    assert "--kill-point k" in text
    explore(reference_agent.make_agent, tiny, crashes=1).assert_ok()  # and a clean one does not raise


def test_a_factory_that_raises_on_start_is_reported(tiny):
    with pytest.raises(AgentFailedCleanly, match="cannot read my configuration"):
        explore(agents.raises_on_start, tiny, crashes=1)


def test_a_hanging_agent_is_stopped_and_reported(tiny):
    report = explore(agents.hangs_on_resume, tiny, crashes=1, timeout=3,
                     only=lambda p: p.id.startswith(("k20-", "k40-")))
    failures = [v for run in report.runs for f in run.failures for v in f.violations]
    assert len(failures) == 2
    assert all(v.invariant == "completes_or_escalates" and "hung" in v.explanation
               for v in failures), [v.explanation for v in failures]


def test_a_child_that_swallows_its_time_limit_is_killed_from_outside(tiny):
    # the backstop: the parent kills a child past 3 x timeout + 5 s of time it had a CPU
    # for (not time it waited for one: a starved child reports its own hang, above)
    report = explore(agents.swallows_the_limit, tiny, crashes=1, timeout=1, workers=1,
                     only=lambda p: p.id.startswith("k20-"))
    failures = [v for run in report.runs for f in run.failures for v in f.violations]
    assert [v.explanation for v in failures] == [
        "the crash run did not finish within 8 s and was killed"]


def test_writes_outside_the_workdir_are_reported_never_performed(tiny):
    real = "/tmp/faultsim-escape-test.log"
    assert not os.path.exists(real)
    with pytest.raises(SandboxEscape, match=r"open for writing /tmp/faultsim-escape-test"
                       r"\.log \(at tests/broken_agents\.py:\d+\)"):
        explore(agents.escapes_sandbox, tiny, crashes=1, only=lambda p: p.id.startswith("k30-"))
    assert not os.path.exists(real)


def test_cleanup_the_kill_runs_is_no_finding(tiny):
    # a `finally:` that saves: a real SIGKILL never runs it, so what it writes as the kill
    # unwinds never lands and nothing is reported (tests/test_finality.py reads the bytes)
    report = explore(agents.writes_in_finally, tiny, crashes=1)
    assert sum(len(run.verdicts) for run in report.runs) > 20
    assert report.ok, report.counterexamples(3)


def test_a_non_deterministic_agent_is_refused_with_where_the_runs_part(tiny):
    with pytest.raises(NonDeterminismError, match=r"part at event #\d+.*scratch-"):
        explore(agents.flaky, tiny, crashes=1)


@pytest.mark.parametrize("name", ["overwrite_in_place", "progress_trusted"])
def test_shared_verdicts_equal_resuming_every_state(name, tiny):
    """States a resumed run could not tell apart share one verdict; resuming each of them
    instead must give exactly the same verdicts (including where the mutant fails)."""
    module = importlib.import_module(f"reference_agent.mutants.{name}")
    shared = explore(module.make_agent, tiny, crashes=1, crash_model="all")
    every = explore(module.make_agent, tiny, crashes=1, crash_model="all", equivalences=False)
    assert _verdicts(shared) == _verdicts(every)
    assert not shared.ok
    assert sum(r.judged for r in shared.runs) < sum(r.judged for r in every.runs)


def test_an_async_agent_forked_mid_run_finds_its_event_loop_in_the_child():
    """The forking executor forks inside a running agent. asyncio ties the running loop to
    the pid that started it: without `run_agent` re-tying it after a fork, the child finds
    no running loop (pydantic-ai's tool execution then waited forever on a future made on a
    fresh loop)."""
    import asyncio
    import os
    import pickle

    from faultsim.agent import run_agent

    class Forks:
        async def run(self):
            await asyncio.sleep(0)
            read, write = os.pipe()
            pid = os.fork()
            if pid == 0:  # the child: report what it finds, then leave at once
                try:
                    loop = asyncio.get_running_loop()
                    future = loop.create_future()
                    loop.call_soon(future.set_result, "resolved")
                    found = await asyncio.wait_for(future, 5)
                except BaseException as exc:  # noqa: BLE001 - reported to the parent
                    found = f"{type(exc).__name__}: {exc}"
                os.write(write, pickle.dumps(found))
                os._exit(0)
            os.close(write)
            os.waitpid(pid, 0)
            with os.fdopen(read, "rb") as f:
                return pickle.loads(f.read())

    assert run_agent(Forks()) == "resolved"


def test_thread_pools_still_work_after_a_sweep(tiny):
    """faultsim wraps a private method of concurrent.futures (to know which incarnation a
    pool thread works for) for the rest of the process; on 3.14 that method takes one more
    argument, and a wrapper that did not pass it on broke every pool afterwards (an async
    client's address lookup then waited forever)."""
    from concurrent.futures import ThreadPoolExecutor

    explore(reference_agent.make_agent, tiny, crashes=1,
            only=lambda p: p.id.startswith("k20-"))
    with ThreadPoolExecutor(1) as pool:
        assert pool.submit(lambda: 42).result(timeout=10) == 42
