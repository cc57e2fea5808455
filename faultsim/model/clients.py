"""Real `anthropic` SDK clients whose HTTP goes to a fake's transport: built for the agent
(`sync_client`, `async_client`) or patched into the clients it builds itself
(`serving_new_clients`). No socket is ever opened. The transport is of the HTTP package
the installed SDK is built on (`sdk.transport`: httpx2, or httpx before 1.0).

Part of the fake Claude (layer 2): imports httpx2, `sdk` and, lazily, anthropic."""
from __future__ import annotations

import os
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Callable, Iterator

import httpx2

from .sdk import http, transport

if TYPE_CHECKING:
    import anthropic

API_URL = "https://api.anthropic.com"
FAKE_API_KEY = "sk-ant-faultsim-fake"

Handler = Callable[[httpx2.Request], httpx2.Response]


def sync_client(handle: Handler, *, max_retries: int = 2, **options: Any
                ) -> "anthropic.Anthropic":
    """An `anthropic.Anthropic` served by `handle`."""
    import anthropic

    return anthropic.Anthropic(
        api_key=FAKE_API_KEY, base_url=API_URL, max_retries=max_retries,
        http_client=http().Client(transport=transport(handle)), **options)


def async_client(handle: Handler, *, max_retries: int = 2, **options: Any
                 ) -> "anthropic.AsyncAnthropic":
    """An `anthropic.AsyncAnthropic` served by `handle`."""
    import anthropic

    return platform_known(anthropic.AsyncAnthropic(
        api_key=FAKE_API_KEY, base_url=API_URL, max_retries=max_retries,
        http_client=http().AsyncClient(transport=transport(handle)),
        **options))


@contextmanager
def serving_new_clients(handle: Handler) -> Iterator[None]:
    """While inside, an `anthropic.Anthropic` or `anthropic.AsyncAnthropic` built without an
    `http_client` of its own is served by `handle` (see `FakeClaude.serving_new_clients`)."""
    import anthropic

    originals = {}
    package = http()

    def serve(cls, http_client, prepare=lambda client: client):
        original = originals[cls] = cls.__init__

        def __init__(client, *args: Any, **kwargs: Any) -> None:
            if kwargs.get("http_client") is None:
                kwargs["http_client"] = http_client(transport=transport(handle))
                if kwargs.get("api_key") is None and \
                        not os.environ.get("ANTHROPIC_API_KEY"):
                    kwargs["api_key"] = FAKE_API_KEY
            original(client, *args, **kwargs)
            prepare(client)

        cls.__init__ = __init__

    serve(anthropic.Anthropic, package.Client)
    serve(anthropic.AsyncAnthropic, package.AsyncClient, platform_known)
    try:
        yield
    finally:
        for cls, original in originals.items():
            cls.__init__ = original


def platform_known(client: Any) -> Any:
    """An async SDK client looks its platform up in a worker thread on its first request.
    A forked crash run has no such thread, and `asyncio.run` then waits forever for it at
    exit: look it up now, in this thread (it is cheap off Windows)."""
    try:
        from anthropic._base_client import get_platform

        if getattr(client, "_platform", 0) is None:
            client._platform = get_platform()
    except ImportError:  # a later SDK without this attribute: nothing to pre-empt
        pass
    return client

