"""A refunds agent as a team would write it, for the recording tests (not the reference
agent): it wraps the task in its own prompt, keeps the conversation in
`conversation.json` (saved atomically, with the calls in flight), and reaches the world
through `faultsim.effect`: an order lookup, a refund (keyed), an email (blind).

`make_agent` asks with `env.client` and waits for whole answers; `make_streaming_agent`
builds its own `anthropic.Anthropic()` from the environment, as most agents do, and
streams every answer.
"""
from __future__ import annotations

import json
import os

import anthropic

import faultsim

PROMPT = "You are the refunds desk. Use the tools, then say what you did.\n\nTask: {task}"

TOOLS = [
    {"name": "lookup_order", "description": "Look an order up.",
     "input_schema": {"type": "object", "properties": {"order_id": {"type": "string"}},
                      "required": ["order_id"]}},
    {"name": "refund", "description": "Refund an order.",
     "input_schema": {"type": "object", "properties": {
         "order_id": {"type": "string"}, "cents": {"type": "integer"}},
         "required": ["order_id", "cents"]}},
    {"name": "email_customer", "description": "Email the customer.",
     "input_schema": {"type": "object", "properties": {
         "to": {"type": "string"}, "text": {"type": "string"}}, "required": ["to", "text"]}},
]


@faultsim.effect("orders", key=lambda order_id: order_id)
def lookup_order(order_id):
    raise NotImplementedError("production: the orders database")


@faultsim.effect("payments", key=lambda order_id, cents, idempotency_key: idempotency_key)
def refund(order_id, cents, idempotency_key):
    raise NotImplementedError("production: the payment provider")


@faultsim.effect("mailer")
def email_customer(to, text):
    raise NotImplementedError("production: the mail server")


class RefundsAgent:
    def __init__(self, env, *, stream: bool = False):
        self.env, self.stream = env, stream
        self.path = os.path.join(str(env.workdir), "conversation.json")
        # a streaming agent builds its own client, from ANTHROPIC_BASE_URL/_API_KEY
        self.client = anthropic.Anthropic() if stream else env.client

    def save(self, state):
        with open(self.path + ".tmp", "w") as f:
            json.dump(state, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(self.path + ".tmp", self.path)

    def ask(self, messages):
        if not self.stream:
            return self.client.messages.create(model=self.env.model, max_tokens=1024,
                                               tools=TOOLS, messages=messages)
        with self.client.messages.stream(model=self.env.model, max_tokens=1024, tools=TOOLS,
                                         messages=messages) as stream:
            return stream.get_final_message()

    def run(self):
        os.makedirs(str(self.env.workdir), exist_ok=True)
        if os.path.exists(self.path):
            with open(self.path) as f:
                state = json.load(f)
        else:
            state = {"messages": [{"role": "user",
                                   "content": PROMPT.format(task=self.env.task)}],
                     "pending": []}
            self.save(state)
        while True:
            if not state["pending"]:
                last = state["messages"][-1]
                if last["role"] == "assistant":
                    return "".join(b["text"] for b in last["content"] if b["type"] == "text")
                reply = self.ask(state["messages"])
                state["messages"].append({"role": "assistant", "content": [
                    b.model_dump(exclude_none=True) for b in reply.content]})
                state["pending"] = [{"id": b.id, "name": b.name, "input": b.input}
                                    for b in reply.content if b.type == "tool_use"]
                self.save(state)
                continue
            results = [{"type": "tool_result", "tool_use_id": call["id"],
                        "content": json.dumps(self.use(call))} for call in state["pending"]]
            state["messages"].append({"role": "user", "content": results})
            state["pending"] = []
            self.save(state)

    def use(self, call):
        args = call["input"]
        if call["name"] == "lookup_order":
            return lookup_order(args["order_id"])
        if call["name"] == "refund":
            return refund(args["order_id"], args["cents"],
                          idempotency_key=f"{self.env.task_id}:{call['id']}")
        return email_customer(args["to"], args["text"])


def make_agent(env):
    return RefundsAgent(env)


def make_streaming_agent(env):
    return RefundsAgent(env, stream=True)
