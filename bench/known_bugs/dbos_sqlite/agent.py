"""A durable agent on DBOS Transact, in plain Python, shaped as DBOS's docs draw an agent
(the agent run loop a workflow; model and tool calls steps): the loop is a
`@DBOS.workflow()`, each model call and each tool call a `@DBOS.step()`, the system
database SQLite (the scenario's database file). A restarted
process constructs DBOS again and launches it (which recovers the pending workflow), then
starts the workflow under the same workflow id (`SetWorkflowID`): DBOS runs a workflow id
once, so the call joins the recovered run, or returns the result a finished run saved.
Every effect goes to a keyed receiver, so a failure is the framework's, not the
at-least-once window of a blind effect; `make_blind_agent` sends the email without a key
(the window DBOS documents: a step killed after its effect and before its output was
saved runs again)."""
from __future__ import annotations

import json

import anthropic
import faultsim
from dbos import DBOS, SetWorkflowID

TOOLS = [
    {"name": "lookup_invoice", "description": "Look an invoice up.",
     "input_schema": {"type": "object", "properties": {"invoice": {"type": "string"}},
                      "required": ["invoice"]}},
    {"name": "pay_invoice", "description": "Pay an approved invoice.",
     "input_schema": {"type": "object", "properties": {
         "invoice": {"type": "string"}, "amount_cents": {"type": "integer"}},
         "required": ["invoice", "amount_cents"]}},
    {"name": "send_email", "description": "Email someone.",
     "input_schema": {"type": "object", "properties": {
         "to": {"type": "string"}, "subject": {"type": "string"},
         "body": {"type": "string"}}, "required": ["to", "subject", "body"]}},
]
BLIND = {"email": False}  # set by make_blind_agent, in the process that runs it


@faultsim.effect("payments", key=lambda invoice, amount_cents: f"pay-{invoice}")
def _pay(invoice: str, amount_cents: int) -> dict:
    raise RuntimeError("production payment API not configured in this example")


@faultsim.effect("email", key=lambda to, subject, body: f"email-{to}-{subject}")
def _email_keyed(to: str, subject: str, body: str) -> dict:
    raise RuntimeError("production mail API not configured in this example")


@faultsim.effect("email")
def _email_blind(to: str, subject: str, body: str) -> dict:
    raise RuntimeError("production mail API not configured in this example")


@faultsim.effect("invoices", key=lambda invoice: invoice)
def _lookup(invoice: str) -> dict:
    raise RuntimeError("production invoice API not configured in this example")


@DBOS.step()
def call_model(model: str, messages: list) -> dict:
    reply = anthropic.Anthropic().messages.create(
        model=model, max_tokens=1024, tools=TOOLS, messages=messages,
        system="You pay approved invoices and confirm them by email.")
    return reply.model_dump(mode="json", exclude_none=True)


@DBOS.step()
def run_tool(name: str, args: dict) -> str:
    if name == "lookup_invoice":
        return json.dumps(_lookup(**args))
    if name == "pay_invoice":
        return json.dumps(_pay(**args))
    if name == "send_email":
        return json.dumps((_email_blind if BLIND["email"] else _email_keyed)(**args))
    return f"no such tool: {name}"


@DBOS.workflow()
def agent_loop(model: str, task: str) -> str:
    messages: list = [{"role": "user", "content": task}]
    while True:
        reply = call_model(model, messages)
        messages.append({"role": "assistant", "content": reply["content"]})
        calls = [b for b in reply["content"] if b["type"] == "tool_use"]
        if not calls:
            return "".join(b.get("text", "") for b in reply["content"]).strip()
        messages.append({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": c["id"], "content": run_tool(c["name"], c["input"])}
            for c in calls]})


class DbosAgent:
    def __init__(self, env, blind: bool = False):
        self.env, self.blind = env, blind

    def run(self) -> str:
        BLIND["email"] = self.blind
        DBOS(config={"name": "payments", "system_database_url":
                     f"sqlite:///{self.env.store.path}", "run_admin_server": False})
        try:
            DBOS.launch()
            with SetWorkflowID(self.env.task_id):
                return agent_loop(self.env.model, self.env.task)
        finally:
            DBOS.destroy(workflow_completion_timeout_sec=0)


def make_agent(env):
    return DbosAgent(env)


def make_blind_agent(env):
    return DbosAgent(env, blind=True)
