"""A user's agent that keeps its conversation, thinking blocks included, as an fsynced
JSONL log: one line per message, written with `open(path, "a")`, flushed and fsynced
before the agent acts on it. On restart it reads the lines back; a torn last line (the
crash came inside the append) is cut off before the next append, or the next message
would be glued to it. Thinking must go back to the API exactly as it came (signed), so
each assistant message is logged whole.

`make_agent` is correct; `make_agent_drops_thinking` is the mistake a user makes when
logging only what they read (text and tool calls) while the running process keeps the
whole reply: its clean run passes, a resumed request sends an assistant tool_use turn
without its thinking block, which the API refuses.
"""
from __future__ import annotations

import json
import os

import faultsim

TOOLS = [{"name": "refund", "description": "Refund an order.",
          "input_schema": {"type": "object", "properties": {
              "order_id": {"type": "string"}, "cents": {"type": "integer"}},
              "required": ["order_id", "cents"]}}]
THINKING = {"type": "enabled", "budget_tokens": 1024}


@faultsim.effect("payments", key=lambda order_id, cents, key: key)
def refund(order_id, cents, key):
    raise NotImplementedError("production: the payment provider's refund call")


def read_log(path: str) -> list[dict]:
    if not os.path.exists(path):
        return []
    with open(path, "rb") as f:
        data = f.read()
    messages, good = [], 0
    for line in data.splitlines(keepends=True):
        try:
            if not line.endswith(b"\n"):
                raise ValueError("torn")
            messages.append(json.loads(line))
        except ValueError:
            break
        good += len(line)
    if good < len(data):  # a torn tail: cut it off before appending again
        with open(path, "r+b") as f:
            f.truncate(good)
            os.fsync(f.fileno())
    return messages


def append_log(path: str, message: dict, raw: bool = False) -> None:
    new = not os.path.exists(path)
    if raw:  # the same append on a bare descriptor (os.write lands at the end: O_APPEND)
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, (json.dumps(message) + "\n").encode())
            os.fsync(fd)
        finally:
            os.close(fd)
    else:
        with open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps(message) + "\n")
            f.flush()
            os.fsync(f.fileno())
    if new:
        fd = os.open(os.path.dirname(path), os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


class ThinkingAgent:
    def __init__(self, env, keep_thinking: bool = True, raw: bool = False) -> None:
        self.env, self.keep_thinking, self.raw = env, keep_thinking, raw
        self.path = os.path.join(str(env.workdir), "conversation.jsonl")

    def run(self):
        os.makedirs(str(self.env.workdir), exist_ok=True)
        messages = read_log(self.path)
        if not messages:
            messages = [{"role": "user", "content": self.env.task}]
            append_log(self.path, messages[0], self.raw)
        while True:
            last = messages[-1]
            if last["role"] == "assistant":
                calls = [b for b in last["content"] if b["type"] == "tool_use"]
                if not calls:
                    return "".join(b["text"] for b in last["content"] if b["type"] == "text")
                results = [{"type": "tool_result", "tool_use_id": c["id"],
                            "content": json.dumps(refund(
                                c["input"]["order_id"], c["input"]["cents"],
                                key=f"{self.env.task_id}:{c['id']}"))} for c in calls]
                message = {"role": "user", "content": results}
            else:
                reply = self.env.client.messages.create(
                    model=self.env.model, max_tokens=2048, thinking=THINKING, tools=TOOLS,
                    messages=messages)
                message = {"role": "assistant",
                           "content": [b.model_dump(exclude_none=True) for b in reply.content]}
            if self.keep_thinking:
                append_log(self.path, message, self.raw)
            else:  # logs what it reads, keeps the whole reply in memory only
                append_log(self.path, {**message, "content": [
                    b for b in message["content"] if b["type"] not in ("thinking",
                                                                        "redacted_thinking")]})
            messages.append(message)


def make_agent(env):
    return ThinkingAgent(env)


def make_agent_drops_thinking(env):
    return ThinkingAgent(env, keep_thinking=False)


def make_agent_os_write(env):
    return ThinkingAgent(env, raw=True)
