"""Same seed, same incarnation number → same random choices inside the agent.

Agents draw idempotency keys from `uuid.uuid4()`, temp names from `tempfile` and jitter from
`random`; faultsim's flake guard would call such an agent non-deterministic. Each
incarnation gets its own seeded stream: the crash run's first incarnation repeats the
golden run's choices exactly, and a resumed incarnation draws different ones, as a new
process would.
"""
from __future__ import annotations

import random
import tempfile
import uuid
from contextlib import contextmanager
from typing import Iterator


@contextmanager
def seeded(seed: str) -> Iterator[None]:
    rng = random.Random(seed)
    state = random.getstate()
    orig_uuid4 = uuid.uuid4
    names = tempfile._get_candidate_names()  # the module's shared name sequence
    orig_rng, orig_pid = getattr(names, "_rng", None), getattr(names, "_rng_pid", None)
    random.seed(seed)
    uuid.uuid4 = lambda: uuid.UUID(int=rng.getrandbits(128), version=4)
    import os
    names._rng, names._rng_pid = random.Random(seed + ":tempfile"), os.getpid()
    try:
        yield
    finally:
        uuid.uuid4 = orig_uuid4
        random.setstate(state)
        names._rng, names._rng_pid = orig_rng, orig_pid
