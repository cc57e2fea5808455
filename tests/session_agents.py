"""Agents written the way a framework user writes one (Agno's shape): plain Python over the
anthropic SDK, a session file saved after each turn's tools ran, nothing saved between the
model's answer and its tools. After a crash inside a tool the resumed run asks that turn
again and re-runs what the answer names: a keyed charge (deduplicated by its key) and a
CRM status set (the record already holds it). On tests/data/session_refund.toml.

`make_agent` is correct. Each planted mistake breaks one rule:
- `make_agent_stamps_run_id`: its CRM write carries a per-process run id, so a replayed
  set writes other values (a second effect, `effects_exactly_once`);
- `make_agent_fresh_key`: a new idempotency key for every charge attempt, so the re-sent
  charge is applied again (`effects_exactly_once`);
- `make_agent_saves_at_end`: the session is saved only when the run ends, so a crash in
  the second turn redoes both (`one_step_repeated_per_crash`)."""
from __future__ import annotations

import json
import os
import uuid

import faultsim
from user_agents import save

TOOLS = [
    {"name": "charge_card", "description": "Charge (or refund) a customer's card.",
     "input_schema": {"type": "object", "properties": {"customer": {"type": "string"},
                      "cents": {"type": "integer"}}, "required": ["customer", "cents"]}},
    {"name": "set_status", "description": "Set the status on a customer's CRM record.",
     "input_schema": {"type": "object", "properties": {"customer": {"type": "string"},
                      "status": {"type": "string"}}, "required": ["customer", "status"]}},
]


@faultsim.effect("billing", key=lambda customer, cents, idempotency_key: idempotency_key)
def charge_card(customer, cents, idempotency_key):
    raise NotImplementedError("production: the payment API")


@faultsim.effect("crm", key=lambda customer, status, updated_by: customer)
def update_customer(customer, status, updated_by=""):
    raise NotImplementedError("production: the CRM's PATCH /customers/{id}")


class SessionAgent:
    def __init__(self, env):
        self.env = env
        self.path = os.path.join(str(env.workdir), "session.json")
        self.run_id = uuid.uuid4().hex[:8]  # this process's run, as frameworks name one

    # -- the tools ------------------------------------------------------------------------
    def charge_key(self, customer, cents):
        # derived from the task and the step's input: the same call after a crash and a
        # re-asked turn gets the same key (P8)
        return f"{self.env.task_id}:charge:{customer}:{cents}"

    def updated_by(self):
        return "refund-agent"

    def call(self, name, args):
        if name == "charge_card":
            return charge_card(args["customer"], args["cents"],
                               idempotency_key=self.charge_key(args["customer"],
                                                               args["cents"]))
        return update_customer(args["customer"], args["status"], self.updated_by())

    # -- the loop -------------------------------------------------------------------------
    def load(self):
        if os.path.exists(self.path):
            with open(self.path) as f:
                return json.load(f)
        return {"messages": [{"role": "user", "content": self.env.task}]}

    def save(self, session):
        save(self.path, session)  # temp file, fsync, rename

    def turn_done(self, session):
        self.save(session)  # after the tools: the answer and its results together

    def run(self):
        session = self.load()
        last = session["messages"][-1]
        if last["role"] == "assistant":  # the run had ended: its answer is saved
            return "".join(b["text"] for b in last["content"] if b["type"] == "text")
        while True:
            response = self.env.client.messages.create(
                model=self.env.model, max_tokens=1024, tools=TOOLS,
                messages=session["messages"])
            content = [b.model_dump(exclude_none=True) for b in response.content]
            session["messages"].append({"role": "assistant", "content": content})
            calls = [b for b in content if b["type"] == "tool_use"]
            if not calls:
                self.save(session)
                return "".join(b["text"] for b in content if b["type"] == "text")
            results = [{"type": "tool_result", "tool_use_id": b["id"],
                        "content": json.dumps(self.call(b["name"], b["input"]))}
                       for b in calls]
            session["messages"].append({"role": "user", "content": results})
            self.turn_done(session)


def make_agent(env):
    return SessionAgent(env)


class _StampsRunId(SessionAgent):
    def updated_by(self):
        return f"refund-agent run {self.run_id}"  # differs on every start


def make_agent_stamps_run_id(env):
    return _StampsRunId(env)


class _FreshKey(SessionAgent):
    def charge_key(self, customer, cents):
        return uuid.uuid4().hex  # a new key per attempt: no receiver can recognise a retry


def make_agent_fresh_key(env):
    return _FreshKey(env)


class _SavesAtEnd(SessionAgent):
    def turn_done(self, session):
        pass  # the session is stored when the run ends, as some frameworks do by default


def make_agent_saves_at_end(env):
    return _SavesAtEnd(env)
