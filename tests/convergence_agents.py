"""Agents of a few shapes for the convergence property test (tests/test_convergence.py),
written the way a user writes one: a JSON state file, the client from env, a loop. Some
keep state faultsim cannot see on disk (in the instance, a module global, a class
attribute, `env.incarnation`, tokens counted in memory only) and report it at the end,
so a resumed run that skipped steps ends differently from the clean run: convergence must
not cut those (the verdicts with and without it must be the same). For pairs
(faultsim.inprocess.after_convergence): `effect` files a note per order with a keyed
service (a resumed run re-files it, deduplicated: an attempt counted in the history), and
`marker` breaks a rule only under two crashes: a resume writes `recovering` until its
first answer, and a resume that finds it left by a crashed resume starts over.
For convergence with an earlier resumed run (faultsim.inprocess.leads): `journal` makes a
resume that finds a tool call pending note it in `journal.log` (the clean run never
writes one, so such runs never meet it; runs resumed from states that differ only in
whether the lookup was made meet each other), and `leftover` makes a resume remember in
memory whether it found a stale `state.json.tmp` (it deletes it) and report it at the end:
two runs equal on disk at their first request differ in memory, and must not be cut one
against the other."""
from __future__ import annotations

import contextvars
import json
import os
import tempfile

from faultsim.agent import Outcome

TOOLS = [{"name": "lookup_order", "description": "Look an order up.",
          "input_schema": {"type": "object", "properties": {"order_id": {"type": "string"}},
                           "required": ["order_id"]}}]
CALLS = {"n": 0}  # shape "global": module-level state


class Counter:
    n = 0  # shape "class": a class attribute


def scenario_text(steps: int, effect: bool = False) -> str:
    answer = f"Looked up {steps} orders."
    lines = [f'id = "lookups_{steps}"',
             f'task = "Look up ORD-1 to ORD-{steps}, one at a time, and say how many."',
             f'expected_final_answer = "{answer}"', "", "[checkpoint]",
             'files = ["state.json"]', "", "[services.orders]", 'kind = "readonly"']
    lines += [f'records."ORD-{i}" = {{ carrier = "C{i}" }}' for i in range(1, steps + 1)]
    if effect:
        lines += ["", "[services.notes]", 'kind = "keyed"']
    for i in range(1, steps + 1):
        lines += ["", "[[turns]]", 'tool_calls = [{ name = "lookup_order", input = '
                  f'{{ order_id = "ORD-{i}" }} }}]']
    return "\n".join(lines + ["", "[[turns]]", f'final = "{answer}"', ""])


class Agent:
    def __init__(self, env, save: str, late: bool, hidden: str | None, effect: bool = False,
                 marker: bool = False, journal: bool = False) -> None:
        self.env, self.save_how, self.late, self.hidden = env, save, late, hidden
        self.effect, self.marker, self.journal = effect, marker, journal
        self.leftover = False  # shape "leftover": whether a resume found a stale temp file
        self.recovering = os.path.join(env.workdir, "recovering")
        self.root = str(env.workdir)
        self.path = os.path.join(self.root, "state.json")
        self.asked = 0  # requests this process made (shape "memory")
        self.spent = 0  # tokens this process was billed (shape "tokens")

    def save(self, state: dict) -> None:
        data = json.dumps(state)
        if self.save_how == "direct":  # in place: a torn write is a crash state
            with open(self.path, "w") as f:
                f.write(data)
            return
        if self.save_how == "tempfile":  # a random temp name: drawn after every request
            fd, tmp = tempfile.mkstemp(dir=self.root, suffix=".tmp")
            with os.fdopen(fd, "w") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
        else:
            tmp = self.path + ".tmp"
            with open(tmp, "w") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, self.path)

    def run(self):
        os.makedirs(self.root, exist_ok=True)
        if self.hidden:
            CALLS["n"] = Counter.n = 0
        if self.hidden == "leftover" and os.path.exists(self.path):
            self.leftover = os.path.exists(self.path + ".tmp")
            if self.leftover:
                os.remove(self.path + ".tmp")
        state = None
        if os.path.exists(self.path):
            try:
                with open(self.path) as f:
                    state = json.load(f)
            except ValueError:
                state = None  # torn: start over (a finding, not a crash)
        marked = False
        if state is not None and self.marker:
            if os.path.exists(self.recovering):  # the last recovery crashed: distrust it
                os.remove(self.recovering)
                state = None  # (the bug: a second crash throws the progress away)
            else:
                with open(self.recovering, "w") as f:
                    f.write("resuming\n")
                marked = True
        if state is None:
            state = {"messages": [{"role": "user", "content": self.env.task}], "tokens": 0}
            self.save(state)
        elif self.journal and state["messages"][-1]["role"] == "assistant":
            pending = [b["id"] for b in state["messages"][-1]["content"]
                       if b["type"] == "tool_use"]
            if pending:  # a resume settles a call left pending: noted for good
                with open(os.path.join(self.root, "journal.log"), "a") as f:
                    f.write(f"redo {' '.join(pending)}\n")
        while True:
            last = state["messages"][-1]
            if last["role"] == "assistant":
                calls = [b for b in last["content"] if b["type"] == "tool_use"]
                if not calls:
                    return self.finish(state, "".join(b["text"] for b in last["content"]
                                                      if b["type"] == "text"))
                orders = self.env.services["orders"]
                results = []
                for b in calls:
                    order = b["input"]["order_id"]
                    found = orders.read(order)
                    if self.effect:  # keyed by the order: filed again, deduplicated
                        self.env.services["notes"].submit({"order": order, **found},
                                                          key=f"note-{order}")
                    results.append({"type": "tool_result", "tool_use_id": b["id"],
                                    "content": json.dumps(found)})
                state["messages"].append({"role": "user", "content": results})
                self.save(state)
            else:
                response = self.env.client.messages.create(
                    model=self.env.model, max_tokens=512, tools=TOOLS,
                    messages=state["messages"])
                used = response.usage.input_tokens + response.usage.output_tokens
                state["tokens"] += used
                if self.hidden:  # only the shape's own: any counter in memory is state
                    self.asked += 1
                    CALLS["n"] += 1
                    Counter.n += 1
                    self.spent += used
                state["messages"].append({"role": "assistant", "content": [
                    b.model_dump(exclude_none=True) for b in response.content]})
                if marked:  # recovered: the first answer came
                    os.remove(self.recovering)
                    marked = False
                if not self.late:  # late: the answer is saved with the tool results only
                    self.save(state)

    def finish(self, state: dict, answer: str):
        hidden = {"memory": lambda: self.asked, "global": lambda: CALLS["n"],
                  "class": lambda: Counter.n,
                  "incarnation": lambda: self.env.incarnation,
                  "leftover": lambda: self.leftover}.get(self.hidden)
        if hidden is not None:  # what this process did, written to the outputs
            os.makedirs(os.path.join(self.root, "workspace"), exist_ok=True)
            with open(os.path.join(self.root, "workspace", "summary.txt"), "w") as f:
                f.write(f"{self.hidden}: {hidden()}\n")
        tokens = self.spent if self.hidden == "tokens" else state["tokens"]
        return Outcome("completed", answer, tokens_used=tokens)


def factory(save: str = "atomic", late: bool = False, hidden: str | None = None,
            effect: bool = False, marker: bool = False, journal: bool = False):
    def make_agent(env):
        return Agent(env, save, late, hidden, effect, marker, journal)

    make_agent.__qualname__ = f"make_agent[{save},{late},{hidden},{effect},{marker}," \
                              f"{journal}]"
    return make_agent


class ContextAgent(Agent):
    """The plain agent run in a copy of its context, as a user sets a context variable for
    the run (a trace id for logging) without keeping a token: its `run` frame stands in a
    call through C (Context.run) for the whole run, which CPython 3.11 shows at the call's
    PRECALL or at its CALL depending on how often that code ran before in the process."""

    def run(self):
        return contextvars.copy_context().run(self._traced)

    def _traced(self):
        TRACE_ID.set(os.path.basename(self.root))  # the same in every incarnation
        return super().run()


TRACE_ID = contextvars.ContextVar("trace_id", default=None)


def context_agent(env):
    return ContextAgent(env, "atomic", False, None)
