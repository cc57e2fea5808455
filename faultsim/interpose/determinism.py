"""Same seed, same incarnation number → same random choices inside the agent.

Agents draw idempotency keys from `uuid.uuid4()`, temp names from `tempfile` and jitter from
`random`; faultsim's flake guard would call such an agent non-deterministic. Each
incarnation gets its own seeded stream: the crash run's first incarnation repeats the
golden run's choices exactly, and a resumed incarnation draws different ones, as a new
process would.
"""
from __future__ import annotations

import random
import sys
import tempfile
import uuid
from contextlib import contextmanager
from typing import Iterator


_streams: list = []  # the seeded tempfile stream of the incarnation running now
_uuids = [0]  # uuid4() draws of the incarnation, but the SDK's idempotency headers


def draws() -> str:
    """Where the seeded streams stand (random's and tempfile's state, how many uuid4()
    the agent drew): the same text before and after a stretch of the run means it drew
    nothing from them in between (faultsim.inprocess.convergence). Not counted: the
    uuid4() the Anthropic SDK draws for each request's idempotency header, which only
    reaches that header (the fake reads no header; the SDK keeps it for that request's
    retries only)."""
    import hashlib

    text = repr(random.getstate()) + "".join(repr(r.getstate()) for r in _streams) + \
        f":{_uuids[0]}"
    return hashlib.blake2b(text.encode(), digest_size=16).hexdigest()


def _sdk_header(frame) -> bool:
    code = frame.f_code
    return code.co_name == "_idempotency_key" and "anthropic" in code.co_filename


@contextmanager
def seeded(seed: str) -> Iterator[None]:
    rng = random.Random(seed)
    state = random.getstate()
    orig_uuid4 = uuid.uuid4
    names = tempfile._get_candidate_names()  # the module's shared name sequence
    orig_rng, orig_pid = getattr(names, "_rng", None), getattr(names, "_rng_pid", None)
    random.seed(seed)
    def uuid4() -> uuid.UUID:
        if not _sdk_header(sys._getframe(1)):
            _uuids[0] += 1
        return uuid.UUID(int=rng.getrandbits(128), version=4)

    uuid.uuid4 = uuid4
    import os
    names._rng, names._rng_pid = random.Random(seed + ":tempfile"), os.getpid()
    _streams[:] = [names._rng]
    try:
        yield
    finally:
        _streams[:] = []
        uuid.uuid4 = orig_uuid4
        random.setstate(state)
        names._rng, names._rng_pid = orig_rng, orig_pid
