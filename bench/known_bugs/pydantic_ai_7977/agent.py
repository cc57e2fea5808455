"""pydantic-ai #7977's agent: one long tool, the run's message history in history.json.

The report's shape: the model asks for the run's first (and only) tool call, and the run
stops while it executes. Here the stop is a crash; the service restarts and sends the
user's request again with the history it found (`resume="reprompt"`, as a chat service
that re-submits the user's message does), which pydantic-ai refuses when the history ends
on a tool call it never answered: "Cannot provide a new user prompt when the message
history contains unprocessed tool calls." The job goes through a keyed service, so
running it again is harmless: what fails is the conversation, not the effect.
"""
from __future__ import annotations

import json

from pydantic_ai import Agent

import faultsim
from faultsim.adapters.pydantic_ai import agent_factory


@faultsim.effect("jobs", key=lambda name: f"job-{name}")
def start_job(name: str) -> dict:
    raise NotImplementedError("production: jobs.run(name, idempotency_key=...)")


def build_agent(model) -> Agent:
    agent = Agent(model, instructions="You run the operations team's jobs.")

    @agent.tool_plain
    def long_task(name: str) -> str:
        """Run a long job and return its report."""
        return json.dumps(start_job(name))

    return agent


make_agent = agent_factory(build_agent, history="history.json", resume="reprompt")
