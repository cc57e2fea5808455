"""The report's `shortcuts` block (faultsim.reports.shortcuts, issue 53): each of the sweep's
shortcuts (convergence, leads, the aftermath of convergence, the memo of equal states, the
kill's aftermath read from the code) says how often it applied and, where it never did,
why; in the JSON report, in the summary, and alike in merged shards."""
from __future__ import annotations

import re

import pytest

import faultsim
from faultsim.reports import merge as report_merge
from faultsim.cli.console import print_run
from faultsim.inprocess import cpython
from faultsim.scenario import load_scenario
from faultsim.reports.shortcuts import NAMES, off

import convergence_agents
import logging_transport_agent
import reference_agent

# cuts are made only where cpython.py reads frames (test_convergence.py says the same)
shortcut = pytest.mark.skipif(cpython.shapes() is None,
                              reason=f"no cut here: {cpython.unknown()}")
REFUSED = re.compile(r"the agent holds a \S+, whose state faultsim cannot read")


def lookups(tmp_path, steps: int):
    """A small loop: N lookups, one per turn, then the answer (the reference agent keeps
    its own checkpoint files, so none is declared)."""
    path = tmp_path / f"lookups_{steps}.toml"
    path.write_text(convergence_agents.scenario_text(steps).replace(
        '[checkpoint]\nfiles = ["state.json"]\n', ""))
    return load_scenario(path)


def block(report) -> dict:
    (run,) = report.runs
    return run.to_json()["shortcuts"]


@shortcut
def test_each_shortcut_applies_on_the_reference_agent(tmp_path):
    found = block(faultsim.explore(reference_agent.make_agent, lookups(tmp_path, 2),
                                   crash_model="process", crashes=2, workers=2))
    assert list(found) == list(NAMES)
    for name, entry in found.items():
        assert 0 < entry["applied"] <= entry["of"], name
        assert entry["why_not"] is None, name
    assert not off(found)  # nothing to say in the summary
    for name in ("convergence", "leads"):  # every run not cut has its reason counted
        cut = found["convergence"]["applied"] + (found["leads"]["applied"]
                                                 if name == "leads" else 0)
        assert sum(found[name]["refused"].values()) == found[name]["of"] - cut


@shortcut
def test_a_logging_transport_turns_convergence_off_and_the_report_says_why(tmp_path,
                                                                            capsys):
    """The reference agent with its client behind a user's logging transport: the
    transport's module holds a logger, whose handler's stream (and, through the logging
    manager, every logger's) the memory fingerprint cannot read. No run is cut; the old
    `convergence` field says nothing (it names only a reason that holds for every run),
    the block and the summary name the check's reason."""
    report = faultsim.explore(logging_transport_agent.make_agent, lookups(tmp_path, 3),
                              crash_model="process", crashes=1, workers=2)
    (run,) = report.runs
    data = run.to_json()
    found = data["shortcuts"]
    assert data["convergence"] is None and data["crash_states_converged"] == 0
    conv = found["convergence"]
    assert conv["applied"] == 0 and conv["of"] > 0
    assert REFUSED.fullmatch(conv["why_not"]), conv["why_not"]
    assert conv["refused"][conv["why_not"]] > 0  # the reason runs were refused for
    # no lead either: a run's memory at its first request cannot be read
    assert found["leads"]["applied"] == 0 and found["leads"]["why_not"] == conv["why_not"]
    assert found["memo"]["applied"] > 0
    capsys.readouterr()
    print_run(run)
    (line,) = [x for x in capsys.readouterr().out.splitlines()
               if x.strip().startswith("shortcuts")]
    assert f"convergence 0 of {conv['of']} resumed runs (never: {conv['why_not']})" in line
    # the same agent without the transport is cut (the transport is the cause)
    plain = block(faultsim.explore(reference_agent.make_agent, lookups(tmp_path, 3),
                                   crash_model="process", crashes=1, workers=2))
    assert plain["convergence"]["applied"] > 0


@shortcut
def test_merged_shards_give_the_whole_runs_block(tmp_path):
    """Shards of crash states resume the whole run's single crashes between them: the
    merged block is the whole run's, with its reasons. Leads are the exception: a shard's
    runs meet only its own runs' states, so how many were cut so (and the reasons of the
    others) depends on the shards, as on the worker count; every resumed run is still
    counted once."""
    scen = lookups(tmp_path, 3)
    whole = faultsim.explore(reference_agent.make_agent, scen, crash_model="process",
                             crashes=1, workers=2).to_json()
    shards = [(f"shard{i}.json", faultsim.explore(
        reference_agent.make_agent, scen, crash_model="process", crashes=1, workers=2,
        shard=(i, 2)).to_json()) for i in (1, 2)]
    merged = report_merge.merge(shards)["runs"][0]["shortcuts"]
    alone = whole["runs"][0]["shortcuts"]
    assert alone["convergence"]["applied"] > 0 and alone["memo"]["applied"] > 0
    assert alone["unwind"]["applied"] > 0
    for name in ("convergence", "aftermath", "memo", "unwind"):
        assert merged[name] == alone[name], name
    leads = merged["leads"]
    assert leads["of"] == alone["leads"]["of"]
    assert leads["applied"] + sum(leads["refused"].values()) == \
        leads["of"] - merged["convergence"]["applied"]
    # and the reasons do not depend on the worker count (a run cut against an earlier
    # resumed run counts that run's reason)
    one_by_one = block(faultsim.explore(reference_agent.make_agent, scen,
                                        crash_model="process", crashes=1, workers=0))
    assert one_by_one["convergence"] == alone["convergence"]
    # nor the kills read (unwind): the replaying executor reads each at its own kill
    assert one_by_one["unwind"] == alone["unwind"]


@shortcut
def test_a_loggers_memo_of_levels_is_not_state_its_levels_are():
    """A module-level logger reaches every logger of the process (`Logger.manager`), and
    each one's `_cache`, a memo of isEnabledFor filled as a level is first asked (httpx's,
    after each response): compared, the two clean runs differed at their first request and
    no run was cut (the first run of a process, the logging transport without a handler).
    The memo is left out; the levels it is a function of are compared."""
    import logging

    from faultsim.inprocess import fingerprints

    log = logging.Logger("shortcuts-test")  # not registered: the test leaves no logger

    def digest():
        canon = fingerprints._Canon()
        canon.add({"log": log})
        return canon.digest()

    before = digest()
    log.isEnabledFor(logging.INFO)  # fills the memo
    assert log._cache and digest() == before
    log.setLevel(logging.DEBUG)  # what the agent would log: state
    assert digest() != before
