"""Moved: `faultsim.scenario.validate`. This old name is the same module (a deprecation
warning says so) for one release."""
import sys
import warnings

from .scenario import validate as _moved

warnings.warn("faultsim.validate is now faultsim.scenario.validate; the old name goes in the "
              "next release", DeprecationWarning, stacklevel=2)
sys.modules[__name__] = _moved
