"""A billing agent as a team would write it: its own tools, its own state file.

    state.json     the conversation and the tool calls in flight (saved atomically)
    intents.json   which receipts are about to be sent, and which were

Its effects go through `faultsim.effect`: in production the functions below call the real
payment API and mailer; under faultsim the calls go to the scenario's `billing` (keyed)
and `mailer` (blind) services instead. A receipt email cannot be deduplicated by the
mailer, so the agent records its intent first and, after a crash between intent and
send, asks a person rather than sending twice.

`make_agent_without_intents` is the planted mistake: it sends receipts without the intent
record, so a crash just after a send makes the resumed run send it again.
"""
from __future__ import annotations

import json
import os

import faultsim

TOOLS = [
    {"name": "charge_card", "description": "Charge a customer's card.",
     "input_schema": {"type": "object", "properties": {
         "customer": {"type": "string"}, "cents": {"type": "integer"}},
         "required": ["customer", "cents"]}},
    {"name": "send_receipt", "description": "Email a receipt.",
     "input_schema": {"type": "object", "properties": {
         "to": {"type": "string"}, "text": {"type": "string"}}, "required": ["to", "text"]}},
]


@faultsim.effect("billing", key=lambda customer, cents, idempotency_key: idempotency_key)
def charge_card(customer, cents, idempotency_key):
    raise NotImplementedError("production: stripe.PaymentIntent.create(...)")


@faultsim.effect("mailer")
def send_receipt(to, text):
    raise NotImplementedError("production: smtp.send_message(...)")


class Escalation(Exception):
    """A step whose outcome cannot be known: a person decides."""


def write_atomic(path: str, data: dict) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(data, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fd = os.open(os.path.dirname(path), os.O_RDONLY)
    try:
        os.fsync(fd)  # the rename itself survives a power loss
    finally:
        os.close(fd)


class ReceiptAgent:
    def __init__(self, env, *, intents: bool = True):
        self.env, self.intents = env, intents
        self.state_path = os.path.join(str(env.workdir), "state.json")
        self.intents_path = os.path.join(str(env.workdir), "intents.json")

    def run(self):
        os.makedirs(str(self.env.workdir), exist_ok=True)
        if os.path.exists(self.state_path):
            with open(self.state_path) as f:
                state = json.load(f)
            if state.get("version") != 1:
                raise RuntimeError(f"state.json: unknown version {state.get('version')!r}")
        else:
            state = {"version": 1, "messages": [{"role": "user", "content": self.env.task}],
                     "pending": []}
            write_atomic(self.state_path, state)
        while True:
            last = state["messages"][-1]
            if last["role"] == "assistant" and not state["pending"]:
                return "".join(b.get("text", "") for b in last["content"]
                               if b["type"] == "text")
            if not state["pending"]:
                reply = self.env.client.messages.create(
                    model=self.env.model, max_tokens=512, tools=TOOLS,
                    messages=state["messages"])
                state["messages"].append({"role": "assistant", "content": [
                    b.model_dump(exclude_none=True) for b in reply.content]})
                state["pending"] = [{"id": b.id, "name": b.name, "input": b.input}
                                    for b in reply.content if b.type == "tool_use"]
                write_atomic(self.state_path, state)  # before any tool runs
                continue
            results = []
            for call in state["pending"]:
                try:
                    out = self.use(call)
                except Escalation as why:
                    return faultsim_outcome("escalated", str(why))
                results.append({"type": "tool_result", "tool_use_id": call["id"],
                                "content": json.dumps(out)})
            state["messages"].append({"role": "user", "content": results})
            state["pending"] = []
            write_atomic(self.state_path, state)  # the results, once

    def use(self, call: dict) -> dict:
        args = call["input"]
        if call["name"] == "charge_card":  # keyed: a retry under the same key is safe
            return charge_card(args["customer"], args["cents"],
                               idempotency_key=f"{self.env.task_id}:{call['id']}")
        if not self.intents:
            return send_receipt(args["to"], args["text"])
        intents = {}
        if os.path.exists(self.intents_path):
            with open(self.intents_path) as f:
                intents = json.load(f)
        entry = intents.get(call["id"])
        if entry is not None and entry["sent"]:
            return entry["result"]
        if entry is not None:
            raise Escalation(f"receipt {call['id']}: sent or not, unknown")
        intents[call["id"]] = {"sent": False}
        write_atomic(self.intents_path, intents)
        result = send_receipt(args["to"], args["text"])
        intents[call["id"]] = {"sent": True, "result": result}
        write_atomic(self.intents_path, intents)
        return result


def faultsim_outcome(status: str, why: str):
    from faultsim import Outcome

    return Outcome(status=status, final_answer=None, escalation=why)


def make_agent(env):
    return ReceiptAgent(env)


def make_agent_without_intents(env):
    return ReceiptAgent(env, intents=False)
