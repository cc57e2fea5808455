"""A CrewAI flow with `@persist` on its default SQLite store (`SQLiteFlowPersistence`,
the scenario's database), the way CrewAI's flow-state guide writes one: a structured
state (the conversation so far), a ReAct loop of flow methods (`think` asks Claude through
the anthropic SDK, a router sends tool calls to `act`, `act` runs them and routes back),
and `@persist` on the class, which saves the state after every method. A restarted process
kicks the flow off again with the same state id (`kickoff(inputs={"id": ...})`, the
documented way to resume a persisted flow, where writes extend the same history): CrewAI
restores the latest saved state and runs the flow from its start, so each method looks at
the restored state and skips what is done (a question already answered, calls already
run). Every effect goes to a keyed receiver: a failure is the framework's, not the
at-least-once window of a blind effect; `make_blind_agent` sends the email without a key
(a method killed after its effect and before `@persist` saved runs again)."""
from __future__ import annotations

import json
import os
import tempfile

os.environ.setdefault("CREWAI_DISABLE_TELEMETRY", "true")  # no network from a test
os.environ.setdefault("OTEL_SDK_DISABLED", "true")
os.environ.setdefault("CREWAI_DISABLE_VERSION_CHECK", "true")  # nor a PyPI look-up

import anthropic  # noqa: E402
import faultsim  # noqa: E402
from crewai.flow.flow import Flow, FlowState, listen, or_, router, start  # noqa: E402
from crewai.flow.persistence import SQLiteFlowPersistence, persist  # noqa: E402

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


@faultsim.effect("invoices", key=lambda invoice: invoice)
def _lookup(invoice: str) -> dict:
    raise RuntimeError("production invoice API not configured in this example")


@faultsim.effect("payments", key=lambda invoice, amount_cents: f"pay-{invoice}")
def _pay(invoice: str, amount_cents: int) -> dict:
    raise RuntimeError("production payment API not configured in this example")


@faultsim.effect("email", key=lambda to, subject, body: f"email-{to}-{subject}")
def _email(to: str, subject: str, body: str) -> dict:
    raise RuntimeError("production mail API not configured in this example")


@faultsim.effect("email")
def _email_blind(to: str, subject: str, body: str) -> dict:
    raise RuntimeError("production mail API not configured in this example")


RUN = {"lookup_invoice": _lookup, "pay_invoice": _pay, "send_email": _email}


class PaymentState(FlowState):
    task: str = ""
    model: str = ""
    messages: list = []
    final: str = ""


def payment_flow(db_path: str) -> type:
    @persist(SQLiteFlowPersistence(db_path))
    class PaymentFlow(Flow[PaymentState]):
        @start()
        def begin(self):
            if not self.state.messages:
                self.state.messages = [{"role": "user", "content": self.state.task}]

        @listen(or_(begin, "again"))
        def think(self):
            last = self.state.messages[-1]
            if last["role"] == "assistant" or self.state.final:
                return  # restored: this turn's answer is saved already
            reply = anthropic.Anthropic().messages.create(
                model=self.state.model, max_tokens=1024, tools=TOOLS,
                messages=self.state.messages,
                system="You pay approved invoices and confirm them by email.")
            content = reply.model_dump(mode="json", exclude_none=True)["content"]
            self.state.messages = [*self.state.messages,
                                   {"role": "assistant", "content": content}]

        @router(think)
        def route(self):
            if self.state.final:
                return "answered"
            last = self.state.messages[-1]
            calls = any(b["type"] == "tool_use" for b in last["content"])
            return "tool_calls" if calls else "answered"

        @listen("tool_calls")
        def act(self):
            last = self.state.messages[-1]
            if last["role"] == "assistant":  # else the results are saved: a restored run
                results = [{"type": "tool_result", "tool_use_id": b["id"],
                            "content": json.dumps(RUN[b["name"]](**b["input"]))}
                           for b in last["content"] if b["type"] == "tool_use"]
                self.state.messages = [*self.state.messages,
                                       {"role": "user", "content": results}]

        @router(act)
        def loop(self):
            return "again"

        @listen("answered")
        def finish(self):
            if not self.state.final:
                self.state.final = "".join(b.get("text", "") for b in
                                           self.state.messages[-1]["content"]).strip()
            return self.state.final

    return PaymentFlow


class CrewAiAgent:
    def __init__(self, env, blind: bool = False):
        self.env, self.blind = env, blind

    def run(self) -> str:
        env = self.env
        RUN["send_email"] = _email_blind if self.blind else _email
        # CrewAI's persistence takes a file lock in the temp folder, and CrewAI keeps its
        # app data and caches in the user's folders (XDG_*): all the workdir's here
        tempfile.tempdir = str(env.workdir)
        os.environ["XDG_DATA_HOME"] = str(env.workdir / "data")
        os.environ["XDG_CACHE_HOME"] = str(env.workdir / "cache")
        flow = payment_flow(str(env.store.path))()
        flow.kickoff(inputs={"id": env.task_id, "task": env.task, "model": env.model})
        return flow.state.final


def make_agent(env):
    return CrewAiAgent(env)


def make_blind_agent(env):
    return CrewAiAgent(env, blind=True)
