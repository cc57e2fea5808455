"""Which `anthropic` SDK is installed, whether the fake Claude serves it, and the in-process
transport its clients take: the one place that knows the SDK's lines.

An agent runs on the SDK its framework pins, not on one faultsim chooses. The fake answers
in httpx2 (faultsim's own HTTP package) and serves, read from the SDKs' own code:

- 1.x and 2.x: their clients take an `httpx2.Client`, served directly.
- 0.x from 0.49: their clients take an `httpx.Client` (an `httpx2` one is a TypeError);
  `bridge` carries each request and response across, streamed as the client reads it.
  Before 0.49 the SDK has no thinking blocks, which the fake answers with when a
  scenario scripts them, and no OverloadedError: not served.

The SDK's own behaviour is left as it is: which class a status raises (before 2.5 a 529's
`OverloadedError` is not an `InternalServerError`), its retries and its stream parsing are
the ones the agent meets in production on that SDK.

Part of the fake Claude (layer 2): imports httpx2, `errors`, and lazily anthropic, httpx
and `bridge`."""
from __future__ import annotations

import importlib
import importlib.metadata
import os
import re
import sys
from typing import Any, Callable

import httpx2

from ..errors import UsageError

OLDEST = (0, 49)  # the oldest release served (pyproject.toml's floor; .ci/floors installs it)
FIRST_UNSERVED = (3, 0)  # a later major may change the transport seam: not served unseen
HTTPX2_FROM = (1, 0)  # from 1.0 the SDK's clients are built on httpx2, before it on httpx
SERVED = "anthropic 0.49 or later, below 3"


class UnservedSDK(UsageError):
    """The installed `anthropic` is one the fake Claude does not serve."""


def version() -> tuple[int, int]:
    """The installed SDK's (major, minor)."""
    match = re.match(r"(\d+)\.(\d+)", _raw_version())
    if match is None:  # a version string this module cannot read: refuse, never guess
        raise UnservedSDK(f"{_installed()}, a version faultsim cannot read; the fake "
                          f"Claude serves {SERVED}")
    return int(match[1]), int(match[2])


def check() -> tuple[int, int]:
    """The installed SDK's version, or UnservedSDK naming it in one line."""
    served = version()
    if not OLDEST <= served < FIRST_UNSERVED:
        why = ("older than any release faultsim tests" if served < OLDEST else
               "a major version whose client transport faultsim has not been tested on")
        raise UnservedSDK(
            f"{_installed()} ({why}); the fake Claude serves {SERVED}: install one "
            "(pip install 'anthropic>=0.49,<3'), or run an agent that must keep this SDK "
            "as a command (--agent cmd:...)")
    return served


def _raw_version() -> str:
    # the loaded module's, else the package's metadata: a parent process that never runs
    # the agent (subprocess mode) checks without paying the SDK's import
    module = sys.modules.get("anthropic")
    if module is not None:
        return module.__version__
    return importlib.metadata.version("anthropic")


def _installed() -> str:
    module = sys.modules.get("anthropic")
    where = f" ({os.path.dirname(module.__file__)})" if module is not None else ""
    return f"anthropic {_raw_version()} is installed{where}"


def load() -> tuple[int, int]:
    """Import the SDK (over a second: callers do it once, before any run), refuse an
    unserved one in one line, and do now what its first request would do that an agent's
    run cannot contain. Returns its version."""
    # imported here, not only looked up: the SDK builds its pydantic models at import,
    # which fails under a run's frozen clock (freezegun's FakeDatetime)
    importlib.import_module("anthropic")
    served = check()
    if served < HTTPX2_FROM:
        # 0.x up to 0.120 at least (0.125 no longer does): the SDK's `get_platform` runs
        # `uname -p` (platform.platform()) and `lsb_release -a` (distro.id()) on the
        # agent's first request, where faultsim refuses a process it cannot contain. Both
        # answers are cached for this process and its forks: asked once here, never there.
        from anthropic._base_client import get_platform

        get_platform()
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
