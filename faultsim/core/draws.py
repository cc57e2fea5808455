"""faultsim's own hypothesis draws (the schedule search, the hostile checkpoint files) follow
their seed and their strategies alone.

Hypothesis (6.131 on) also draws, now and then, constants it finds in the source of every
*local* module the process has imported (`hypothesis.internal.conjecture.providers`,
"local constants"). For a user's own property tests that is a fine heuristic; for
faultsim's draws it is a leak: the same seed would draw other cases after any edit of
faultsim's or the agent's code that adds a literal, and other cases in a pytest worker than
in `faultsim run` (they import other modules). That is how adding a module to faultsim once
moved `faultsim formats check`'s "98 drawn" to 99. Inside `seed_only()` the pool of local
constants is empty; hypothesis's global constants (boundary values it always mixes in) stay,
so the draws are as strong as before and depend only on hypothesis's version and the seed.

The pool is a private of hypothesis (pinned `<7` in pyproject.toml); where it is absent
(an older hypothesis with no local constants) there is nothing to pin.
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator


@contextmanager
def seed_only() -> Iterator[None]:
    try:
        from hypothesis.internal.conjecture import providers
        from hypothesis.internal.constants_ast import Constants
    except ImportError:  # pragma: no cover - a hypothesis without local constants
        yield
        return
    original = getattr(providers, "_get_local_constants", None)
    cache = getattr(providers, "CONSTANTS_CACHE", None)
    if original is None or cache is None:  # pragma: no cover
        yield
        return
    empty = Constants()
    # the cache holds (global, local) choices per kind of draw: drop what was computed with
    # the process's pool on the way in, and what was computed with none on the way out
    cache.cache.clear()
    providers._get_local_constants = lambda: empty
    try:
        yield
    finally:
        providers._get_local_constants = original
        cache.cache.clear()
