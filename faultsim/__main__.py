"""`python -m faultsim`: the same command as `faultsim` (where the script is not on PATH)."""
import sys

from .cli import main

sys.exit(main())
