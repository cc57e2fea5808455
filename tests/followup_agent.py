"""An agent of several user turns, written the way session-based frameworks write them
(Strands' FileSessionManager, an OpenAI Agents Session): the conversation is one JSON file
saved after every message; after each final answer the next follow-up the user gives is
appended and the loop goes on. A resume that finds a tool call without its result writes
the result a framework writes for a call a crash cut short, "Tool was interrupted." (as
Strands 1.15 does), rather than running the call itself: the model decides what comes next.

The tool pays through a keyed receiver, its key derived from the call, so a retried call
pays once."""
from __future__ import annotations

import json
import os

import faultsim

TOOLS = [{"name": "pay", "description": "Pay an invoice.",
          "input_schema": {"type": "object", "properties": {"invoice": {"type": "string"}},
                           "required": ["invoice"]}}]
INTERRUPTED = "Tool was interrupted."


@faultsim.effect("payments", key=lambda invoice: f"pay-{invoice}")
def pay(invoice: str) -> dict:
    raise RuntimeError("production payments not configured")


def _save(path: str, session: dict) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(session, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


class SessionAgent:
    def __init__(self, env):
        self.env = env
        self.path = os.path.join(str(env.workdir), "session.json")

    def run(self) -> str:
        env = self.env
        if os.path.exists(self.path):
            with open(self.path) as f:
                session = json.load(f)
        else:
            session = {"messages": [{"role": "user", "content": env.task}], "said": 0}
        messages = session["messages"]
        last = messages[-1]
        calls = [b for b in last["content"] if b["type"] == "tool_use"] \
            if last["role"] == "assistant" and isinstance(last["content"], list) else []
        if calls:  # a crash cut these calls short: say so, as the framework does
            messages.append({"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": b["id"], "content": INTERRUPTED,
                 "is_error": True} for b in calls]})
            _save(self.path, session)
        while True:
            last = messages[-1]
            if last["role"] == "assistant":  # a final answer: the next user turn, or done
                if session["said"] == len(env.follow_ups):
                    return "".join(b.get("text", "") for b in last["content"])
                messages.append({"role": "user", "content": env.follow_ups[session["said"]]})
                session["said"] += 1
                _save(self.path, session)
            reply = env.client.messages.create(model=env.model, max_tokens=1024,
                                               messages=messages, tools=TOOLS)
            blocks = [b.model_dump(exclude_none=True) for b in reply.content]
            messages.append({"role": "assistant", "content": blocks})
            _save(self.path, session)
            uses = [b for b in blocks if b["type"] == "tool_use"]
            if not uses:
                continue
            results = [{"type": "tool_result", "tool_use_id": b["id"],
                        "content": json.dumps(pay(**b["input"]))} for b in uses]
            messages.append({"role": "user", "content": results})
            _save(self.path, session)


def make_agent(env):
    return SessionAgent(env)
