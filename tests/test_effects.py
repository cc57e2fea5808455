"""`faultsim.effect`: a user's own tool functions, routed to the scenario's services while
faultsim runs the agent and called as written otherwise; proven on an agent that is not
the reference agent (tests/effect_agent.py), in both modes."""
from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import faultsim
from faultsim import effect
from tests import effect_agent
from tests.helpers import scenario_from

ROOT = Path(__file__).resolve().parent.parent
SCENARIO = '''
id = "billing_effects"
task = "Charge CUST-1 500 cents, note it on their record, then charge 700."
expected_final_answer = "Done."
[services.billing]
kind = "keyed"
[services.crm]
kind = "queryable"
records."CUST-1" = { name = "Ada" }
[[turns]]
tool_calls = [{ name = "charge_card", input = { customer = "CUST-1", cents = 500 } }]
[[turns]]
tool_calls = [{ name = "note_customer", input = { customer = "CUST-1", note = "charged 500" } }]
[[turns]]
tool_calls = [{ name = "charge_card", input = { customer = "CUST-1", cents = 700 } }]
[[turns]]
final = "Done."
[fault_profile]
crashes = 1
'''


@pytest.fixture(scope="module")
def scenario(tmp_path_factory):
    return scenario_from(tmp_path_factory, SCENARIO)


def test_outside_faultsim_the_function_runs_as_written():
    before = effect_agent.CALLS["body"]
    assert effect_agent.charge_card("CUST-1", 5, idempotency_key="k") == {"charged": 5,
                                                                          "real": True}
    assert asyncio.run(effect_agent.note_customer("CUST-1", "x")) == {"real": True}
    assert effect_agent.CALLS["body"] == before + 2
    assert effect_agent.charge_card.lookup("k") is None  # the lookup= given, outside
    assert effect_agent.charge_card.faultsim_effect.service == "billing"


def test_a_clean_run_routes_every_call_to_the_scenario_services(scenario):
    before = effect_agent.CALLS["body"]
    record = faultsim.run_once(scenario, effect_agent.make_agent)
    assert record.outcome.final_answer == "Done."
    applied = record.world.ledger.applied()
    assert [(e.service, e.op) for e in applied] == [
        ("billing", "submit"), ("crm", "apply"), ("billing", "submit")], applied
    assert [e.params for e in applied if e.service == "billing"] == [
        {"customer": "CUST-1", "cents": 500}, {"customer": "CUST-1", "cents": 700}]
    assert all(e.key.startswith(f"{scenario.id}:toolu_") for e in applied
               if e.service == "billing")  # the agent's key, not in the parameters
    assert effect_agent.CALLS["body"] == before  # no real body ran


def test_the_careful_agent_passes_and_its_kills_landed(scenario):
    report = faultsim.explore(effect_agent.make_agent, scenario, crashes=1, workers=0)
    run = report.runs[0]
    assert run.judged > 0 and len(run.verdicts) > 20  # crashes landed, resumed runs judged
    cats = {v.kill_point.category for v in run.verdicts}
    assert {"in-tool", "after-effect"} <= cats, cats  # the effect's marks place kill points
    assert report.ok, report.counterexamples(limit=1)


def test_a_new_key_per_run_duplicates_the_charge_and_is_caught(scenario):
    report = faultsim.explore(effect_agent.make_agent_new_key_each_run, scenario, crashes=1,
                              workers=0)
    assert not report.ok
    bad = {x.invariant for r in report.runs for v in r.failures for x in v.violations}
    assert bad == {"effects_exactly_once"}, bad  # the duplicate charge, and nothing else


def test_a_lookup_under_faultsim_reads_the_receiver(scenario):
    seen = []

    class Looker:
        def __init__(self, env):
            self.env = env

        def run(self):
            seen.append(effect_agent.charge_card.lookup("nothing-yet"))
            seen.append(effect_agent.charge_card("CUST-1", 1, idempotency_key="K1"))
            seen.append(effect_agent.charge_card.lookup("K1"))
            return "Done."

    faultsim.run_once(scenario, Looker)
    assert seen[0] is None and seen[2] == seen[1] and seen[1]["id"].startswith("billing-")


def test_errors_name_the_effect_and_the_service(scenario):
    @effect("nowhere")
    def lost(x):
        return x

    @effect("billing")  # keyed, but no key given
    def keyless(x):
        return x

    messages = []

    class Calls:
        def __init__(self, env):
            pass

        def run(self):
            for fn in (lost, keyless):
                try:
                    fn(1)
                except (KeyError, TypeError) as exc:
                    messages.append(str(exc))
            return "Done."

    faultsim.run_once(scenario, Calls)
    assert "effect 'lost' acts on service 'nowhere'" in messages[0]
    assert "billing" in messages[0]  # what the scenario has
    assert "give effect(..., key=" in messages[1]
    with pytest.raises(TypeError, match="the service is the name"):
        effect("")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="subprocess mode: Linux")
def test_subprocess_mode_routes_the_same_calls(scenario, tmp_path):
    out = tmp_path / "out.json"
    proc = subprocess.run(
        [sys.executable, "-m", "faultsim", "run", str(scenario.path), "--agent",
         "tests.effect_agent:make_agent_new_key_each_run", "--mode", "subprocess",
         "--workers", "2", "--json", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
        env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 1, proc.stderr[-2000:]  # the duplicate charge, found for real
    data = json.loads(out.read_text())
    assert {v["invariant"] for r in data["runs"] for v in r["violations"]} == \
        {"effects_exactly_once"}


def test_run_once_in_a_fresh_interpreter():
    # the first import of the SDK must not happen under the frozen clock (pydantic would
    # build its models around freezegun's FakeDatetime); a suite imports it early, so this
    # needs its own interpreter
    code = ("import faultsim; from tests import effect_agent; "
            "sc = faultsim.load_scenario('tests/data/tiny.toml'); "
            "import reference_agent; r = faultsim.run_once(sc, reference_agent.make_agent); "
            "print(r.outcome.final_answer)")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr[-1500:]
    assert "Refunded ORD-7" in proc.stdout


def test_a_service_the_clean_run_never_reaches_is_an_error(tmp_path_factory):
    from faultsim.errors import UnreachedService

    text = SCENARIO.replace('id = "billing_effects"', 'id = "billing_unreached"') + \
        '[services.refunds]\nkind = "keyed"\n'
    scenario = scenario_from(tmp_path_factory, text)
    with pytest.raises(UnreachedService) as info:
        faultsim.explore(effect_agent.make_agent, scenario, crashes=1, workers=0)
    message = str(info.value)
    assert "[services.refunds]" in message and "never reached" in message
    assert "faultsim.effect('refunds')" in message
