"""A user's agent whose tool runs a helper program (`subprocess.run([sys.executable, "-c",
...])`), as agents run `curl`, `git` or a Node script. What the helper does is the probe,
chosen by CONTAIN_PROBE: `net` connects to 127.0.0.1:CONTAIN_PORT (a counting server the
test started), `write` writes into CONTAIN_WATCH (a directory outside the sandbox),
`inside` writes its answer into the agent's workdir (a correct helper), `shell` shells out
to keep a cache file in CONTAIN_WATCH (as a user's tool keeps one under /tmp or $HOME),
`shell-inside` shells out to write it into the workdir (correct), `daemon` leaves a
helper running in a session of its own, `python` computes the answer without any helper
(a correct agent in either mode). CONTAIN_ONLY_ON_RESUME=1: the helper runs only when the
agent resumes (the clean runs compute in Python)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time

PROBES = {
    "net": "import socket, sys\n"
           "socket.create_connection(('127.0.0.1', int(sys.argv[1])), timeout=5).close()\n",
    "write": "import os, sys\n"
             "open(os.path.join(sys.argv[2], 'escaped.txt'), 'w').write('escaped')\n",
    "inside": "import sys\nopen(sys.argv[3], 'w').write('checked')\n",
    "daemon": "import sys, time\nopen(sys.argv[3], 'w').write('checked')\ntime.sleep(120)\n",
}
MARKER = "contain-agent-helper"  # in every helper's argv: a test finds strays by it
TOOLS = [{"name": "run_check", "description": "Run the check.",
          "input_schema": {"type": "object", "properties": {}}}]


def run_check(workdir: str, resumed: bool) -> str:
    probe = os.environ.get("CONTAIN_PROBE", "python")
    if os.environ.get("CONTAIN_ONLY_ON_RESUME") == "1" and not resumed:
        probe = "python"
    answer = os.path.join(workdir, "check.txt")
    if probe in ("shell", "shell-inside"):  # as users write it: a shell line, unchecked
        cache = os.environ["CONTAIN_WATCH"] if probe == "shell" else workdir
        subprocess.run(f"echo checked > {cache}/cache.txt; echo {MARKER}", shell=True)
        with open(answer, "w") as f:
            f.write("checked")
        return "checked"
    if probe == "python":
        with open(answer, "w") as f:
            f.write("checked")
        return "checked"
    argv = [sys.executable, "-c", PROBES[probe], os.environ.get("CONTAIN_PORT", "0"),
            os.environ.get("CONTAIN_WATCH", "/nonexistent"), answer, MARKER]
    if probe == "daemon":  # started, never waited for, out of the agent's session
        subprocess.Popen(argv, start_new_session=True, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)
        while not os.path.exists(answer):
            time.sleep(0.01)
        return "started"
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    if probe == "inside":  # a strict tool: the helper's answer must be there
        with open(answer) as f:
            if f.read() != "checked":
                raise RuntimeError(f"the check failed: {done.stderr}")
    return f"exit {done.returncode}"


class Agent:
    def __init__(self, env):
        self.env = env
        self.path = os.path.join(str(env.workdir), "state.json")

    def save(self, state):
        with open(self.path + ".tmp", "w") as f:
            json.dump(state, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(self.path + ".tmp", self.path)

    def run(self):
        os.makedirs(str(self.env.workdir), exist_ok=True)
        resumed = os.path.exists(self.path)
        if resumed:
            with open(self.path) as f:
                state = json.load(f)
        else:
            state = {"messages": [{"role": "user", "content": self.env.task}]}
            self.save(state)
        while True:
            last = state["messages"][-1]
            if last["role"] == "assistant":
                calls = [b for b in last["content"] if b["type"] == "tool_use"]
                if not calls:
                    return "".join(b.get("text", "") for b in last["content"])
                workdir = str(self.env.workdir)
                results = [{"type": "tool_result", "tool_use_id": c["id"],
                            "content": run_check(workdir, resumed)} for c in calls]
                state["messages"].append({"role": "user", "content": results})
                self.save(state)
                continue
            r = self.env.client.messages.create(model=self.env.model, max_tokens=256,
                                                tools=TOOLS, messages=state["messages"])
            state["messages"].append({"role": "assistant", "content": [
                b.model_dump(exclude_none=True) for b in r.content]})
            self.save(state)


def make_agent(env):
    return Agent(env)
