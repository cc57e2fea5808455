// The lessons' checkpointing agent loop in JavaScript, on @anthropic-ai/sdk.
//
// One run of this file is one incarnation: it starts the task, or resumes it from
// checkpoint.json alone (PROTOCOL.md P1-P5, P8). It charges cards through a keyed HTTP
// service (FAULTSIM_SERVICE_BILLING_URL, Stripe's Idempotency-Key convention).
//
// Outcome contract: exit 0 with the final answer as the last line of stdout; exit 3 with
// the reason on stderr to hand the task to a person; anything else is a failed run.
//
// Planted mistakes, one per flag (faultsim must catch each):
//   --mistake=save-only-at-b       no save point A: a crash while a tool runs leaves no trace
//   --mistake=overwrite-in-place   writeFileSync straight over checkpoint.json (torn file)
//   --mistake=no-reconcile         resume drops pendingToolUse and re-asks the model
import Anthropic from "@anthropic-ai/sdk";
import fs from "node:fs";
import path from "node:path";

const VERSION = 1;
const CHECKPOINT = "checkpoint.json";
const MODEL = process.env.AGENT_MODEL ?? "claude-sonnet-5-5";
const TASK = process.env.FAULTSIM_TASK ??
  "Charge CUST-1 1200 cents for the order, then CUST-2 800 cents for theirs.";
const TASK_ID = "charge-two-orders"; // stable: idempotency keys derive from it (P8)
const MISTAKE = (process.argv.find((a) => a.startsWith("--mistake=")) ?? "").slice(10);
const MISTAKES = ["", "save-only-at-b", "overwrite-in-place", "no-reconcile"];

const TOOLS = [{
  name: "charge_card",
  description: "Charge a customer's card on file.",
  input_schema: {
    type: "object",
    properties: { customer: { type: "string" }, cents: { type: "integer" } },
    required: ["customer", "cents"],
  },
}];

class Escalation extends Error {}

// -- P3: the checkpoint is replaced whole, never overwritten in place -------------------
function fsyncDir(dir) {
  const fd = fs.openSync(dir, "r");
  try { fs.fsyncSync(fd); } finally { fs.closeSync(fd); }
}

function saveCheckpoint(state) {
  const data = JSON.stringify(state, null, 2);
  if (MISTAKE === "overwrite-in-place") {
    fs.writeFileSync(CHECKPOINT, data); // planted: a crash mid-write tears the only copy
    return;
  }
  const tmp = CHECKPOINT + ".tmp";
  const fd = fs.openSync(tmp, "w");
  try {
    fs.writeSync(fd, data);
    fs.fsyncSync(fd); // the bytes are durable before the name points at them
  } finally {
    fs.closeSync(fd);
  }
  fs.renameSync(tmp, CHECKPOINT);
  fsyncDir(path.dirname(path.resolve(CHECKPOINT))); // and the rename itself
}

// -- P1, P4: six fields, the version checked first --------------------------------------
function loadCheckpoint() {
  let text;
  try {
    text = fs.readFileSync(CHECKPOINT, "utf8");
  } catch (e) {
    if (e.code === "ENOENT") return null;
    throw e;
  }
  const state = JSON.parse(text); // a torn file fails loudly here, never parsed on hope
  if (state.version !== VERSION) {
    throw new Error(`${CHECKPOINT}: version ${state.version} is not one this agent ` +
                    `understands (${VERSION}); refusing to resume`);
  }
  for (const key of ["task", "turns", "tokensUsed", "messages", "pendingToolUse"]) {
    if (!(key in state)) throw new Error(`${CHECKPOINT}: field ${key} is missing`);
  }
  return state;
}

// -- the tool: a keyed HTTP service (P8) ---------------------------------------------------
function keyFor(toolUse) {
  return `${TASK_ID}:${toolUse.id}`; // from the task and the tool call id: a retry reuses it
}

async function billing(method, suffix, body, key) {
  const base = process.env.FAULTSIM_SERVICE_BILLING_URL;
  if (!base) throw new Error("FAULTSIM_SERVICE_BILLING_URL is not set");
  const headers = { "content-type": "application/json" };
  if (key) headers["idempotency-key"] = key;
  const response = await fetch(base + suffix, {
    method, headers, body: body === undefined ? undefined : JSON.stringify(body),
  });
  const answer = await response.json();
  return { status: response.status, answer };
}

async function chargeCard(toolUse) {
  const { status, answer } = await billing("POST", "", toolUse.input, keyFor(toolUse));
  if (answer.error?.type === "idempotency_error") {
    throw new Escalation(`charge ${toolUse.id}: the billing service refused a retry ` +
                         `(${answer.error?.message})`);
  }
  if (status !== 200) return { error: answer.error?.message ?? `HTTP ${status}` };
  return answer;
}

async function runTool(toolUse) {
  if (toolUse.name !== "charge_card") return { error: `no tool ${toolUse.name}` };
  return chargeCard(toolUse);
}

function toolResults(toolUses, results) {
  return {
    role: "user",
    content: toolUses.map((toolUse, i) => ({
      type: "tool_result", tool_use_id: toolUse.id, content: JSON.stringify(results[i]),
      is_error: "error" in results[i],
    })),
  };
}

// -- P5: a pending call is reconciled with the receiver before anything else ---------------
async function reconcile(state) {
  const pending = [].concat(state.pendingToolUse);
  if (MISTAKE === "no-reconcile") {
    state.messages.pop(); // planted: forget the call and ask the model again
    state.pendingToolUse = null;
    return;
  }
  const results = [];
  for (const toolUse of pending) {
    // the receiver knows whether the call happened: its stored result, or run it now
    // with the same key (a keyed retry cannot apply it twice)
    const { status, answer } = await billing(
      "GET", `/idempotency-keys/${encodeURIComponent(keyFor(toolUse))}`);
    results.push(status === 200 ? answer : await runTool(toolUse));
  }
  state.messages.push(toolResults(pending, results));
  state.turns += 1;
  state.pendingToolUse = null;
  saveCheckpoint(state); // B
}

function finalText(message) {
  return message.content.filter((b) => b.type === "text").map((b) => b.text).join("")
    .trim();
}

async function main() {
  if (!MISTAKES.includes(MISTAKE)) throw new Error(`unknown --mistake=${MISTAKE}`);
  let state = loadCheckpoint();
  if (state === null) {
    state = { version: VERSION, task: TASK, turns: 0, tokensUsed: 0,
              messages: [{ role: "user", content: TASK }], pendingToolUse: null };
    saveCheckpoint(state);
  } else if (state.pendingToolUse !== null) {
    await reconcile(state);
  }
  const client = new Anthropic(); // ANTHROPIC_BASE_URL and ANTHROPIC_API_KEY
  for (;;) {
    const last = state.messages[state.messages.length - 1];
    if (last.role === "assistant") return finalText(last); // done before the crash
    const reply = await client.messages.create({
      model: MODEL, max_tokens: 1024, tools: TOOLS, messages: state.messages,
    });
    state.tokensUsed += reply.usage.input_tokens + reply.usage.output_tokens;
    state.messages.push({ role: "assistant", content: reply.content });
    if (reply.stop_reason !== "tool_use") {
      saveCheckpoint(state);
      return finalText(reply);
    }
    const toolUses = reply.content.filter((b) => b.type === "tool_use")
      .map(({ id, name, input }) => ({ id, name, input }));
    state.pendingToolUse = toolUses.length === 1 ? toolUses[0] : toolUses;
    if (MISTAKE !== "save-only-at-b") saveCheckpoint(state); // A
    const results = [];
    for (const toolUse of toolUses) results.push(await runTool(toolUse));
    state.messages.push(toolResults(toolUses, results));
    state.turns += 1;
    state.pendingToolUse = null;
    saveCheckpoint(state); // B
  }
}

main().then((answer) => {
  process.stdout.write(answer + "\n");
  process.exit(0);
}, (error) => {
  if (error instanceof Escalation) {
    process.stderr.write(error.message + "\n");
    process.exit(3);
  }
  process.stderr.write((error.stack ?? String(error)) + "\n");
  process.exit(1);
});
