"""Turn addressing that follows any valid conversation: the fake places a request by which
scripted tool calls it answers (by id, any repeat, or by name and input), not by how many
tool-result turns it carries. Proven on agents that compact their history mid-run and
that rebuild it from step records, clean under every crash; and a compacting agent that
loses an unanswered tool call is caught."""
from __future__ import annotations

import json
import os

import pytest

from helpers import scenario_from
from faultsim.inprocess.explore import explore
from faultsim.model import Script, ToolCall, Turn, place

SCENARIO = """
id = "four_charges"
task = "Charge orders ORD-1 to ORD-4."
expected_final_answer = "Charged ORD-1, ORD-2, ORD-3 and ORD-4."
[services.payments]
kind = "keyed"
[[turns]]
text = "Starting with the first order."
tool_calls = [{ name = "charge", input = { order = "ORD-1" } }]
[[turns]]
tool_calls = [{ name = "charge", input = { order = "ORD-2" } },
              { name = "charge", input = { order = "ORD-3" } }]
[[turns]]
tool_calls = [{ name = "charge", input = { order = "ORD-4" } }]
[[turns]]
final = "Charged ORD-1, ORD-2, ORD-3 and ORD-4."
"""
TOOLS = [{"name": "charge", "description": "Charge an order.",
          "input_schema": {"type": "object", "properties": {"order": {"type": "string"}}}}]


def save_json(env, name, data):
    path = os.path.join(str(env.workdir), name)
    os.makedirs(env.workdir, exist_ok=True)
    with open(path + ".tmp", "w") as f:
        json.dump(data, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(path + ".tmp", path)
    fd = os.open(str(env.workdir), os.O_RDONLY)
    os.fsync(fd)
    os.close(fd)


def load_json(env, name, default):
    path = os.path.join(str(env.workdir), name)
    return json.load(open(path)) if os.path.exists(path) else default


def charge(env, call):
    # the provider deduplicates on the tool-use id: a re-run of the same call is harmless
    done = env.services["payments"].submit(call["input"], key=call["id"])
    return {"type": "tool_result", "tool_use_id": call["id"], "content": json.dumps(done)}


def ask(env, messages):
    reply = env.client.messages.create(model=env.model, max_tokens=512, tools=TOOLS,
                                       messages=messages)
    return {"role": "assistant", "content": [b.model_dump(exclude_none=True)
                                             for b in reply.content]}


class Compacting:
    """Keeps its conversation in state.json, and compacts it as long-running agents do:
    older turns become one summary, only the latest model turn (and its results) stay.
    `keep_pending=False` is the planted mistake: a model turn whose calls have no results
    yet is summarised away too, so a resume forgets the call was made."""

    def __init__(self, env, keep_pending=True):
        self.env, self.keep_pending = env, keep_pending

    def compact(self, messages):
        last = max(i for i, m in enumerate(messages) if m["role"] == "assistant")
        pending = last == len(messages) - 1
        tail = messages[last:] if self.keep_pending or not pending else []
        older = messages[1:last] if tail else messages[1:]
        if len(older) < 2:
            return messages
        done = [b["input"]["order"] for m in older if m["role"] == "assistant"
                and isinstance(m["content"], list)
                for b in m["content"] if b["type"] == "tool_use"]
        said = [m["content"].split(": ", 1)[1] for m in older if m["role"] == "assistant"
                and isinstance(m["content"], str)]  # an earlier summary
        summary = {"role": "assistant", "content": "Charged so far: " + ", ".join(said + done)}
        return [messages[0], summary, {"role": "user", "content": "Continue."}] + tail

    def run(self):
        messages = load_json(self.env, "state.json",
                             [{"role": "user", "content": self.env.task}])
        while True:
            last = messages[-1]
            if last["role"] == "assistant":
                if not _calls(last):
                    text = last["content"]
                    return text if isinstance(text, str) else \
                        "".join(b["text"] for b in text if b["type"] == "text")
                messages.append({"role": "user", "content": []})
                last = messages[-1]
            answered = {b.get("tool_use_id") for b in last["content"]} \
                if isinstance(last["content"], list) else set()
            missing = [c for c in _calls(messages[-2]) if c["id"] not in answered] \
                if len(messages) > 1 else []
            if missing:  # run the turn's calls one by one, saving each result
                for call in missing:
                    last["content"].append(charge(self.env, call))
                    self.save(messages)
                continue
            messages.append(ask(self.env, messages))
            self.save(messages)

    def save(self, messages):
        compacted = self.compact(messages)
        save_json(self.env, "state.json", compacted)
        if self.keep_pending:  # it goes on from what it saved (the mistake only saves so)
            messages[:] = compacted


def _calls(message):
    content = message["content"] if message["role"] == "assistant" else []
    return [b for b in content if isinstance(b, dict) and b["type"] == "tool_use"] \
        if isinstance(content, list) else []


class FromSteps:
    """Keeps step records, not messages, and rebuilds the conversation from them: one
    message pair per tool call (a parallel turn becomes several pairs), no text blocks."""

    def __init__(self, env):
        self.env = env

    def messages(self, steps, pending):
        out = [{"role": "user", "content": self.env.task}]
        for s in steps:
            out.append({"role": "assistant", "content": [s["call"]]})
            out.append({"role": "user", "content": [s["result"]]})
        if pending:
            out.append({"role": "assistant", "content": pending})
        return out

    def run(self):
        state = load_json(self.env, "steps.json", {"steps": [], "pending": []})
        while True:
            if state["pending"]:
                for call in list(state["pending"]):
                    state["steps"].append({"call": call, "result": charge(self.env, call)})
                    state["pending"].remove(call)
                    save_json(self.env, "steps.json", state)
                continue
            reply = ask(self.env, self.messages(state["steps"], []))
            calls = [b for b in reply["content"] if b["type"] == "tool_use"]
            if not calls:
                return "".join(b["text"] for b in reply["content"] if b["type"] == "text")
            state["pending"] = calls
            save_json(self.env, "steps.json", state)


@pytest.fixture(scope="module")
def scenario(tmp_path_factory):
    return scenario_from(tmp_path_factory, SCENARIO)


def test_place_follows_answered_calls_not_the_count_of_result_turns(scenario):
    script = scenario.script
    task = {"role": "user", "content": scenario.task}

    def pair(pos, i, repeat=""):
        call = script.turns[pos].tool_calls[i]
        tid = f"toolu_s_{pos + 1:02d}_{i + 1}{repeat}"
        return [{"role": "assistant", "content": [{"type": "tool_use", "id": tid,
                                                   "name": call.name, "input": call.input}]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": tid,
                                              "content": "ok"}]}]

    assert place(script, [task]) == 0
    assert place(script, [task] + pair(0, 0)) == 1
    # a parallel turn split into two pairs: three result turns, yet turn 3 is next
    assert place(script, [task] + pair(0, 0) + pair(1, 0) + pair(1, 1)) == 2
    # half of a parallel turn answered: that turn is not done
    assert place(script, [task] + pair(0, 0) + pair(1, 0)) == 1
    # compacted: a summary, then only the latest turn's pair, a repeat's ids
    summary = [{"role": "assistant", "content": "Charged ORD-1, ORD-2, ORD-3."},
               {"role": "user", "content": "Continue."}]
    assert place(script, [task] + summary + pair(2, 0, "_r2")) == 3
    # ids the agent made up: matched by name and input
    foreign = pair(0, 0)
    foreign[0]["content"][0]["id"] = foreign[1]["content"][0]["tool_use_id"] = "call_abc"
    assert place(script, [task] + foreign) == 1
    # results that answer nothing of the script: refused, never served a guessed turn
    stranger = pair(0, 0)
    stranger[0]["content"][0].update(id="call_x", input={"order": "ORD-9"})
    stranger[1]["content"][0]["tool_use_id"] = "call_x"
    from faultsim.model.fake import Unplaceable

    with pytest.raises(Unplaceable, match="none answers a call of script 's'"):
        place(script, [task] + stranger)


@pytest.mark.parametrize("agent", [Compacting, FromSteps], ids=["compacting", "from-steps"])
def test_agents_that_reshape_their_history_are_clean_under_every_crash(scenario, agent):
    from faultsim import run_once

    clean = run_once(scenario, agent)  # served every turn: all four orders charged
    assert clean.effects_by_service() == {"payments": 4}
    assert [q.position for q in clean.world.model.requests] == [0, 1, 2, 3]
    report = explore(agent, scenario, crash_model="all", crashes=2)
    for run in report.runs:
        assert len(run.explored) == len(run.kill_points) > 20
        assert run.ok, report.counterexamples()


def test_a_compacting_agent_that_loses_an_unanswered_call_is_caught(scenario):
    report = explore(lambda env: Compacting(env, keep_pending=False), scenario,
                     crash_model="process", crashes=1)
    [run] = report.runs
    broken = {v.invariant for f in run.failures for v in f.violations}
    assert "effects_exactly_once" in broken, (broken, report.counterexamples())
    # the counterexample names the turns the resumed run asked for: the lost turn, again
    shown = "\n".join(report.counterexamples(limit=10))
    assert "the resumed run asked the model for: turn" in shown
    assert " again" in shown
