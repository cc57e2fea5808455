"""The jail moved to `faultsim.jail` (the command backend contains its processes the same
way, and no backend imports another): its names, where subprocess mode and its tests
have always found them."""
from __future__ import annotations

from ..jail import (FORCE_ENV, Jail, enter, establish, left_behind, refused,  # noqa: F401
                    subreaper)
