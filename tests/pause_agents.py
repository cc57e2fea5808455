"""Agents written as users write them, for the pause model (issue 55), on
tests/data/pause_charge.toml: `naive` keeps one state.json and trusts it is the only
writer (correct under process and power crashes; under a pause the woken incarnation
overwrites the new one's newer checkpoint); `fenced` holds a lease with a fencing token:
each version of its checkpoint is a file of its own named by (token, sequence), created
exclusively, and a load takes the highest; before an effect and before a save it checks
that no newer token holds the task, and stops (LeaseLost) when one does. A stale writer
can then neither overwrite the new owner's checkpoint nor be loaded over it."""
from __future__ import annotations

import json
import os
import uuid

from user_agents import TOOLS, charge_card, make_agent as naive  # noqa: F401

LEASE_SECONDS = 30


class LeaseLost(Exception):
    """Another worker holds the task now."""


class FencedAgent:
    def __init__(self, env):
        self.env = env
        self.root = str(env.workdir)
        self.lease = os.path.join(self.root, "lease")
        self.dir = os.path.join(self.root, "state")

    def _write(self, path: str, data: dict, exclusive: bool = False) -> None:
        tmp = f"{path}.{uuid.uuid4().hex[:8]}.tmp"  # two writers never share a temp file
        with open(tmp, "w") as f:
            json.dump(data, f)
            f.flush()
            os.fsync(f.fileno())
        if exclusive:
            try:
                os.link(tmp, path)  # fails if that version exists: compare-and-set
            except FileExistsError:
                os.unlink(tmp)
                raise LeaseLost(f"{path} was written by another worker") from None
            os.unlink(tmp)
        else:
            os.replace(tmp, path)

    def _now(self) -> float:
        return self.env.clock.now().timestamp()

    def leases(self) -> list[str]:
        return sorted(n for n in os.listdir(self.lease) if len(n) == 6)

    def acquire(self) -> int:
        """The next token, taken with an exclusive create: of two workers that read the
        same last lease, one gets the token and the other stops."""
        os.makedirs(self.lease, exist_ok=True)
        held = self.leases()
        if held:
            with open(os.path.join(self.lease, held[-1])) as f:
                if json.load(f)["expires"] > self._now():
                    raise LeaseLost("the task is leased to another worker")
        token = int(held[-1]) + 1 if held else 1
        self._write(os.path.join(self.lease, f"{token:06d}"),
                    {"expires": self._now() + LEASE_SECONDS}, exclusive=True)
        return token

    def check(self) -> None:
        """The fencing check: no newer token holds the lease or has saved."""
        if int(self.leases()[-1]) != self.token:
            raise LeaseLost("a newer token holds the lease")
        newest = self.versions()
        if newest and int(newest[-1][:6]) > self.token:
            raise LeaseLost(f"{newest[-1]} was saved under a newer token")

    def versions(self) -> list[str]:
        names = os.listdir(self.dir) if os.path.isdir(self.dir) else []
        return sorted(n for n in names if n.endswith(".json") and len(n) == 18)

    def load(self):
        names = self.versions()
        if not names:
            return 0, None
        with open(os.path.join(self.dir, names[-1])) as f:
            return int(names[-1][7:13]), json.load(f)

    def save(self, state: dict) -> None:
        self.check()  # fencing on save
        self.version += 1
        self._write(os.path.join(self.dir, f"{self.token:06d}-{self.version:06d}.json"),
                    state, exclusive=True)

    def run(self):
        os.makedirs(self.dir, exist_ok=True)
        self.token = self.acquire()
        self.version, state = self.load()
        if state is None:
            state = {"messages": [{"role": "user", "content": self.env.task}]}
            self.save(state)
        while True:
            last = state["messages"][-1]
            if last["role"] == "assistant":
                calls = [b for b in last["content"] if b["type"] == "tool_use"]
                if not calls:
                    return "".join(b["text"] for b in last["content"] if b["type"] == "text")
                results = []
                for b in calls:
                    self.check()  # fencing before the effect
                    results.append({"type": "tool_result", "tool_use_id": b["id"],
                                    "content": json.dumps(charge_card(
                                        **b["input"], idempotency_key=b["id"]))})
                state["messages"].append({"role": "user", "content": results})
            else:
                response = self.env.client.messages.create(
                    model=self.env.model, max_tokens=1024, tools=TOOLS,
                    messages=state["messages"])
                state["messages"].append({"role": "assistant", "content": [
                    b.model_dump(exclude_none=True) for b in response.content]})
            self.save(state)


def fenced(env):
    return FencedAgent(env)
