"""`python -m faultsim.cli`: the same command as `faultsim`."""
import sys

from . import main

sys.exit(main())
