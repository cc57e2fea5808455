"""`python -m faultsim.cli`: the same command as `faultsim`."""
from . import entry

entry()
