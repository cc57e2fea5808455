"""An agent written the way a user writes one: its own tools (a card charge, a receipt
email, a CRM note), routed with `faultsim.effect`; its own checkpoint file; no faultsim
code besides the decorators. `make_agent` is careful; the planted mistakes below each
break one rule."""
from __future__ import annotations

import asyncio
import json
import os

import faultsim

TOOLS = [
    {"name": "charge_card", "description": "Charge a customer's card.",
     "input_schema": {"type": "object", "properties": {"customer": {"type": "string"},
                      "cents": {"type": "integer"}}, "required": ["customer", "cents"]}},
    {"name": "note_customer", "description": "Add a note to the customer's CRM record.",
     "input_schema": {"type": "object", "properties": {"customer": {"type": "string"},
                      "note": {"type": "string"}}, "required": ["customer", "note"]}},
]
CALLS = {"body": 0}  # how often a real body ran (must stay 0 under faultsim)


@faultsim.effect("billing", key=lambda customer, cents, idempotency_key: idempotency_key,
                 lookup=lambda key: None)
def charge_card(customer, cents, idempotency_key):
    CALLS["body"] += 1
    return {"charged": cents, "real": True}


@faultsim.effect("crm", key=lambda customer, note: customer, query=lambda record_id: None)
async def note_customer(customer, note):
    CALLS["body"] += 1
    return {"real": True}


def write_atomic(path, data):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(json.dumps(data))
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fd = os.open(os.path.dirname(path), os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class BillingAgent:
    def __init__(self, env, *, key_per_incarnation=False, record_before_effect=True):
        self.env = env
        self.key_per_incarnation = key_per_incarnation
        self.record_before_effect = record_before_effect
        self.path = os.path.join(str(env.workdir), "checkpoint.json")

    def key(self, call_id):
        if self.key_per_incarnation:  # the mistake: a retry after a crash gets a new key
            return f"{self.env.task_id}:{call_id}:{self.env.incarnation}"
        return f"{self.env.task_id}:{call_id}"

    def run(self):
        os.makedirs(str(self.env.workdir), exist_ok=True)
        if os.path.exists(self.path):
            with open(self.path) as f:
                s = json.load(f)
            if s.get("version") != 1:
                raise RuntimeError(f"{self.path}: unknown checkpoint version "
                                   f"{s.get('version')!r}")
        else:
            s = {"version": 1, "messages": [{"role": "user", "content": self.env.task}],
                 "pendingToolUse": [], "turns": 0, "tokensUsed": 0}
            write_atomic(self.path, s)
        while True:
            last = s["messages"][-1]
            if last["role"] == "assistant" and not s["pendingToolUse"]:
                return "".join(b.get("text", "") for b in last["content"]
                               if b.get("type") == "text")
            if not s["pendingToolUse"]:
                r = self.env.client.messages.create(model=self.env.model, max_tokens=512,
                                                    messages=s["messages"], tools=TOOLS)
                s["tokensUsed"] += r.usage.input_tokens + r.usage.output_tokens
                s["messages"].append({"role": "assistant", "content": [
                    b.model_dump(exclude_none=True) for b in r.content]})
                s["pendingToolUse"] = [{"id": b.id, "name": b.name, "input": b.input}
                                       for b in r.content if b.type == "tool_use"]
                if self.record_before_effect:
                    write_atomic(self.path, s)
                continue
            results = []
            for call in s["pendingToolUse"]:
                results.append({"type": "tool_result", "tool_use_id": call["id"],
                                "content": json.dumps(self.use(call))})
            s["messages"].append({"role": "user", "content": results})
            s["pendingToolUse"], s["turns"] = [], s["turns"] + 1
            write_atomic(self.path, s)

    def use(self, call):
        args = call["input"]
        if call["name"] == "charge_card":
            key = self.key(call["id"])
            done = charge_card.lookup(key)  # reconciliation: charged before the crash?
            return done if done is not None else charge_card(
                args["customer"], args["cents"], idempotency_key=key)
        record = note_customer.query(args["customer"])  # noted before the crash?
        if record is not None and record.get("note") == args["note"]:
            return record
        return asyncio.run(note_customer(args["customer"], args["note"]))


def make_agent(env):
    return BillingAgent(env)


def make_agent_new_key_each_run(env):
    return BillingAgent(env, key_per_incarnation=True)
