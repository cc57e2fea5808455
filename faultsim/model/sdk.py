"""Which `anthropic` SDK is installed, whether the fake Claude serves it, and the in-process
transport its clients take: the one place that knows the SDK's lines.

An agent runs on the SDK its framework pins, not on one faultsim chooses. The fake answers
in httpx2 (faultsim's own HTTP package) and serves, read from the SDKs' own code:

- 1.x and 2.x: their clients take an `httpx2.Client`, served directly.
- 0.x from 0.40: their clients take an `httpx.Client` (an `httpx2` one is a TypeError);
  `bridge` carries each request and response across, streamed as the client reads it.
  Below 0.40 is not served: not tested (the oldest release CI installs is the floor).

The SDK's own behaviour is left as it is: which class a status raises (before 2.5 a 529's
`OverloadedError` is not an `InternalServerError`), its retries and its stream parsing are
the ones the agent meets in production on that SDK.

Part of the fake Claude (layer 2): imports httpx2, `errors`, and lazily anthropic, httpx
and `bridge`."""
from __future__ import annotations

import re
from typing import Any, Callable

import httpx2

from ..errors import UsageError

OLDEST = (0, 40)  # the oldest release served (pyproject.toml's floor; .ci/floors installs it)
FIRST_UNSERVED = (3, 0)  # a later major may change the transport seam: not served unseen
HTTPX2_FROM = (1, 0)  # from 1.0 the SDK's clients are built on httpx2, before it on httpx
SERVED = "anthropic 0.40 or later, below 3"


class UnservedSDK(UsageError):
    """The installed `anthropic` is one the fake Claude does not serve."""


def version() -> tuple[int, int]:
    """The installed SDK's (major, minor)."""
    from anthropic import __version__

    match = re.match(r"(\d+)\.(\d+)", __version__)
    if match is None:  # a version string this module cannot read: refuse, never guess
        raise UnservedSDK(f"faultsim: anthropic {__version__!r} is installed, a version "
                          f"faultsim cannot read; it serves {SERVED}")
    return int(match[1]), int(match[2])


def check() -> tuple[int, int]:
    """The installed SDK's version, or UnservedSDK naming it in one line."""
    from anthropic import __version__

    served = version()
    if not OLDEST <= served < FIRST_UNSERVED:
        why = ("older than any release faultsim tests" if served < OLDEST else
               "a major version whose client transport faultsim has not been tested on")
        raise UnservedSDK(
            f"faultsim: anthropic {__version__} is installed ({why}); the fake Claude "
            f"serves {SERVED}: install one (pip install 'anthropic>=0.40,<3'), or run an "
            "agent that must keep this SDK as a command (--agent cmd:...)")
    return served


def http() -> Any:
    """The HTTP package the installed SDK's clients are built on: httpx2 or httpx."""
    if check() >= HTTPX2_FROM:
        return httpx2
    import httpx

    return httpx


def transport(handle: Callable[[httpx2.Request], httpx2.Response]) -> Any:
    """An in-process transport of the installed SDK's HTTP package, answered by `handle`."""
    package = http()
    if package is httpx2:
        return httpx2.MockTransport(handle)
    from .bridge import bridged

    return package.MockTransport(bridged(handle))
