"""`python -m faultsim`: the same command as `faultsim` (where the script is not on PATH)."""
from .cli import entry

entry()
