"""The reference agent with its model client behind a logging transport, written the way a
user writes one (tests/test_shortcuts.py): a transport of the SDK's HTTP package that logs
each request and its answer to stderr and hands the request on to the transport the client
had. Its frame stands between the agent and the fake Claude at every model request, and
its module's logger is in the agent's memory (with its handler's stream, and through the
logging manager every logger of the process)."""
from __future__ import annotations

import logging

import anthropic

from faultsim.model.sdk import http
from reference_agent.agent import Agent

log = logging.getLogger("logging_transport_agent")
log.addHandler(logging.StreamHandler())


class LoggingTransport(http().BaseTransport):
    def __init__(self, inner) -> None:
        self.inner = inner

    def handle_request(self, request):
        log.info("-> %s %s", request.method, request.url)
        response = self.inner.handle_request(request)
        log.info("<- %s", response.status_code)
        return response


def make_agent(env):
    inner = env.client._client._transport  # the transport the client was built with
    env.client = anthropic.Anthropic(
        api_key="not-a-key", base_url=str(env.client.base_url), max_retries=2,
        http_client=http().Client(transport=LoggingTransport(inner)))
    return Agent(env)
