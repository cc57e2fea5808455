"""The command backend's cheap test agent (standard library only: it starts in
milliseconds): examples/any_language/pay_agent.py with the Messages API called over
plain HTTP instead of the `anthropic` SDK. Against ANTHROPIC_BASE_URL, a checkpoint file saved with temp file + fsync + rename (+ a directory
fsync), and a keyed HTTP payment whose Idempotency-Key is derived from the tool_use id, so
a resumed run that repeats the call is answered with the first payment.

    python3 pay_agent.py            (in the directory that holds checkpoint.json)

Exit status 0 and the final answer on stdout's last line; 3 and a reason on stderr to
hand the task to a person. `--mistake` plants a mistake: the key is drawn afresh by each
process (as `uuid4()` would be), so a crash between the payment and the save pays twice.
"""
import json
import os
import sys
import urllib.request



CHECKPOINT = "checkpoint.json"
MISTAKE = "--mistake" in sys.argv
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


def pay(tool_use):
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
