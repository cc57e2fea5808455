"""Moved: `faultsim.scenario.schema`. This old name is the same module (a deprecation
warning says so) for one release."""
import sys
import warnings

from .scenario import schema as _moved

warnings.warn("faultsim.scenario_schema is now faultsim.scenario.schema; the old name goes in "
              "the next release", DeprecationWarning, stacklevel=2)
sys.modules[__name__] = _moved
