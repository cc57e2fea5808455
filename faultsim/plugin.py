"""Moved: `faultsim.pytest.plugin`. This old name is the same module, without a warning:
an environment installed before the move names it as its pytest11 entry point (the
entry point changes when faultsim is installed again)."""
import sys

from .pytest import plugin as _moved

sys.modules[__name__] = _moved
