"""A world stored as JSON and restored into a fresh world of the same scenario is the same
world: what a checkpoint corpus relies on."""
from __future__ import annotations

import json

import pytest

import reference_agent
from conftest import DATA
from faultsim import load_scenario, run_once
from faultsim.pipeline.incarnation import world_signature
from faultsim.world.snapshot import SnapshotError, restore_world, world_to_json


@pytest.mark.parametrize("name", ["tiny.toml", "subagents.toml"])
def test_a_world_survives_json(name):
    scenario = load_scenario(DATA / name)
    world = run_once(scenario, reference_agent.make_agent).world
    data = json.loads(json.dumps(world_to_json(world)))
    again = restore_world(scenario.build_world(), data)
    assert world_signature(again) == world_signature(world)
    assert again.ledger.entries == world.ledger.entries
    assert again.model.requests == world.model.requests
    assert world_to_json(again) == data


def test_a_world_of_another_scenario_is_refused():
    world = run_once(load_scenario(DATA / "tiny.toml"), reference_agent.make_agent).world
    with pytest.raises(SnapshotError, match="services"):
        restore_world(load_scenario(DATA / "pair.toml").build_world(), world_to_json(world))
