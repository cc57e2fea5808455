"""langgraph #8039's graph, as a user writes one: a ReAct agent that looks up an invoice,
pays it (the provider takes an idempotency key) and emails a confirmation (a blind
receiver: every call is a new email), checkpointed by SqliteSaver with durability="sync".
Nothing here knows about crashes."""
from __future__ import annotations

from langchain_core.tools import tool
from langgraph.prebuilt import create_react_agent

from faultsim.adapters.langgraph import effect


@tool
@effect("invoices", key=lambda invoice: invoice)
def lookup_invoice(invoice: str) -> str:
    """Look up an invoice."""
    raise RuntimeError("production ledger not configured in this example")


@tool
@effect("payments", key=lambda invoice, amount_cents: f"pay-{invoice}-{amount_cents}")
def pay_invoice(invoice: str, amount_cents: int) -> str:
    """Pay a supplier invoice (the payment provider takes an idempotency key)."""
    raise RuntimeError("production payment client not configured in this example")


@tool
@effect("email")
def send_email(to: str, subject: str, body: str) -> str:
    """Send an email (no idempotency key: every call is a new email)."""
    raise RuntimeError("production mail client not configured in this example")


def react_payments(checkpointer, model):
    return create_react_agent(model, [lookup_invoice, pay_invoice, send_email],
                              checkpointer=checkpointer,
                              prompt="You pay supplier invoices and confirm by email.")
