"""An agent that keeps its conversation in SQLite, one row per message, as many do.

Each step is one transaction: the model's answer and the tool calls it asks for are
committed together; so are the tool results and the end of those calls. Its only effect,
adding a note to a CRM record's notes, goes through `faultsim.effect` to the scenario's
queryable `crm` service: the agent reads the record, and writes its notes with the new one
added unless the note is there already (a crash may have come after the write).

The scenario puts the database under `[store] kind = "sqlite"`: faultsim runs it in
subprocess mode (real processes, SIGKILL, a real file), where SQLite's own writes show.

`make_agent_without_lookup` is the planted mistake: it does not look for its note among
the record's notes, so after a crash between adding a note and committing its result the
resumed run adds the note a second time. (Writing the record again with the notes it
already holds would be no second effect: docs/reference/invariants.md, "What counts as
repeated".)
"""
from __future__ import annotations

import json
import sqlite3

import faultsim

TOOLS = [{"name": "add_note", "description": "Add a note to a customer's CRM record.",
          "input_schema": {"type": "object", "properties": {
              "customer": {"type": "string"}, "note": {"type": "string"}},
              "required": ["customer", "note"]}}]


@faultsim.effect("crm", key=lambda customer, notes: customer,
                 query=lambda record_id: None)
def add_note(customer: str, notes: list) -> dict:
    raise NotImplementedError("production: crm.records.update(...)")


class NotesAgent:
    def __init__(self, env, *, lookup: bool = True):
        self.env, self.lookup = env, lookup
        path = env.store.path if env.store is not None and env.store.path else \
            env.workdir / "notes.db"
        self.db = sqlite3.connect(str(path), isolation_level=None)

    def run(self):
        db = self.db
        db.execute("CREATE TABLE IF NOT EXISTS messages (n INTEGER PRIMARY KEY, role TEXT, "
                   "content TEXT)")
        db.execute("CREATE TABLE IF NOT EXISTS pending (id TEXT PRIMARY KEY, input TEXT)")
        if not db.execute("SELECT 1 FROM messages").fetchone():
            db.execute("INSERT INTO messages (role, content) VALUES ('user', ?)",
                       (json.dumps(self.env.task),))
        while True:
            messages = [{"role": r, "content": json.loads(c)} for r, c in
                        db.execute("SELECT role, content FROM messages ORDER BY n")]
            pending = db.execute("SELECT id, input FROM pending ORDER BY id").fetchall()
            if messages[-1]["role"] == "assistant" and not pending:
                return "".join(b.get("text", "") for b in messages[-1]["content"]
                               if b["type"] == "text")
            if not pending:
                reply = self.env.client.messages.create(model=self.env.model, max_tokens=256,
                                                        tools=TOOLS, messages=messages)
                content = [b.model_dump(exclude_none=True) for b in reply.content]
                db.execute("BEGIN")
                db.execute("INSERT INTO messages (role, content) VALUES ('assistant', ?)",
                           (json.dumps(content),))
                for b in reply.content:
                    if b.type == "tool_use":
                        db.execute("INSERT INTO pending VALUES (?, ?)",
                                   (b.id, json.dumps(b.input)))
                db.execute("COMMIT")
                continue
            results = []
            for call_id, raw in pending:
                args = json.loads(raw)
                record = add_note.query(args["customer"]) or {}
                notes = list(record.get("notes") or [])
                done = record if self.lookup and args["note"] in notes else \
                    add_note(args["customer"], notes + [args["note"]])
                results.append({"type": "tool_result", "tool_use_id": call_id,
                                "content": json.dumps(done)})
            db.execute("BEGIN")
            db.execute("INSERT INTO messages (role, content) VALUES ('user', ?)",
                       (json.dumps(results),))
            db.execute("DELETE FROM pending")
            db.execute("COMMIT")


def make_agent(env):
    return NotesAgent(env)


def make_agent_without_lookup(env):
    return NotesAgent(env, lookup=False)
