"""tests/command_agents/raw_agent.py as a faultsim agent factory (for bench/any_language.py):
the same checkpoint.json with temp file + fsync + rename + directory fsync, save points A
and B, the same keyed payment keyed by the tool_use id, through `faultsim.effect`."""
from __future__ import annotations

import json
import os

import faultsim

TOOLS = [{"name": "pay_invoice", "description": "Pay a supplier invoice.",
          "input_schema": {"type": "object", "properties": {
              "invoice": {"type": "string"}, "amount_cents": {"type": "integer"}},
              "required": ["invoice", "amount_cents"]}}]


@faultsim.effect("payments", key=lambda params, idempotency_key: idempotency_key)
def pay(params, idempotency_key):
    raise NotImplementedError("production: the payment API")


class PayAgent:
    def __init__(self, env):
        self.env = env
        self.path = os.path.join(str(env.workdir), "checkpoint.json")

    def save(self, state):
        tmp = self.path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(state, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)
        fd = os.open(str(self.env.workdir), os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def run(self):
        try:
            with open(self.path) as f:
                state = json.load(f)
        except FileNotFoundError:
            state = {"version": 1, "task": self.env.task, "turns": 0,
                     "messages": [{"role": "user", "content": self.env.task}]}
        while True:
            last = state["messages"][-1]
            if last["role"] == "assistant":
                uses = [b for b in last["content"] if b["type"] == "tool_use"]
                if not uses:
                    return next(b["text"] for b in last["content"] if b["type"] == "text")
                results = [{"type": "tool_result", "tool_use_id": u["id"],
                            "content": json.dumps(pay(u["input"], idempotency_key=u["id"]))}
                           for u in uses]
                state["messages"].append({"role": "user", "content": results})
                self.save(state)
                continue
            reply = self.env.client.messages.create(
                model="claude-sonnet-4-5", max_tokens=1024, tools=TOOLS,
                messages=state["messages"])
            state["messages"].append({"role": "assistant", "content": [
                b.model_dump(exclude_none=True) for b in reply.content]})
            state["turns"] += 1
            self.save(state)


def make_agent(env):
    return PayAgent(env)
