"""The current-release sweep's larger ADK agent (README): it pays a supplier invoice and
confirms it by email, three tools on ADK's `SqliteSessionService`. `make_agent` restarts by
sending the request again (as `agent.py`), `make_resumable` resumes the unfinished
invocation of a resumable App (as `resumable.py`)."""
from __future__ import annotations

import itertools
import json
import time

import faultsim
from google.adk.agents import LlmAgent
from google.adk.apps import App, ResumabilityConfig
from google.adk.models.anthropic_llm import AnthropicLlm
from google.adk.platform import time as adk_time
from google.adk.runners import Runner
from google.adk.sessions.sqlite_session_service import SqliteSessionService
from google.genai import types

USER = "accounts"


@faultsim.effect("invoices", key=lambda invoice: invoice)
def _invoice(invoice: str) -> dict:
    raise RuntimeError("production ledger not configured in this example")


@faultsim.effect("payments", key=lambda invoice, amount_cents: f"pay-{invoice}-{amount_cents}")
def _pay(invoice: str, amount_cents: int) -> dict:
    raise RuntimeError("production payment client not configured in this example")


@faultsim.effect("email", key=lambda to, subject, body: f"mail-{to}-{subject}")
def _mail(to: str, subject: str, body: str) -> dict:
    raise RuntimeError("production mail client not configured in this example")


def lookup_invoice(invoice: str) -> str:
    """Look up an invoice."""
    return json.dumps(_invoice(invoice))


def pay_invoice(invoice: str, amount_cents: int) -> str:
    """Pay a supplier invoice (the provider takes an idempotency key)."""
    return json.dumps(_pay(invoice, amount_cents))


def send_email(to: str, subject: str, body: str) -> str:
    """Send an email (the mail service takes an idempotency key)."""
    return json.dumps(_mail(to, subject, body))


class PaymentsAgent:
    def __init__(self, env, resumable: bool):
        self.env, self.resumable = env, resumable

    async def run(self) -> str:
        env = self.env
        ticks = itertools.count(1)  # a clock that moves on between events (agent.py says why)
        adk_time.set_time_provider(lambda: time.time() + next(ticks) / 1000)
        sessions = SqliteSessionService(db_path=str(env.store.path))
        agent = LlmAgent(name="payables", model=AnthropicLlm(model=env.model, max_tokens=1024),
                         instruction="You pay supplier invoices and confirm by email.",
                         tools=[lookup_invoice, pay_invoice, send_email])
        config = ResumabilityConfig(is_resumable=True) if self.resumable else None
        runner = Runner(app=App(name="payables", root_agent=agent, resumability_config=config),
                        session_service=sessions)
        session = await sessions.get_session(app_name="payables", user_id=USER,
                                             session_id=env.task_id)
        if session is None:
            session = await sessions.create_session(app_name="payables", user_id=USER,
                                                    session_id=env.task_id)
        message = types.Content(role="user", parts=[types.Part(text=env.task)])
        kwargs = {"new_message": message}
        if self.resumable and session.events:
            said = [e for e in session.events if e.content and e.content.parts]
            if said and said[-1].author != "user" and said[-1].is_final_response():
                return "".join(p.text or "" for p in said[-1].content.parts).strip()
            kwargs = {"invocation_id": session.events[-1].invocation_id}
        final = ""
        async for event in runner.run_async(user_id=USER, session_id=session.id, **kwargs):
            if event.is_final_response() and event.content and event.content.parts:
                final = "".join(p.text or "" for p in event.content.parts)
        return final.strip()


def make_agent(env):
    return PaymentsAgent(env, resumable=False)


def make_resumable(env):
    return PaymentsAgent(env, resumable=True)
