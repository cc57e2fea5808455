"""Agents written the way a user writes one from the docs (their own state file, the
client from env, an effect through faultsim.effect), on tests/data/one_charge.toml: a
correct one, and probes that escape the sandbox, hang, or import a framework inside run().
Used in both modes (the subprocess mode loads them as `user_agents:NAME`)."""
from __future__ import annotations

import json
import os
import time

import faultsim

TOOLS = [{"name": "charge_card", "description": "Charge a card.",
          "input_schema": {"type": "object", "properties": {
              "customer": {"type": "string"}, "cents": {"type": "integer"}},
              "required": ["customer", "cents"]}}]
ESCAPE_LOG = "/tmp/faultsim-user-agents-escape.log"  # must never exist on the real disk
# where an importer caches this module's byte code; the probe's file must never land there
BYTECODE_CACHE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "__pycache__")
BYTECODE_PROBE = os.path.join(BYTECODE_CACHE, "user_agents.faultsim-probe.pyc")


@faultsim.effect("billing", key=lambda customer, cents, idempotency_key: idempotency_key)
def charge_card(customer, cents, idempotency_key):
    raise NotImplementedError("production: the payment API")


def save(path: str, data: dict) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(data, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


class Agent:
    """Correct: the conversation saved atomically after every step; a tool call in flight
    is run again on resume (the charge is keyed, so that is safe)."""

    def __init__(self, env):
        self.env = env
        self.path = os.path.join(str(env.workdir), "state.json")

    def recovering(self, state: dict) -> None:
        """Called when a resumed incarnation found a checkpoint."""

    def run(self):
        os.makedirs(str(self.env.workdir), exist_ok=True)
        if os.path.exists(self.path):
            with open(self.path) as f:
                state = json.load(f)
            self.recovering(state)
        else:
            state = {"messages": [{"role": "user", "content": self.env.task}]}
            save(self.path, state)
        while True:
            last = state["messages"][-1]
            if last["role"] == "assistant":
                calls = [b for b in last["content"] if b["type"] == "tool_use"]
                if not calls:
                    return "".join(b["text"] for b in last["content"] if b["type"] == "text")
                results = [{"type": "tool_result", "tool_use_id": b["id"],
                            "content": json.dumps(charge_card(**b["input"],
                                                              idempotency_key=b["id"]))}
                           for b in calls]
                state["messages"].append({"role": "user", "content": results})
            else:
                response = self.env.client.messages.create(
                    model=self.env.model, max_tokens=1024, tools=TOOLS,
                    messages=state["messages"])
                state["messages"].append({"role": "assistant", "content": [
                    b.model_dump(exclude_none=True) for b in response.content]})
            save(self.path, state)


def make_agent(env):
    return Agent(env)


class _LogsOutside(Agent):
    def run(self):
        with open(ESCAPE_LOG, "a") as f:  # a log next to the agent, not under env.workdir
            f.write(f"incarnation {self.env.incarnation}\n")
        return super().run()


def logs_outside(env):
    """Probe: every incarnation, the clean run included, writes outside env.workdir."""
    return _LogsOutside(env)


class _CrashReportOutside(Agent):
    def recovering(self, state):
        try:  # a best-effort crash report, as a user would write one
            with open(ESCAPE_LOG, "a") as f:
                f.write("recovered\n")
        except OSError:
            pass


def crash_report_outside(env):
    """Probe: only a resumed run writes outside env.workdir, and carries on if refused."""
    return _CrashReportOutside(env)


class _CrashReportInside(Agent):
    def recovering(self, state):
        with open(os.path.join(str(self.env.workdir), "recovered.log"), "a") as f:
            f.write("recovered\n")


def crash_report_inside(env):
    """Correct: the same crash report, kept under env.workdir."""
    return _CrashReportInside(env)


def wait_for_lock(path: str) -> None:
    while os.path.exists(path):  # a lock file nobody will ever remove
        time.sleep(0.001)


class _HangsOnResume(Agent):
    def recovering(self, state):
        lock = os.path.join(str(self.env.workdir), "state.lock")
        with open(lock, "w") as f:
            f.write("held")
        wait_for_lock(lock)


def hangs_on_resume(env):
    """Probe: a resumed run that waits for a lock forever."""
    return _HangsOnResume(env)


class _ImportsInRun(Agent):
    def run(self):
        import jsonschema  # a framework imported lazily, inside run(): reads its own files

        jsonschema.validate({"customer": "CUST-1"}, {"type": "object"})
        return super().run()


def imports_in_run(env):
    """Correct, though it imports jsonschema (which lists its bundled schemas) in run()."""
    return _ImportsInRun(env)


class _CachesByteCode(Agent):
    def run(self):
        try:  # as an importer writes its byte-code cache: best-effort, skipped if refused
            os.makedirs(BYTECODE_CACHE, exist_ok=True)
            with open(BYTECODE_PROBE, "wb") as f:
                f.write(b"\0")
        except OSError:
            pass
        return super().run()


def caches_byte_code(env):
    """Correct: an interpreter's best-effort byte-code cache outside env.workdir is not
    the agent's state (refused, as on a read-only disk, and not an escape)."""
    return _CachesByteCode(env)
