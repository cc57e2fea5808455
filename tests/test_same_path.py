"""An agent that keeps its absolute workdir (in its checkpoint, in every idempotency key)
gets the same verdict, in the same words, with one worker or two, in both modes: every
incarnation of a run sees one workdir (faultsim.real.samepath in subprocess mode). Its
careless twin (no save point A) is caught, and the counterexample shows the crashed and
the resumed incarnation using one key."""
from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

from faultsim.cli import main
from faultsim.inprocess.explore import explore
from faultsim.errors import NonDeterminismError
from faultsim.scenario import load_scenario

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
from same_json import strip  # noqa: E402  (the bench's own rule for what is a timing)

# Written the way a user writes an agent: plain files, its own checkpoint format, the
# absolute workdir in the state and in the keys (seed-style `f"{path}:{task}:{call}"`).
AGENT = r'''
import json, os, random, uuid


def write_atomic(path, data, suffix=".tmp"):
    tmp = path + suffix
    with open(tmp, "w") as f:
        f.write(json.dumps(data)); f.flush(); os.fsync(f.fileno())
    os.replace(tmp, path)


class PathAgent:
    def __init__(self, env, careless=False):
        self.env, self.careless = env, careless
        self.root = os.path.abspath(str(env.workdir))
        self.path = os.path.join(self.root, "checkpoint.json")
        self.extra = {}
        self.suffix = ".tmp"
        self.save_a = 1.0  # the share of turns that get save point A

    def run(self):
        os.makedirs(self.root, exist_ok=True)
        if os.path.exists(self.path):
            with open(self.path) as f:
                s = json.load(f)
            if s.get("version") != 2:
                raise RuntimeError(f"{self.path}: unknown version {s.get('version')!r}")
            if s["root"] != self.root:
                raise RuntimeError(f"moved from {s['root']} to {self.root}")
        else:
            s = {"version": 2, "task": self.env.task, "turns": 0, "tokensUsed": 0,
                 "root": self.root, "messages": [{"role": "user", "content": self.env.task}],
                 "pendingToolUse": [], **self.extra}
            write_atomic(self.path, s, self.suffix)
        while True:
            last = s["messages"][-1]
            if last["role"] == "assistant" and not s["pendingToolUse"]:
                return "".join(b.get("text", "") for b in last["content"]
                               if b.get("type") == "text")
            if not s["pendingToolUse"]:
                r = self.env.client.messages.create(
                    model=self.env.model, max_tokens=512, messages=s["messages"],
                    tools=[{"name": "charge_payment", "description": "Charge.",
                            "input_schema": {"type": "object"}}])
                s["tokensUsed"] += r.usage.input_tokens + r.usage.output_tokens
                s["messages"].append({"role": "assistant", "content": [
                    b.model_dump(exclude_none=True) for b in r.content]})
                s["pendingToolUse"] = [{"id": b.id, "input": b.input} for b in r.content
                                       if b.type == "tool_use"]
                if not self.careless and random.random() < self.save_a:
                    write_atomic(self.path, s, self.suffix)
                continue
            out = []
            for c in s["pendingToolUse"]:
                key = f"{self.root}:{self.env.task_id}:{c['id']}"
                res = self.env.services["payments"].submit(c["input"], key=key)
                out.append({"type": "tool_result", "tool_use_id": c["id"],
                            "content": json.dumps(res)})
            s["messages"].append({"role": "user", "content": out})
            s["pendingToolUse"], s["turns"] = [], s["turns"] + 1
            write_atomic(self.path, s, self.suffix)


def make_agent(env):
    return PathAgent(env)


def make_careless(env):
    return PathAgent(env, careless=True)


def make_sometimes(env):
    """Saves point A on a random half of the turns (random is seeded by faultsim), and
    names its temp files with uuid4: its course, so its kill points and verdicts, depend
    on the seed; a printed command without it would not reproduce."""
    agent = PathAgent(env)
    agent.save_a, agent.suffix = 0.5, f".{uuid.uuid4().hex[:8]}.tmp"
    return agent


RUNS = [0]


def make_counting(env):
    """Notes a log path named after how many agents this process made: a counter kept
    outside the workdir, so two clean runs in one process differ in a path under it."""
    RUNS[0] += 1
    agent = PathAgent(env)
    agent.extra = {"log": os.path.join(agent.root, f"log-{RUNS[0]}.txt")}
    return agent
'''

SCENARIO = '''
task = "Charge CUST-1 twice: 500 then 700 cents."
expected_final_answer = "Charged 500 and 700."
[services.payments]
kind = "keyed"
[[turns]]
tool_calls = [{ name = "charge_payment", input = { customer = "CUST-1", amount_cents = 500 } }]
[[turns]]
tool_calls = [{ name = "charge_payment", input = { customer = "CUST-1", amount_cents = 700 } }]
[[turns]]
final = "Charged 500 and 700."
'''


@pytest.fixture(scope="module")
def pay(tmp_path_factory):
    folder = tmp_path_factory.mktemp("same-path")
    (folder / "path_agent.py").write_text(AGENT)
    (folder / "pay.toml").write_text(SCENARIO)
    return folder


def _run(pay: Path, capsys, *args: str) -> tuple[int, dict, str]:
    out = pay / "report.json"
    code = main(["run", str(pay / "pay.toml"), "--crash-model", "process", "--crashes", "1",
                 *args, "--json", str(out)])
    report = strip(json.loads(out.read_text()))
    for run in report["runs"]:
        # the HTML page's map and counterexamples carry the digests of the bytes written:
        # this agent writes its absolute workdir into its checkpoint, and a subprocess
        # sandbox's path differs with the worker count (the verdicts, compared, do not)
        run.pop("map", None), run.pop("counterexamples", None)
    return code, report, capsys.readouterr().out


@pytest.mark.parametrize("mode", ["in-process", "subprocess"])
def test_an_agent_keeping_its_absolute_workdir_passes_with_any_worker_count(pay, mode,
                                                                            capsys):
    agent = f"{pay / 'path_agent.py'}:make_agent"
    reports = {}
    for workers in ("1", "2"):
        code, report, out = _run(pay, capsys, "--agent", agent, "--mode", mode,
                                 "--workers", workers)
        assert code == 0, out
        (run,) = report["runs"]
        # every kill point crashed (a kill that did not land is an error, never a pass)
        assert run["crash_states"] == run["kill_points_explored"] == \
            run["kill_points_total"] > 40
        reports[workers] = report
    assert reports["1"] == reports["2"]


def test_its_careless_twin_is_caught_with_one_key_in_both_incarnations(pay, capsys):
    """No save point A: after a crash that follows the charge, the resumed run knows
    nothing of the call and charges again (under the model's new call id). Its key still
    starts with the crashed run's workdir: one path in both incarnations. The same report
    for one worker or two; the same violations in both modes."""
    agent = f"{pay / 'path_agent.py'}:make_careless"
    found = {}
    for mode in ("in-process", "subprocess"):
        reports = {}
        for workers in ("1", "2"):
            code, report, out = _run(pay, capsys, "--agent", agent, "--mode", mode,
                                     "--workers", workers)
            assert code == 1, out
            assert "VIOLATED effects_exactly_once" in out
            # the crashed incarnation's key and the resumed one's: the same workdir
            killed = re.search(
                r"^kill point k\d+-after-effect-payments.submit#1 .* key=(\S+?):", out, re.M)
            resumed = re.findall(r"#\d+ inc2 payments.submit key=(\S+?):", out)
            assert killed and resumed and set(resumed) == {killed.group(1)}, out
            reports[workers] = report
        assert reports["1"] == reports["2"]
        # a torn write's offsets are places in the bytes written, and the checkpoint
        # holds the workdir, a longer path in subprocess mode: compare the writes torn
        found[mode] = sorted((re.sub(r"\.\d+-|@\d+", lambda m: "-" * (m[0][-1] == "-"),
                                     v["schedule"][-1]), v["invariant"])
                             for v in reports["1"]["runs"][0]["violations"])
    assert found["in-process"] == found["subprocess"] != []


def test_subprocess_servers_taking_turns_give_the_same_report(pay, capsys, monkeypatch):
    """The fallback where the kernel refuses a private mount namespace (containers,
    unprivileged user namespaces switched off): the servers share the one path in turn."""
    agent = f"{pay / 'path_agent.py'}:make_careless"
    code, namespace, _ = _run(pay, capsys, "--agent", agent, "--mode", "subprocess",
                              "--workers", "2")
    monkeypatch.setenv("FAULTSIM_SAME_PATH", "turns")
    again, turns, out = _run(pay, capsys, "--agent", agent, "--mode", "subprocess",
                             "--workers", "2")
    assert code == again == 1
    # the run folder differs between two runs, and with it the workdir in the text
    assert _without_run_folder(turns) == _without_run_folder(namespace)


def _without_run_folder(report: dict) -> str:
    return re.sub(r"/[^\s\"':]*/faultsim-[^/\s\"':]+/sandbox", "WORKDIR", json.dumps(report))


@pytest.mark.parametrize("forced", ["", "turns"])
def test_servers_say_how_they_give_the_one_workdir(forced, monkeypatch):
    """A private namespace where the kernel allows it, else turns; never a path of their
    own (FAULTSIM_SAME_PATH=turns forces the fallback, as the test above does)."""
    from faultsim.real.pool import ForkServers

    monkeypatch.setenv("FAULTSIM_SAME_PATH", forced)
    scenario = Path(__file__).resolve().parent / "data" / "pair.toml"
    with ForkServers("reference_agent", str(scenario), workers=2) as pool:
        hows = pool.same_path
        assert pool.workdir == str(Path(pool.tmp) / "sandbox")
    assert len(hows) == 2
    if forced:
        assert hows == ["turns (FAULTSIM_SAME_PATH=turns)"] * 2
    else:
        assert all(h == "namespace" or h.startswith("turns (") for h in hows), hows


def test_the_flake_guard_names_a_path_under_the_workdir_that_differs(pay):
    from faultsim.settings.loading import load_factory

    factory = load_factory(f"{pay / 'path_agent.py'}:make_counting")
    with pytest.raises(NonDeterminismError) as caught:
        explore(factory, load_scenario(pay / "pay.toml"), crashes=1, workers=0)
    message = str(caught.value)
    assert "'/faultsim/sandbox/log-1.txt' vs '/faultsim/sandbox/log-2.txt' (in " \
        "checkpoint.json as each run left it): both are paths under the agent's workdir " \
        "/faultsim/sandbox" in message, message
    assert "sets, os.urandom" not in message  # advice that would point elsewhere
