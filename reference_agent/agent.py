"""The agent loop with the checkpoint protocol P1–P12 in plain sight.

One `Agent` is one incarnation: built fresh by `make_agent(env)`, it starts the task or
resumes it from the files alone; nothing in memory survives a crash.
"""
from __future__ import annotations

import datetime as _dt
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import retention
from .checkpoint import Checkpoint, CheckpointStore, OwnershipLost, PendingCall
from .records import (COMPLETED, ESCALATED, FAILED, RUNNING, Decisions, Intents, Plan,
                      Progress, RunStatus)
from .stores import RedisCheckpointStore, SqliteCheckpointStore, store_for
from .storage import FENCE, atomic_write_json, ensure_dir, fsync_path, read_json
from faultsim.world import ServiceError  # what the world's receivers raise on refusal
from .tools import (BLIND, KEYED, TOOLS, Tool, ToolInputError, get_tool, target_of,
                    workspace_path)

SYSTEM_PROMPT = ("You are a careful operations agent. Use the tools to complete the task, "
                 "one step at a time, and finish with a short final answer.")
MAX_TOKENS = 1024
SUPERSEDED = "superseded"  # P13: another incarnation owns the task now (a legal stop)
MAX_TURNS = 10_000  # when the env names no limit (the scenario's max_turns, env.max_turns)
KEY_WINDOW = _dt.timedelta(hours=24)  # how long receivers keep idempotency keys


class AgentError(Exception):
    """The run cannot go on (a model answer it cannot handle, too many turns)."""


class Escalation(Exception):
    """An effect whose completion cannot be known: stop and hand it to a person (P11)."""

    def __init__(self, step: int | None, reason: str) -> None:
        self.step, self.reason = step, reason
        super().__init__(reason)


@dataclass
class RunResult:
    status: str  # completed | escalated
    final_answer: str | None
    turns: int
    tokens_used: int
    steps: int  # completed steps in the progress file
    escalation: str | None = None


def _text(content: list[dict]) -> str:
    return "".join(b.get("text", "") for b in content if b.get("type") == "text")


class Agent:
    """Start or resume one task in namespace `namespace` under `env.workdir`."""

    checkpoint_store = CheckpointStore  # env.store kind "file" (the default)
    sqlite_store = SqliteCheckpointStore  # kind "sqlite"
    redis_store = RedisCheckpointStore  # kind "redis"
    progress_class = Progress
    key_window = KEY_WINDOW

    def __init__(self, env: Any, *, namespace: str | None = None, task: str | None = None,
                 run_id: str | None = None) -> None:
        self.env = env
        self.client = env.client
        self.clock = env.clock
        self.task = task if task is not None else env.task
        self.run_id = run_id or env.task_id
        self.namespace = namespace or self.run_id
        self.model = getattr(env, "model", None) or "claude-sonnet-5-5"
        self.max_turns = getattr(env, "max_turns", None) or MAX_TURNS
        self.root = Path(env.workdir)
        self.workspace = self.root / "workspace"
        self.dir = self.root / "runs" / self.namespace
        self.archive_dir = self.root / "archive" / self.namespace
        self.store = store_for(self)
        self.status = RunStatus(self.dir / "run.json")

    # -- small helpers --------------------------------------------------------------------
    def now(self) -> str:
        return self.clock.now().isoformat()

    def service(self, name: str) -> Any:
        return self.env.services[name]

    def mark(self, name: str, **info: Any) -> None:
        """Tell an observer (faultsim) where we are; a no-op in production."""
        hook = getattr(self.env, "mark", None)
        if hook is not None:
            hook(name, namespace=self.namespace, **info)

    def idempotency_key(self, call: PendingCall) -> str:
        """P8: derived from the task and the tool call, known before the effect."""
        return f"{self.namespace}:{call.id}"

    # -- the run --------------------------------------------------------------------------
    def run(self) -> RunResult:
        # P13: every write of this run first checks the task is still its own (storage).
        # No contextvars.Token is kept: one held in this frame for the whole run is memory
        # convergence cannot read (a C object), and no resumed run was ever cut. (A run
        # called through Context.run would do as well: convergence reads a frame in a call
        # through C at one offset, specialised or not, cpython.position.)
        previous = FENCE.get()
        FENCE.set(self._owns_write)
        try:
            return self._run()
        finally:
            FENCE.set(previous)  # an enclosing run's check (a subagent's run), or None

    def _owns_write(self) -> None:
        self.owns("write")

    def _run(self) -> RunResult:
        if ":" not in self.namespace:
            retention.sweep(self.root / "runs", self.clock.now(), keep=self.namespace)
        status = self.status.read()
        if status and status["status"] == COMPLETED:
            return self._archived_result()
        if status and status["status"] == ESCALATED:
            return self._escalated_result(status.get("reason", ""))
        ensure_dir(self.dir)
        ensure_dir(self.workspace)
        try:
            checkpoint = self.store.load()
            self._open_records()
            if checkpoint is None:
                checkpoint = self._start()
            else:
                self.mark("resume.start")
                checkpoint = self._resume(checkpoint)
            return self._loop(checkpoint)
        except Escalation as esc:
            return self._escalate(esc)
        except OwnershipLost as lost:  # P13: paused past its turn; the task is another's
            self.mark("run.superseded")
            return RunResult(SUPERSEDED, None, 0, 0, 0, escalation=str(lost))
        except Exception as exc:  # a real kill is a BaseException and never lands here
            self.status.write(self.run_id, FAILED, self.now(), namespace=self.namespace,
                              error=f"{type(exc).__name__}: {exc}")
            raise

    def _open_records(self) -> None:
        self.plan = Plan(self.dir / "plan.json", self.run_id, self.task)
        self.progress = self.progress_class(self.dir / "progress.json", self.run_id)
        self.intents = Intents(self.dir / "intents.json")
        self.decisions = Decisions(self.dir / "decisions.json")

    def _start(self) -> Checkpoint:
        checkpoint = Checkpoint.new(self.task)
        self.plan.save()  # P6: the plan file exists before the first side effect
        self.store.save(checkpoint)
        self.status.write(self.run_id, RUNNING, self.now(), namespace=self.namespace)
        return checkpoint

    def _loop(self, checkpoint: Checkpoint) -> RunResult:
        while True:
            if self._finished(checkpoint):
                return self._finish(checkpoint)
            if checkpoint.turns >= self.max_turns:
                raise AgentError(f"{self.namespace}: stopped after {self.max_turns} turns")
            self.owns("request")  # P13: a stale incarnation spends no tokens
            response = self.client.messages.create(
                model=self.model, max_tokens=MAX_TOKENS, system=SYSTEM_PROMPT,
                tools=[t.spec() for t in TOOLS.values()], messages=checkpoint.messages)
            checkpoint.tokensUsed += response.usage.input_tokens + response.usage.output_tokens
            content = [block.model_dump(mode="json", exclude_none=True)
                       for block in response.content]
            checkpoint.messages.append({"role": "assistant", "content": content})
            self.mark("model.response", stop_reason=response.stop_reason)
            if response.stop_reason == "tool_use":
                calls = [PendingCall(b["id"], b["name"], b["input"]) for b in content
                         if b["type"] == "tool_use"]
                self._save_point_a(checkpoint, calls)
                results = [self._settle(checkpoint, call) for call in calls]
                self._save_point_b(checkpoint, results)
            elif response.stop_reason == "end_turn":
                checkpoint.turns += 1
                self.store.save(checkpoint)
            else:
                raise AgentError(f"{self.namespace}: the model stopped with "
                                 f"stop_reason={response.stop_reason!r} at turn "
                                 f"{checkpoint.turns + 1}; cannot continue")

    # -- P2: the two save points ----------------------------------------------------------
    def _save_point_a(self, checkpoint: Checkpoint, calls: list[PendingCall]) -> None:
        """After the model names tools, before any runs: the calls are pending on disk."""
        for call in calls:
            get_tool(call.name)  # an unknown tool is refused before anything is saved
        checkpoint.pendingToolUse = calls
        self.plan.add([self._plan_entry(call) for call in calls])
        self.store.save(checkpoint)
        self.mark("checkpoint.A")

    def _save_point_b(self, checkpoint: Checkpoint, results: list[dict]) -> None:
        """After the tool results are in the conversation: the turn is complete."""
        checkpoint.messages.append({"role": "user", "content": results})
        checkpoint.turns += 1
        checkpoint.pendingToolUse = None
        self.store.save(checkpoint)
        self.mark("checkpoint.B")

    def _plan_entry(self, call: PendingCall) -> dict:
        tool = get_tool(call.name)
        checks = {
            "write_file": "the file exists with the recorded sha256",
            "create_ticket": "the tracker answers the idempotency key with the recorded ticket",
            "charge_payment": "the payment service answers the key with the recorded charge",
            "send_email": "the intent record has a completion with the message id",
            "update_record": "the record holds the requested fields",
            "lookup_order": "read-only: nothing to check",
            "run_subagent": "the sub-agent's run is completed with the recorded answer",
        }
        return {"tool_use_id": call.id, "tool": call.name, "inputs": call.input,
                "key": self.idempotency_key(call), "receiver": tool.policy,
                "check": checks[tool.name], "planned_at": self.now()}

    # -- one call: run it, or settle what an earlier incarnation left (P5, P8, P11) --------
    def _settle(self, checkpoint: Checkpoint, call: PendingCall) -> dict:
        tool = get_tool(call.name)
        step = self.plan.step_for(call.id)
        n = step["n"] if step else None
        key = self.idempotency_key(call)
        recorded = self.progress.entry_for(call.id)
        if recorded is not None and self._verify(tool, recorded):
            result = recorded["result"]  # done before the crash, and the evidence holds
        else:
            self.mark("tool.start", tool=call.name, tool_use_id=call.id)
            try:
                result = self._execute(tool, call, key, step)
            except (ToolInputError, ServiceError) as exc:  # refusals go back to the model
                return {"type": "tool_result", "tool_use_id": call.id,
                        "content": f"error: {exc}", "is_error": True}
            self.mark("tool.end", tool=call.name, tool_use_id=call.id)
        self.owns("progress")  # P13: a stale incarnation records no progress
        self.progress.record({"n": n, "tool_use_id": call.id, "tool": call.name,
                              "input": call.input, "key": key, "result": result,
                              "completed_at": self.now()})
        self.mark("progress.recorded", tool=call.name, tool_use_id=call.id)
        return {"type": "tool_result", "tool_use_id": call.id,
                "content": json.dumps(result, sort_keys=True)}

    def _execute(self, tool: Tool, call: PendingCall, key: str, step: dict | None) -> Any:
        n = step["n"] if step else None
        if tool.policy == BLIND:
            intent = self.intents.get(call.id)
            if intent is not None and intent["completed_at"]:
                return intent["result"]
            if intent is not None:
                self.decisions.unknown(self.now(), f"{call.name} {call.id}: an intent with key "
                                       f"{intent['key']} has no completion; the receiver "
                                       "cannot be asked whether it happened", step=n)
                raise Escalation(n, f"step {n} ({call.name} {call.id}) may or may not have "
                                 "happened: intent recorded, completion missing, receiver "
                                 "blind. A person must check before it is repeated.")
            self._write_intent(call, key, tool)
            self.owns("effect")  # P13: right before the effect
            result = tool.run(self, call.input, key)
            self._complete_intent(call, result)
            return result
        if tool.policy == KEYED and step is not None:
            planned = _dt.datetime.fromisoformat(step["planned_at"])
            if self.clock.now() - planned >= self.key_window and \
                    self.service(tool.service).lookup_key(key) is None:
                self.decisions.unknown(self.now(), f"{call.name} {call.id}: key {key} is past "
                                       "the receiver's retention window", step=n)
                raise Escalation(n, f"step {n} ({call.name}) was planned at "
                                 f"{step['planned_at']}, longer ago than the receiver keeps "
                                 "idempotency keys: repeating it could apply it twice.")
        self.owns("effect")  # P13: right before the effect
        return tool.run(self, call.input, key)  # keyed: same key; queryable: query first

    def _write_intent(self, call: PendingCall, key: str, tool: Tool) -> None:
        self.intents.write_intent(call.id, {"key": key, "service": tool.service,
                                            "params": call.input, "intent_at": self.now()})

    def _complete_intent(self, call: PendingCall, result: Any) -> None:
        self.intents.complete(call.id, result, self.now())

    # -- P10: verify before trusting progress ---------------------------------------------
    def _verify(self, tool: Tool, entry: dict) -> bool:
        return tool.verify(self, entry)

    def _verify_progress(self) -> None:
        """Check recorded steps against the real state; redo any whose evidence is gone."""
        latest: dict[tuple, int] = {}
        for entry in self.progress.steps:
            latest[target_of(entry)] = entry["n"]
        for entry in list(self.progress.steps):
            if latest[target_of(entry)] != entry["n"]:
                continue  # superseded: a later step overwrote the same file or record
            tool = get_tool(entry["tool"])
            if self._verify(tool, entry):
                continue
            if tool.policy == BLIND:
                raise Escalation(entry["n"], f"step {entry['n']} ({entry['tool']}) is recorded "
                                 "done but its evidence does not verify and it cannot be "
                                 "safely repeated.")
            self.decisions.decide(self.now(), f"redo step {entry['n']} ({entry['tool']})",
                                  "its recorded evidence does not match the real state",
                                  step=entry["n"])
            result = tool.run(self, entry["input"], entry["key"])
            self.progress.record({**entry, "result": result, "completed_at": self.now()})

    # -- P5: resume -----------------------------------------------------------------------
    def _resume(self, checkpoint: Checkpoint) -> Checkpoint:
        self.status.write(self.run_id, RUNNING, self.now(), namespace=self.namespace)
        self._verify_progress()
        if checkpoint.pendingToolUse:
            checkpoint = self._reconcile_pending(checkpoint)
        return checkpoint

    def _reconcile_pending(self, checkpoint: Checkpoint) -> Checkpoint:
        """Settle each pending call (never blindly repeat it), then complete the turn (B)."""
        pending = checkpoint.pendingToolUse or []
        self.plan.add([self._plan_entry(c) for c in pending if self.plan.step_for(c.id) is None])
        self.decisions.decide(self.now(), f"reconcile {len(pending)} pending call(s) "
                              f"{', '.join(c.id for c in pending)}",
                              "a crash left tool calls without recorded results")
        results = [self._settle(checkpoint, call) for call in pending]
        self._save_point_b(checkpoint, results)
        return checkpoint

    # -- the end (P12) ---------------------------------------------------------------------
    def _finished(self, checkpoint: Checkpoint) -> bool:
        last = checkpoint.messages[-1]
        return (last["role"] == "assistant" and not checkpoint.pendingToolUse
                and not any(b.get("type") == "tool_use" for b in last["content"]
                            if isinstance(b, dict)))

    def _make_outputs_durable(self) -> None:
        """Workspace files are plain overwrites (P9), redone on resume if their evidence
        fails (P10). A completed run is not resumed, so before it is declared completed
        every output it wrote is fsynced, with its directory."""
        for entry in self.progress.steps:
            if entry["tool"] == "write_file":
                path = workspace_path(self, entry["input"]["path"])
                if path.exists():
                    fsync_path(path)
                    directory = path.parent
                    while directory != self.workspace.parent:  # names of new subfolders too
                        fsync_path(directory)
                        directory = directory.parent

    def owns(self, where: str) -> None:
        """P13: raise OwnershipLost unless this incarnation's checkpoint is still the one
        in the store (a read: nothing is written). `where`: "request", "effect",
        "progress", "finish" or "write" (any atomic write of a record; the mutants of P13
        check at some of them only); the checkpoint's save is checked by the store.

        A store without `owns` (a user's own, written before P13: a class set as
        `sqlite_store` or `redis_store`) keeps no version to compare, so it counts as
        owning: that agent runs as it did before P13, unguarded under the pause model."""
        owns = getattr(self.store, "owns", None)
        if owns is not None:
            owns()

    def _finish(self, checkpoint: Checkpoint) -> RunResult:
        self.owns("finish")  # P13: only the owner writes the summary and the archive
        final = _text(checkpoint.messages[-1]["content"]) \
            if isinstance(checkpoint.messages[-1]["content"], list) \
            else checkpoint.messages[-1]["content"]
        summary = {"run_id": self.run_id, "namespace": self.namespace, "task": self.task,
                   "final_answer": final, "turns": checkpoint.turns,
                   "tokensUsed": checkpoint.tokensUsed,
                   "steps": [{"n": s["n"], "tool": s["tool"], "result": s["result"]}
                             for s in self.progress.steps],
                   "decisions": len(self.decisions.data["decisions"]),
                   "unknowns": self.decisions.data["unknowns"], "finished_at": self.now()}
        self._make_outputs_durable()
        atomic_write_json(self.dir / "summary.json", summary)
        ensure_dir(self.archive_dir)
        for name in ("plan.json", "progress.json", "summary.json", "decisions.json"):
            if (self.dir / name).exists():
                atomic_write_json(self.archive_dir / name, read_json(self.dir / name))
        self.status.write(self.run_id, COMPLETED, self.now(), namespace=self.namespace)
        if hasattr(self.store, "retire"):
            self.store.retire()  # P12: a completed run's database keys expire after a day
        self.mark("run.completed")
        return self._archived_result()

    def _archived_result(self) -> RunResult:
        summary = read_json(self.archive_dir / "summary.json")
        return RunResult(COMPLETED, summary["final_answer"], summary["turns"],
                         summary["tokensUsed"], len(summary["steps"]))

    def _escalate(self, esc: Escalation) -> RunResult:
        self.status.write(self.run_id, ESCALATED, self.now(), namespace=self.namespace,
                          reason=esc.reason, step=esc.step)
        self.mark("run.escalated", step=esc.step)
        return self._escalated_result(esc.reason)

    def _escalated_result(self, reason: str) -> RunResult:
        checkpoint = self.store.load()
        progress = self.progress_class(self.dir / "progress.json", self.run_id)
        return RunResult(ESCALATED, None, checkpoint.turns if checkpoint else 0,
                         checkpoint.tokensUsed if checkpoint else 0, len(progress.steps),
                         escalation=reason)

    # -- sub-agents (P12): namespace parent:child; a resumed parent reuses finished ones ---
    def run_child(self, name: str, task: str) -> dict:
        child = type(self)(self.env, namespace=f"{self.namespace}:{name}", task=task,
                           run_id=self.run_id)
        result = child.run()
        if result.status != COMPLETED:
            raise Escalation(None, f"sub-agent {child.namespace} escalated: {result.escalation}")
        return {"subagent": name, "final_answer": result.final_answer, "turns": result.turns}

    def child_result(self, name: str) -> dict | None:
        child = type(self)(self.env, namespace=f"{self.namespace}:{name}", task="",
                           run_id=self.run_id)
        status = child.status.read()
        if not status or status["status"] != COMPLETED:
            return None
        result = child._archived_result()
        return {"subagent": name, "final_answer": result.final_answer, "turns": result.turns}


def make_agent(env: Any) -> Agent:
    """The factory faultsim calls once per incarnation."""
    return Agent(env)
