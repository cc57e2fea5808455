"""The anthropic SDK the user's framework pins, not faultsim's: the fake Claude serves 0.x
(on httpx, through faultsim.model.bridge), 1.x and 2.x (on httpx2) in process, refuses
any other version in one line, and judges the same agent the same way on each.

The suite's venv has 2.x; the tests marked `old_sdk` need an SDK below 2.0 and skip
elsewhere. CI's second venv (.ci/sdk1: anthropic below 1.0 beside strands-agents, which
pins it) sets FAULTSIM_REQUIRE_SDK1=1, where they fail instead of skipping, and
FAULTSIM_SDK2_PYTHON, the suite venv's interpreter, for the comparison of verdicts."""
from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import anthropic
import httpx2
import pytest

from faultsim.model import ApiFault, FakeClaude, Script, ToolCall, Turn, sdk

ROOT = Path(__file__).resolve().parent.parent
TASK = "Refund order ORD-7."
MODEL = "claude-sonnet-5-5"
REQUIRED = os.environ.get("FAULTSIM_REQUIRE_SDK1") == "1"


def old_sdk() -> None:
    """Skip unless the SDK is below 2.0 (fail instead under FAULTSIM_REQUIRE_SDK1=1)."""
    if sdk.version() < (2, 0):
        return
    why = (f"needs anthropic below 2.0 (CI's .ci/sdk1 venv); this one has "
           f"{anthropic.__version__}")
    if REQUIRED:
        pytest.fail(f"FAULTSIM_REQUIRE_SDK1=1 but {why}")
    pytest.skip(why)


def script(faults=()) -> Script:
    return Script(task=TASK, faults=tuple(faults), turns=(
        Turn(tool_calls=(ToolCall("lookup_order", {"order_id": "ORD-7"}),)),
        Turn(final="Refunded ORD-7.")))


def first(**extra) -> dict:
    return dict(model=MODEL, max_tokens=512, messages=[{"role": "user", "content": TASK}],
                tools=[{"name": "lookup_order", "description": "Look an order up.",
                        "input_schema": {"type": "object"}}], **extra)


# -- which SDK, which HTTP package -----------------------------------------------------------

@pytest.mark.parametrize("version, package", [
    ("0.49.0", "httpx"), ("0.125.0", "httpx"), ("1.0.0", "httpx2"), ("1.17.0", "httpx2"),
    ("2.17.0", "httpx2")])
def test_each_served_sdk_gets_the_http_package_its_clients_take(monkeypatch, version, package):
    pytest.importorskip("httpx")
    monkeypatch.setattr(anthropic, "__version__", version)
    assert sdk.http().__name__ == package
    assert type(sdk.transport(lambda request: None)).__module__.split(".")[0] == package


@pytest.mark.parametrize("version, why", [
    ("0.48.0", "older than any release faultsim tests"),
    ("3.0.0", "a major version whose client transport faultsim has not been tested on")])
def test_an_unserved_sdk_is_refused_in_one_line_naming_it(monkeypatch, version, why):
    monkeypatch.setattr(anthropic, "__version__", version)
    with pytest.raises(sdk.UnservedSDK) as info:
        FakeClaude(script()).client()
    message = str(info.value)
    assert message.startswith(f"anthropic {version} is installed (") and f"({why}); " in message
    assert "serves anthropic 0.49 or later, below 3" in message and "\n" not in message


@pytest.mark.parametrize("mode", ["in-process", "subprocess"])
def test_faultsim_run_refuses_an_unserved_sdk_with_a_usage_error(tmp_path, mode):
    """The CLI in a fresh interpreter whose SDK says 0.48.0: exit 2 before any work, the
    one line docs/index.md shows, no file left."""
    code = ("import sys, anthropic; anthropic.__version__ = '0.48.0'; "
            "from faultsim.cli import main; sys.exit(main(sys.argv[1:]))")
    done = subprocess.run([sys.executable, "-c", code, "run", str(ROOT / "tests/data/tiny.toml"),
                           "--agent", "reference_agent", "--mode", mode, "--crash-model",
                           "process"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 2, done.stderr
    assert list(tmp_path.iterdir()) == []
    line = done.stderr.replace(os.path.dirname(os.path.dirname(os.path.dirname(anthropic.__file__))), "...")
    page = (ROOT / "docs" / "index.md").read_text()
    shown = page.split(f"::{test_faultsim_run_refuses_an_unserved_sdk_with_a_usage_error.__name__} -->\n```\n")[1]
    assert line == shown.split("```")[0]


# -- the bridge, on plain httpx (any venv that has httpx) ------------------------------------

def test_the_bridge_answers_an_httpx_client_whole_streamed_and_faulted():
    httpx = pytest.importorskip("httpx")
    from faultsim.model.bridge import bridged

    fake = FakeClaude(script(faults=[ApiFault(1, "stream_cut")]))
    client = httpx.Client(transport=httpx.MockTransport(bridged(fake.handle)),
                          headers={"x-api-key": "k", "anthropic-version": "2023-06-01"})
    url = "https://api.anthropic.com/v1/messages"
    whole = client.post(url, json=first())
    assert whole.status_code == 200 and whole.json()["content"][0]["name"] == "lookup_order"
    assert whole.headers["request-id"] == "req_faultsim_00001"
    answer = whole.json()
    second = first()
    second["messages"] += [
        {"role": "assistant", "content": answer["content"]},
        {"role": "user", "content": [{"type": "tool_result", "content": "12.00",
                                      "tool_use_id": answer["content"][0]["id"]}]}]
    read = []
    with pytest.raises(httpx.RemoteProtocolError):  # httpx's own, as a real cut raises
        with client.stream("POST", url, json={**second, "stream": True}) as streamed:
            assert streamed.headers["content-type"] == "text/event-stream"
            for line in streamed.iter_lines():
                read.append(line)
    assert "event: message_start" in read and "event: message_stop" not in read
    again = client.post(url, json=second)  # the cut answer was never received: same turn
    assert again.json()["content"][0]["text"] == "Refunded ORD-7."


def test_the_bridge_raises_httpx_timeouts_for_the_fakes():
    httpx = pytest.importorskip("httpx")
    from faultsim.model.bridge import bridged

    fake = FakeClaude(script(faults=[ApiFault(0, "timeout")]))
    transport = httpx.MockTransport(bridged(fake.handle))
    with pytest.raises(httpx.ReadTimeout) as info:
        httpx.Client(transport=transport).post("https://api.anthropic.com/v1/messages",
                                               json=first())
    assert isinstance(info.value.__cause__, httpx2.ReadTimeout)


# -- the old SDK itself (CI's .ci/sdk1 venv) ---------------------------------------------------

def test_the_old_sdks_clients_are_served_in_process_sync_async_and_streaming():
    old_sdk()
    fake = FakeClaude(script(faults=[ApiFault(0, "529")]), retry_after_ms=1)
    client = fake.client()
    assert isinstance(client._client, sdk.http().Client)
    reply = client.messages.create(**first())  # a 529 the SDK retries, then the turn
    assert isinstance(reply, anthropic.types.Message) and reply.stop_reason == "tool_use"
    assert [r.status for r in fake.requests] == [529, 200]
    with client.messages.stream(**first()) as stream:
        streamed = stream.get_final_message()
    assert calls(streamed) == calls(reply)  # a repeat: the same turn, fresh tool-use ids

    async def via_async():
        aclient = fake.async_client()
        assert isinstance(aclient._client, sdk.http().AsyncClient)
        whole = await aclient.messages.create(**first())
        async with aclient.messages.stream(**first()) as stream:
            return whole, await stream.get_final_message()

    whole, async_streamed = asyncio.run(via_async())
    assert calls(whole) == calls(async_streamed) == calls(reply)
    assert [r.status for r in fake.requests] == [529, 200, 200, 200, 200]


def calls(message) -> list:
    return [(b.type, b.name, b.input) for b in message.content]


def test_a_framework_pinned_below_2_is_served_on_its_sdk():
    """strands-agents[anthropic] pins anthropic below 1.0; its model builds its own
    AsyncAnthropic and streams every turn: served by the fake, tools run, answer given."""
    old_sdk()
    if REQUIRED:
        import strands
    else:
        strands = pytest.importorskip("strands", reason="strands-agents[anthropic] not "
                                      "installed (CI's .ci/sdk1 venv has it)")
    from strands.models.anthropic import AnthropicModel

    looked_up = []

    @strands.tool
    def lookup_order(order_id: str) -> str:
        """Look an order up."""
        looked_up.append(order_id)
        return f"{order_id}: 12.00"

    fake = FakeClaude(script())
    with fake.serving_new_clients():
        model = AnthropicModel(model_id=MODEL, max_tokens=1024)
    agent = strands.Agent(model=model, tools=[lookup_order], callback_handler=None)
    assert str(agent(TASK)).strip() == "Refunded ORD-7."
    assert looked_up == ["ORD-7"]
    assert [(r.status, r.error) for r in fake.requests] == [(200, None), (200, None)]


def test_verdicts_on_tiny_are_the_same_on_both_sdks():
    """The reference agent and the save_b_only mutant swept on tests/data/tiny.toml under
    this venv's SDK and under $FAULTSIM_SDK2_PYTHON's (2.x): the same verdicts."""
    old_sdk()
    other = os.environ.get("FAULTSIM_SDK2_PYTHON")
    if not other:
        if REQUIRED:
            pytest.fail("FAULTSIM_REQUIRE_SDK1=1 but FAULTSIM_SDK2_PYTHON is not set")
        pytest.skip("FAULTSIM_SDK2_PYTHON (an interpreter with anthropic 2.x) not set")

    def sweep(python: str) -> dict:
        done = subprocess.run([python, str(ROOT / "tests" / "sdk_verdicts.py")], cwd=ROOT,
                              capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    with ThreadPoolExecutor(2) as pool:
        mine, theirs = pool.map(sweep, [sys.executable, other])
    assert mine["anthropic"].split(".")[0] in ("0", "1")
    assert theirs["anthropic"].split(".")[0] == "2"
    assert mine["verdicts"] == theirs["verdicts"]
    reference, mutant = mine["verdicts"]["reference"][0], mine["verdicts"]["save_b_only"][0]
    fine = {"passed", "escalated"}  # escalated: the agent stopped and said so, no failure
    assert reference and all(verdict in fine for _, _, verdict, _ in reference)
    assert any(verdict not in fine for _, _, verdict, _ in mutant)
