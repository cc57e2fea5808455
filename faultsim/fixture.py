"""Moved: `faultsim.pytest.fixture` (the fixture), `faultsim.pytest.settings` (the marker,
`parametrize`, the options) and `faultsim.pytest.state` (a session's state, kill-point
items). This old name keeps their names for one release, with a deprecation warning;
`faultsim.parametrize` and `faultsim.FaultsimFixture` are unchanged."""
import warnings

from .options import MODES, ExploreOptions, OptionError, in_shard  # noqa: F401
from .pytest.fixture import FaultsimFixture, known_errors, told  # noqa: F401
from .pytest.settings import (DEFAULTS, MARKER, FaultsimUsageError, Options,  # noqa: F401
                              Settings, factory_and_name, parametrize, parse_shard,
                              resolve_scenario, settings_for, settings_for_options)
from .pytest.state import BrokenParam, PluginState, PointParam, rerun_id  # noqa: F401

warnings.warn("faultsim.fixture is now faultsim.pytest (fixture, settings, state); the old "
              "name goes in the next release", DeprecationWarning, stacklevel=2)
