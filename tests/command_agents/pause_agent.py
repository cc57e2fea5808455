"""tests/pause_agents.py's two agents as a command (standard library only), on
tests/data/pause_charge.toml, for the pause model of an agent run as a command
(tests/test_command_pause.py):

    python3 pause_agent.py            naive: one state.json (temp file + rename), trusting
                                      it is the only writer
    python3 pause_agent.py --fenced   a fencing token: each incarnation takes the next
                                      token (an exclusive create of lease/NNNNNN: the
                                      newest worker owns the task, as a queue's redelivery
                                      makes it), saves each checkpoint version as a file of
                                      its own named by (token, sequence) (temp file and
                                      rename), loads the highest, and checks before an
                                      effect and before a save that no newer token holds
                                      the task (else it exits 4, "LeaseLost ...")

The in-process `fenced` also lets a lease expire after 30 s of its world's clock; a
command's clock is the host's, so here every new incarnation takes the task at once: on
pause_charge.toml (a 60 s downtime) both do the same. The charge is keyed by the tool_use
id, as in-process."""
import json
import os
import sys
import urllib.request

FENCED = "--fenced" in sys.argv
TOOLS = [{"name": "charge_card", "description": "Charge a customer's card.",
          "input_schema": {"type": "object", "properties": {
              "customer": {"type": "string"}, "cents": {"type": "integer"}},
              "required": ["customer", "cents"]}}]


class LeaseLost(Exception):
    pass


def post(url, body, headers):
    request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                     headers={"content-type": "application/json", **headers})
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.load(response)


def ask(messages):
    return post(os.environ["ANTHROPIC_BASE_URL"].rstrip("/") + "/v1/messages",
                {"model": "claude-sonnet-4-5", "max_tokens": 1024, "tools": TOOLS,
                 "messages": messages},
                {"anthropic-version": "2023-06-01", "x-api-key": os.environ["ANTHROPIC_API_KEY"]})


def charge(tool_use):
    return post(os.environ["FAULTSIM_SERVICE_BILLING_URL"] + "/v1/charges", tool_use["input"],
                {"Idempotency-Key": tool_use["id"]})


def write(path, data, exclusive=False):
    if exclusive:  # compare-and-set: an exclusive create of that version's own name
        try:       # (os.link, the in-process agent's, is a call the command trace lacks)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            raise LeaseLost(f"{path} was written by another worker") from None
        with os.fdopen(fd, "w") as f:
            json.dump(data, f)
            f.flush()
            os.fsync(f.fileno())
        return
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(data, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


class Naive:
    def load(self):
        try:
            with open("state.json") as f:
                return json.load(f)
        except FileNotFoundError:
            return None

    def save(self, state):
        write("state.json", state)

    def check(self):
        pass


class Fenced:
    def __init__(self):
        os.makedirs("lease", exist_ok=True)
        os.makedirs("state", exist_ok=True)
        held = self.leases()
        self.token = int(held[-1]) + 1 if held else 1
        write(os.path.join("lease", f"{self.token:06d}"), {}, exclusive=True)
        self.version = 0

    def leases(self):
        return sorted(n for n in os.listdir("lease") if len(n) == 6)

    def versions(self):
        return sorted(n for n in os.listdir("state") if n.endswith(".json") and len(n) == 18)

    def check(self):
        if int(self.leases()[-1]) != self.token:
            raise LeaseLost("a newer token holds the lease")
        newest = self.versions()
        if newest and int(newest[-1][:6]) > self.token:
            raise LeaseLost(f"{newest[-1]} was saved under a newer token")

    def load(self):
        names = self.versions()
        if not names:
            return None
        self.version = int(names[-1][7:13])
        with open(os.path.join("state", names[-1])) as f:
            return json.load(f)

    def save(self, state):
        self.check()  # fencing on save
        self.version += 1
        # temp file + rename: a version's name is its token's own, so no other writer
        # makes it; the exclusive create (the lease's) would show a reader a version not
        # yet written (an empty file: a finding of the pause model, kept out of here)
        write(os.path.join("state", f"{self.token:06d}-{self.version:06d}.json"), state)


def main():
    store = Fenced() if FENCED else Naive()
    state = store.load()
    if state is None:
        state = {"messages": [{"role": "user", "content": os.environ["FAULTSIM_TASK"]}]}
        store.save(state)
    while True:
        last = state["messages"][-1]
        if last["role"] == "assistant":
            uses = [b for b in last["content"] if b["type"] == "tool_use"]
            if not uses:
                print("".join(b["text"] for b in last["content"] if b["type"] == "text"))
                return 0
            results = []
            for u in uses:
                store.check()  # fencing before the effect
                results.append({"type": "tool_result", "tool_use_id": u["id"],
                                "content": json.dumps(charge(u))})
            state["messages"].append({"role": "user", "content": results})
        else:
            reply = ask(state["messages"])
            state["messages"].append({"role": "assistant", "content": reply["content"]})
        store.save(state)


if __name__ == "__main__":
    try:
        sys.exit(main())
    except LeaseLost as exc:
        print(f"LeaseLost: {exc}", file=sys.stderr)
        sys.exit(4)
