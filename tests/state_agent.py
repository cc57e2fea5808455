"""A user's agent that keeps its state in `state.json` (not faultsim's default name), with
its own tools routed by `faultsim.effect`. `make_in_place` rewrites state.json in place (a
torn write leaves half a document); `make_agent` writes it atomically. `make_log_agent`
keeps its conversation under its own field name (`log`); `make_forgetful` does too, but
never reads its state back: every restart begins the task anew."""
from __future__ import annotations

import json
import os

import faultsim

TOOLS = [{"name": "charge_card", "description": "Charge a card.",
          "input_schema": {"type": "object", "properties": {
              "customer": {"type": "string"}, "cents": {"type": "integer"}},
              "required": ["customer", "cents"]}}]


@faultsim.effect("billing", key=lambda customer, cents, key: key)
def charge_card(customer, cents, key):
    raise RuntimeError("the real payment API must never be called under faultsim")


class StateAgent:
    def __init__(self, env, in_place=False, field="messages", forgetful=False):
        self.env, self.in_place, self.field, self.forgetful = env, in_place, field, forgetful
        self.path = os.path.join(str(env.workdir), "state.json")

    def save(self, state):
        data = json.dumps(state)
        if self.in_place:
            with open(self.path, "w") as f:
                f.write(data)
            return
        with open(self.path + ".tmp", "w") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(self.path + ".tmp", self.path)
        fd = os.open(str(self.env.workdir), os.O_RDONLY)  # the rename survives power loss
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def charge(self, customer, cents, key):  # the tool (a subclass may run it elsewhere)
        return charge_card(customer, cents, key)

    def run(self):
        os.makedirs(str(self.env.workdir), exist_ok=True)
        if os.path.exists(self.path) and not self.forgetful:
            with open(self.path) as f:
                state = json.load(f)
        else:
            state = {self.field: [{"role": "user", "content": self.env.task}], "pending": []}
            self.save(state)
        while True:
            last = state[self.field][-1]
            if last["role"] == "assistant" and not state["pending"]:
                return "".join(b.get("text", "") for b in last["content"]
                               if b["type"] == "text")
            if not state["pending"]:
                r = self.env.client.messages.create(model=self.env.model, max_tokens=256,
                                                    tools=TOOLS, messages=state[self.field])
                state[self.field].append({"role": "assistant", "content": [
                    b.model_dump(exclude_none=True) for b in r.content]})
                state["pending"] = [{"id": b.id, "input": b.input} for b in r.content
                                    if b.type == "tool_use"]
                self.save(state)
                continue
            results = []
            for call in state["pending"]:
                out = self.charge(call["input"]["customer"], call["input"]["cents"],
                                  f"{self.env.task_id}:{call['id']}")
                results.append({"type": "tool_result", "tool_use_id": call["id"],
                                "content": json.dumps(out)})
            state[self.field].append({"role": "user", "content": results})
            state["pending"] = []
            self.save(state)


def make_agent(env):
    return StateAgent(env)


def make_in_place(env):
    return StateAgent(env, in_place=True)


def make_log_agent(env):
    return StateAgent(env, field="log")


def make_forgetful(env):
    return StateAgent(env, field="log", forgetful=True)
