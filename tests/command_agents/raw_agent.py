"""The command backend's cheap test agent (standard library only: it starts in
milliseconds): examples/any_language/pay_agent.py with the Messages API called over
plain HTTP instead of the `anthropic` SDK. Against ANTHROPIC_BASE_URL, a checkpoint file saved with temp file + fsync + rename (+ a directory
fsync), and a keyed HTTP payment whose Idempotency-Key is derived from the tool_use id, so
a resumed run that repeats the call is answered with the first payment.

    python3 pay_agent.py            (in the directory that holds checkpoint.json)

Exit status 0 and the final answer on stdout's last line; 3 and a reason on stderr to
hand the task to a person. `--mcp` pays through the scenario's MCP server
(FAULTSIM_MCP_URL, the tool `payments` with the same key) instead. `--mistake` plants a mistake: the key is drawn afresh by each
process (as `uuid4()` would be), so a crash between the payment and the save pays twice.
`--mistake=record-in-place` plants one that only a second crash exposes: a resumed run
first writes its reconciliation record (how many times it resumed) into checkpoint.json
in place; a crash during that write (a crash during recovery) leaves the file empty, and
the next resume cannot read it.
"""
import json
import os
import sys
import urllib.request



CHECKPOINT = "checkpoint.json"
MISTAKE = "--mistake" in sys.argv
IN_PLACE = "--mistake=record-in-place" in sys.argv
MCP = "--mcp" in sys.argv  # pay through the MCP tool instead of the REST endpoint
TOOLS = [{"name": "pay_invoice", "description": "Pay a supplier invoice.",
          "input_schema": {"type": "object", "properties": {
              "invoice": {"type": "string"}, "amount_cents": {"type": "integer"}},
              "required": ["invoice", "amount_cents"]}}]


def load(task):
    try:
        with open(CHECKPOINT) as f:
            return json.load(f)
    except FileNotFoundError:
        return {"version": 1, "task": task, "turns": 0,
                "messages": [{"role": "user", "content": task}]}


def save(state):
    tmp = CHECKPOINT + ".tmp"
    with open(tmp, "w") as f:
        json.dump(state, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, CHECKPOINT)
    fd = os.open(".", os.O_RDONLY)
    try:
        os.fsync(fd)  # the rename itself survives a power loss
    finally:
        os.close(fd)


def rpc(method, params, n):
    """One JSON-RPC message to the MCP server (streamable HTTP, one JSON answer)."""
    body = {"jsonrpc": "2.0", "id": n, "method": method, "params": params}
    request = urllib.request.Request(os.environ["FAULTSIM_MCP_URL"], method="POST",
                                     data=json.dumps(body).encode(), headers={
                                         "Content-Type": "application/json",
                                         "Accept": "application/json, text/event-stream"})
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.load(response)["result"]


def pay_mcp(tool_use):
    rpc("initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                       "clientInfo": {"name": "pay_agent", "version": "1"}}, 1)
    result = rpc("tools/call", {"name": "payments", "arguments": {
        "idempotency_key": tool_use["id"], **tool_use["input"]}}, 2)
    return json.loads(result["content"][0]["text"])


def pay(tool_use):
    if MCP and not MISTAKE:
        return pay_mcp(tool_use)
    url = os.environ["FAULTSIM_SERVICE_PAYMENTS_URL"] + "/v1/payments"
    key = tool_use["id"]
    if MISTAKE:
        key = f"pay-{os.environ.get('FAULTSIM_INCARNATION', '')}"  # one per process
    request = urllib.request.Request(url, data=json.dumps(tool_use["input"]).encode(),
                                     method="POST", headers={
                                         "Content-Type": "application/json",
                                         "Idempotency-Key": key})
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.load(response)


def ask(body):
    request = urllib.request.Request(
        os.environ["ANTHROPIC_BASE_URL"].rstrip("/") + "/v1/messages",
        data=json.dumps(body).encode(), method="POST",
        headers={"content-type": "application/json", "anthropic-version": "2023-06-01",
                 "x-api-key": os.environ["ANTHROPIC_API_KEY"]})
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.load(response)


def main():
    task = os.environ.get("FAULTSIM_TASK", "Pay invoice INV-7 (12000 cents) to Acme.")
    state = load(task)
    if state.get("version") != 1 and "--any-version" not in sys.argv:  # P4 (the twin: not)
        print(f"checkpoint.json: unknown version {state.get('version')!r}", file=sys.stderr)
        return 2
    if IN_PLACE and state["turns"]:  # resumed: the reconciliation record, in place
        state["resumed"] = state.get("resumed", 0) + 1
        with open(CHECKPOINT, "w") as f:
            json.dump(state, f)
    while True:
        last = state["messages"][-1]
        if last["role"] == "assistant":
            uses = [b for b in last["content"] if b["type"] == "tool_use"]
            if not uses:  # answered before the crash
                print(next(b["text"] for b in last["content"] if b["type"] == "text"))
                return 0
            # save point A holds the tool call: run it (again, with the same key)
            results = [{"type": "tool_result", "tool_use_id": u["id"],
                        "content": json.dumps(pay(u))} for u in uses]
            state["messages"].append({"role": "user", "content": results})
            save(state)  # save point B: the effect and its result
            continue
        if state["turns"] >= 8:
            print("more than 8 turns", file=sys.stderr)
            return 3
        reply = ask({"model": "claude-sonnet-4-5", "max_tokens": 1024, "tools": TOOLS,
                     "messages": state["messages"]})
        state["messages"].append({"role": "assistant", "content": reply["content"]})
        state["turns"] += 1
        save(state)  # save point A: the answer, before acting on it


if __name__ == "__main__":
    sys.exit(main())
