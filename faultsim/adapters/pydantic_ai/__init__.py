"""Crash-test a pydantic-ai agent, unchanged: `pip install 'faultsim[pydantic-ai]'`.

You give faultsim the function your code already has that builds the `Agent` from a model::

    def build_agent(model):
        agent = Agent(model, output_type=[str, DeferredToolRequests])

        @agent.tool_plain
        @faultsim.effect("payments", key=lambda invoice, amount_cents: f"pay-{invoice}")
        def pay_invoice(invoice: str, amount_cents: int) -> str: ...

        return agent

and says how your code persists and resumes: pydantic-ai's documented way, the message
history (`all_messages_json()`) written to a file and read back with
`ModelMessagesTypeAdapter` as the next run's `message_history`::

    make_agent = agent_factory(build_agent, history="history.json", save="step")

Each incarnation builds the agent afresh on a real `AnthropicModel` served by faultsim's fake
Claude, reads the history file (if an earlier incarnation left one) and drives the run with
`agent.iter`, the way a service restarting after a crash would: the task as the prompt when
there is no history, else no prompt (`resume="continue"`: pydantic-ai runs the calls the
history left unprocessed) or the task again (`resume="reprompt"`, which pydantic-ai refuses
when calls are left unprocessed: pydantic-ai#7977). `save="step"` writes the history
after every node of the run that changed it, with the request the next node is about to send
(a tool's results: pydantic-ai's `run.all_messages()` has them only once the next model
answer is in); `save="node"` writes `run.all_messages()` alone after every node (the
pattern of pydantic-ai's `agent.iter` documentation); `save="end"` once, when the run is over.
Writes are atomic (temp file, fsync, rename, fsync of the directory); every one is a kill
point in both modes (in process through faultsim's file interposition, in subprocess mode
traced where the bytes reach the kernel: the same kill points, a real SIGKILL at each).

Several user turns (the scenario's `follow_up`s, `env.follow_ups`): after each final answer
the next follow-up is sent as the next run's prompt with the history so far as its
`message_history`, as a chat service does with the user's next message; the last answer is
the outcome. Which turn a restart is at is read from the history file (the follow-ups its
user prompts hold, whether it ends with an answer), so a follow-up is sent once.

A run whose output is `DeferredToolRequests` (a tool raised `ApprovalRequired` or
`CallDeferred`: a person must decide) ends as an escalation, a legal stop.
"""
from __future__ import annotations

from .adapter import (AgentBuilder, AgentRun, RESUMES, SAVES, agent_factory,
                      anthropic_model)  # noqa: F401

__all__ = ["SAVES", "RESUMES", "agent_factory", "anthropic_model"]
