"""An agent that keeps its conversation as an append-only JSONL transcript, the shape
Claude Code sessions and most home-grown harnesses use: one line per event, each line
fsynced before the agent acts on it.

    transcript.jsonl
      {"message": {"role": "user", "content": "..."}}
      {"message": {"role": "assistant", "content": [... tool_use ...]}}
      {"intent": "toolu_..."}                       # before an effect that has no key
      {"message": {"role": "user", "content": [... tool_result ...]}}

A crash can leave the last line torn (cut short, or padded with zeros after a power loss).
On resume the agent cuts the file back to its last whole line before appending again:
otherwise its next line would be glued to the torn one and lost.

    faultsim run examples/jsonl_transcript/scenario.toml \\
        --agent examples/jsonl_transcript/agent.py --crash-model all --crashes 2
"""
from __future__ import annotations

import json
import os

TOOLS = [
    {"name": "charge_card", "description": "Charge the customer's card for an order.",
     "input_schema": {"type": "object", "properties": {
         "order_id": {"type": "string"}, "amount_cents": {"type": "integer"}},
         "required": ["order_id", "amount_cents"]}},
    {"name": "send_receipt", "description": "Email the customer a receipt.",
     "input_schema": {"type": "object", "properties": {
         "to": {"type": "string"}, "body": {"type": "string"}},
         "required": ["to", "body"]}},
]


class Transcript:
    """The append-only log. `repair` cuts a torn tail back before the first append."""

    def __init__(self, path: str, *, repair: bool = True) -> None:
        self.path = path
        self.repair = repair

    def load(self) -> list[dict]:
        if not os.path.exists(self.path):
            return []
        with open(self.path, "rb") as f:
            data = f.read()
        whole = data[: data.rfind(b"\n") + 1]  # a torn last line has no newline yet
        if self.repair and whole != data:
            with open(self.path, "r+b") as f:
                f.truncate(len(whole))
                f.flush()
                os.fsync(f.fileno())
        return [json.loads(line) for line in whole.splitlines()]

    def append(self, entry: dict) -> None:
        created = not os.path.exists(self.path)
        with open(self.path, "ab") as f:
            f.write(json.dumps(entry).encode() + b"\n")
            f.flush()
            os.fsync(f.fileno())
        if created:  # the new name must survive a power loss too
            fd = os.open(os.path.dirname(self.path), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)


class TranscriptAgent:
    def __init__(self, env, *, repair: bool = True) -> None:
        self.env = env
        os.makedirs(env.workdir, exist_ok=True)
        self.log = Transcript(os.path.join(str(env.workdir), "transcript.jsonl"),
                              repair=repair)

    def run(self):
        entries = self.log.load()
        if not entries:
            entries = [{"message": {"role": "user", "content": self.env.task}}]
            self.log.append(entries[0])
        messages = [e["message"] for e in entries if "message" in e]
        intents = {e["intent"] for e in entries if "intent" in e}
        while True:
            last = messages[-1]
            if last["role"] == "assistant":
                calls = [b for b in last["content"] if b["type"] == "tool_use"]
                if not calls:
                    return "".join(b["text"] for b in last["content"] if b["type"] == "text")
                results = []
                for call in calls:
                    if call["name"] == "send_receipt" and call["id"] in intents:
                        # sent or not, we cannot tell: a person decides
                        return type("Escalated", (), {
                            "status": "escalated", "final_answer": None,
                            "escalation": f"receipt {call['id']}: sent or not, unknown"})()
                    results.append({"type": "tool_result", "tool_use_id": call["id"],
                                    "content": json.dumps(self.call_tool(call))})
                message = {"role": "user", "content": results}
            else:
                reply = self.env.client.messages.create(
                    model=self.env.model, max_tokens=1024, tools=TOOLS, messages=messages)
                message = {"role": "assistant",
                           "content": [b.model_dump(exclude_none=True) for b in reply.content]}
            self.log.append({"message": message})
            messages.append(message)

    def call_tool(self, call: dict) -> dict:
        args = call["input"]
        if call["name"] == "charge_card":
            # the payment provider deduplicates on the key: a repeat is harmless
            key = f"{self.env.task_id}:charge:{args['order_id']}"
            return self.env.services["payments"].submit(args, key=key)
        if call["name"] == "send_receipt":
            # email has no key: log the intent first, so a resume knows it may have gone
            self.log.append({"intent": call["id"]})
            return self.env.services["email"].send(args)
        return {"error": f"unknown tool {call['name']}"}


def make_agent(env):
    return TranscriptAgent(env)


def make_agent_keeps_torn_tail(env):
    """The planted mistake: skips a torn last line when reading but appends right after
    it, so the next record is glued to the torn bytes."""
    return TranscriptAgent(env, repair=False)
