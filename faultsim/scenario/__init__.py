"""Scenario files: the format, its loader, its checks and its JSON Schema.

- `types`: the data types (`Scenario`, `FaultProfile`, ...) and `ScenarioError`;
- `load`: the format in one table (`SECTIONS`), durations, `load_scenario`/`parse_scenario`;
- `rules`: the rules beyond one key's type, which the loader and `validate` both apply;
- `validate`: `faultsim validate` (every problem of a file, with its line);
- `schema`: the JSON Schema generated from the table (`faultsim scenario schema`).

The names of the loader and the types are re-exported here (`from faultsim.scenario import
load_scenario`); `validate` and `schema` are imported on their own, when used.
"""
from __future__ import annotations

from .load import (DURATION_EXPECTED, MOVED_FAULTS, REQUIRED, SECTIONS, Field, default,
                   format_duration, keys, load_scenario, parse_duration, parse_scenario)
from .types import (CRASH_MODEL_NAMES, MAIN_TAG, STORE_KINDS, FaultProfile, LangGraphSpec,
                    Scenario, ScenarioError, ServiceSpec, StoreSpec, show_value)

__all__ = ["CRASH_MODEL_NAMES", "DURATION_EXPECTED", "MAIN_TAG", "MOVED_FAULTS", "REQUIRED",
           "SECTIONS", "STORE_KINDS", "FaultProfile", "Field", "LangGraphSpec", "Scenario",
           "ScenarioError", "ServiceSpec", "StoreSpec", "default", "format_duration", "keys",
           "load_scenario", "parse_duration", "parse_scenario", "show_value"]
