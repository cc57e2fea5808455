"""An agent written the way a user writes one (its own checkpoint file, its own charge tool
routed with `faultsim.effect`, no faultsim marks), careful in `make_agent`, and variants
whose one mistake shows only at some steps of a long task: the first, the last, every
10th, or once the checkpoint passes 4 KiB. tests/test_classes.py asks which of them a
representative sweep (faultsim.core.classes) catches, and why."""
from __future__ import annotations

import json
import os

import faultsim
from tests.effect_agent import write_atomic as save_atomic  # temp file, fsync, rename

TOOLS = [{"name": "charge_card", "description": "Charge a customer's card.",
          "input_schema": {"type": "object", "properties": {
              "customer": {"type": "string"}, "cents": {"type": "integer"}},
              "required": ["customer", "cents"]}}]


@faultsim.effect("billing", key=lambda customer, cents, idempotency_key: idempotency_key,
                 lookup=lambda key: None)
def charge_card(customer, cents, idempotency_key):
    return {"charged": cents}


def save_in_place(path, data):
    with open(path, "w") as f:  # a crash mid-write leaves half a checkpoint
        f.write(json.dumps(data))
        f.flush()
        os.fsync(f.fileno())


class Biller:
    # the one mistake of a variant, or None (careful)
    flaw: str | None = None

    def __init__(self, env):
        self.env = env
        self.path = os.path.join(str(env.workdir), "state.json")

    def save(self, s, first=False):
        if self.flaw == "first_in_place" and first:
            save_in_place(self.path, s)  # "nothing to lose yet"
        elif self.flaw == "compact_every_10th" and s["turns"] % 10 == 9:
            save_in_place(self.path, s)  # the periodic compaction rewrites in place
        elif self.flaw == "big_in_place" and len(json.dumps(s)) > 4096:
            save_in_place(self.path, s)  # "large files are written directly"
        else:
            save_atomic(self.path, s)

    def key(self, call_id, turn):
        if self.flaw == "new_key_every_10th" and turn % 10 == 9:
            # the batch path: a retry after a crash gets a fresh key
            return f"{self.env.task_id}:{call_id}:{self.env.incarnation}"
        return f"{self.env.task_id}:{call_id}"

    def run(self):
        os.makedirs(str(self.env.workdir), exist_ok=True)
        if os.path.exists(self.path):
            with open(self.path) as f:
                s = json.load(f)
        else:
            s = {"messages": [{"role": "user", "content": self.env.task}], "pending": [],
                 "turns": 0, "tokens": 0}
            self.save(s, first=True)
        while True:
            last = s["messages"][-1]
            if last["role"] == "assistant" and not s["pending"]:
                answer = "".join(b.get("text", "") for b in last["content"]
                                 if b.get("type") == "text")
                if self.flaw == "last_appends_twice":
                    out = os.path.join(str(self.env.workdir), "workspace", "answers.txt")
                    os.makedirs(os.path.dirname(out), exist_ok=True)
                    with open(out, "a") as f:  # appended again by a resume after it
                        f.write(answer + "\n")
                return answer
            if not s["pending"]:
                r = self.env.client.messages.create(model=self.env.model, max_tokens=512,
                                                    messages=s["messages"], tools=TOOLS)
                s["tokens"] += r.usage.input_tokens + r.usage.output_tokens
                s["messages"].append({"role": "assistant", "content": [
                    b.model_dump(exclude_none=True) for b in r.content]})
                s["pending"] = [{"id": b.id, "input": b.input} for b in r.content
                                if b.type == "tool_use"]
                self.save(s)
                continue
            results = []
            for call in s["pending"]:
                key = self.key(call["id"], s["turns"])
                done = charge_card.lookup(key)  # charged before the crash?
                out = done if done is not None else charge_card(
                    call["input"]["customer"], call["input"]["cents"], idempotency_key=key)
                results.append({"type": "tool_result", "tool_use_id": call["id"],
                                "content": json.dumps(out)})
            s["messages"].append({"role": "user", "content": results})
            s["pending"], s["turns"] = [], s["turns"] + 1
            self.save(s)


def _variant(flaw):
    def make(env):
        agent = Biller(env)
        agent.flaw = flaw
        return agent
    make.__name__ = f"make_agent_{flaw}"
    return make


def make_agent(env):
    return Biller(env)


make_agent_first_in_place = _variant("first_in_place")
make_agent_last_appends_twice = _variant("last_appends_twice")
make_agent_compact_every_10th = _variant("compact_every_10th")
make_agent_new_key_every_10th = _variant("new_key_every_10th")
make_agent_big_in_place = _variant("big_in_place")
