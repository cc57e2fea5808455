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


# uuid4 is seeded by changing what the function object does, not by rebinding the name
# `uuid.uuid4`: a module that ran `from uuid import uuid4` at import time (Agno does) holds
# the function object itself, as do default arguments, dicts of factories and closures,
# which no rebinding of names reaches (scanning loaded modules for the name would miss
# those, and every module imported later with its own copy). While an incarnation runs,
# the function's code is swapped for `_trampoline`, which calls the seeded draw kept in
# uuid's own namespace (the function's globals); the real code is put back after it.
_UUID4 = uuid.uuid4
_REAL_UUID4 = _UUID4.__code__
_HOOK = "_faultsim_seeded_uuid4"  # the name of the seeded draw in uuid's namespace


# the real uuid4 as a function of its own, for the draws a module makes while it is being
# imported (`_importing`): its code object, never swapped
_REAL = type(_UUID4)(_REAL_UUID4, vars(uuid), "uuid4")


def _importing(frame) -> bool:
    """A frame of a module being imported is on the stack: its import-time draw (an
    OpenTelemetry context key made at import) happens once per process, in whichever
    incarnation imports it first. Seeded, it would shift that incarnation's stream and make
    the first clean run part from the second; a real process draws it at random anyway."""
    while frame is not None:
        if frame.f_code.co_filename.startswith("<frozen importlib"):
            return True
        frame = frame.f_back
    return False


def _trampoline():  # its code becomes uuid4's: the name is looked up in uuid's globals
    return _faultsim_seeded_uuid4()  # type: ignore[name-defined]  # noqa: F821


@contextmanager
def seeded(seed: str) -> Iterator[None]:
    rng = random.Random(seed)
    state = random.getstate()
    names = tempfile._get_candidate_names()  # the module's shared name sequence
    orig_rng, orig_pid = getattr(names, "_rng", None), getattr(names, "_rng_pid", None)
    random.seed(seed)

    def uuid4() -> uuid.UUID:
        caller = sys._getframe(1)
        if caller.f_code is _trampoline.__code__:  # called as uuid.uuid4: its caller's
            caller = caller.f_back
        if _importing(caller):
            return _REAL()
        if not _sdk_header(caller):
            _uuids[0] += 1
        return uuid.UUID(int=rng.getrandbits(128), version=4)

    hooks = vars(uuid)
    before = (hooks.get(_HOOK), _UUID4.__code__)  # an enclosing incarnation's, if any
    hooks[_HOOK] = uuid4
    _UUID4.__code__ = _trampoline.__code__
    import os
    names._rng, names._rng_pid = random.Random(seed + ":tempfile"), os.getpid()
    _streams[:] = [names._rng]
    try:
        yield
    finally:
        _streams[:] = []
        _UUID4.__code__ = before[1]
        if before[0] is None:
            hooks.pop(_HOOK, None)
        else:
            hooks[_HOOK] = before[0]
        random.setstate(state)
        names._rng, names._rng_pid = orig_rng, orig_pid
