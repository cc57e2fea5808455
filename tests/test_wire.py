"""The scenario's services over the wire (faultsim/world/wire.py, mcp_tools.py,
mcp_stdio.py): each receiver kind's HTTP semantics, the ledger a wire call leaves against
the one the same `faultsim.effect` call leaves, the hook's phases and the dropped
connection on a kill, the MCP tools through the `mcp` package's own client over stdio and
streamable HTTP, and close() leaving no thread. Loopback only; a few seconds in all."""
from __future__ import annotations

import asyncio
import dataclasses
import http.client
import json
import threading
from pathlib import Path
from urllib.parse import urlsplit

import pytest

import faultsim
from faultsim.agent import AgentEnv, run_incarnation
from faultsim.core.trace import Killed
from faultsim.world import World
from faultsim.world.wire import env_name, serve_services


def make_world() -> World:
    world = World()
    world.add_service("billing", "keyed")
    world.add_service("crm", "queryable", records={"CUST-1": {"name": "Ada"}})
    world.add_service("mailer", "blind")
    world.add_service("orders", "readonly", records={"ORD-1": {"status": "delivered"}})
    return world


def call(url: str, method: str, body=None, headers=None, raw: bytes | None = None):
    """(status, JSON body, headers) of one request on its own connection."""
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=10)
    try:
        data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
        conn.request(method, parts.path, body=data,
                     headers={"content-type": "application/json", **(headers or {})})
        response = conn.getresponse()
        payload = response.read()
        return response.status, json.loads(payload) if payload else None, \
            {k.lower(): v for k, v in response.getheaders()}
    finally:
        conn.close()


@pytest.fixture
def wire():
    world = make_world()
    with serve_services(world) as served:
        yield served


def test_keyed_stripe_semantics(wire):
    url, ledger = wire.urls["billing"], wire.world.ledger
    first = call(url, "POST", {"customer": "CUST-1", "cents": 500}, {"Idempotency-Key": "k1"})
    assert first[0] == 200 and first[1] == {"id": "billing-0001", "customer": "CUST-1",
                                            "cents": 500}
    assert "idempotent-replayed" not in first[2]
    again = call(url, "POST", {"cents": 500, "customer": "CUST-1"}, {"Idempotency-Key": "k1"})
    assert again[:2] == (200, first[1]) and again[2]["idempotent-replayed"] == "true"
    assert len(ledger.applied("billing")) == 1  # the repeat applied nothing
    status, error, _ = call(url, "POST", {"customer": "CUST-1", "cents": 900},
                            {"Idempotency-Key": "k1"})
    assert status == 400 and error["error"]["type"] == "idempotency_error"
    assert call(url, "POST", {"cents": 1})[0] == 400  # no key
    assert call(url + "/idempotency-keys/k1", "GET")[:2] == (200, first[1])
    # a production path below the URL reaches the same receiver
    assert call(url + "/v1/charges", "POST", {"customer": "CUST-1", "cents": 500},
                {"Idempotency-Key": "k1"})[:2] == (200, first[1])
    assert call(url + "/v1/idempotency-keys/k1", "GET")[:2] == (200, first[1])
    assert call(url + "/v1/k1", "GET")[0] == 404
    status, error, _ = call(url + "/idempotency-keys/nope", "GET")
    assert status == 404 and error["error"]["type"] == "resource_missing"
    assert [e.outcome for e in ledger.entries] == ["applied", "deduplicated", "conflict",
                                                   "deduplicated"]
    assert len(ledger.applied("billing")) == 1


def test_queryable_blind_and_readonly(wire):
    crm, mailer, orders = (wire.urls[n] for n in ("crm", "mailer", "orders"))
    assert call(crm + "/CUST-1", "GET")[:2] == (200, {"record_id": "CUST-1", "name": "Ada"})
    assert call(crm + "/CUST-2", "GET")[0] == 404
    created = call(crm, "POST", {"record_id": "CUST-2", "name": "Bob"})
    assert created[:2] == (200, {"record_id": "CUST-2", "name": "Bob"})
    assert call(crm + "/CUST-2", "GET")[1] == created[1]
    assert call(crm, "POST", {"name": "no id"})[0] == 400
    assert call(mailer, "POST", {"to": "ada@example.com"})[1] == {"id": "mailer-0001"}
    assert call(mailer, "POST", {"to": "ada@example.com"})[1] == {"id": "mailer-0002"}
    assert len(wire.world.ledger.applied("mailer")) == 2  # blind: every call applies
    assert call(orders + "/ORD-1", "GET")[:2] == (200, {"status": "delivered"})
    assert call(orders + "/v1/orders/ORD-1", "GET")[:2] == (200, {"status": "delivered"})
    assert call(crm + "/CUST%2F3", "GET")[1]["error"]["message"] == "crm: no 'CUST/3'"
    assert call(orders + "/ORD-9", "GET")[0] == 404
    assert call(orders, "POST", {"x": 1})[0] == 405  # read-only
    assert call(mailer + "/x", "GET")[0] == 405
    assert call(mailer, "POST", raw=b"{not json")[0] == 400
    assert call(mailer, "POST", [1, 2])[0] == 400  # a body must be an object
    assert call(wire.base_url + "/services/nope", "GET")[0] == 404


def test_env_names_every_service_and_the_mcp_settings(wire):
    env = wire.env
    assert env["FAULTSIM_SERVICE_BILLING_URL"] == wire.urls["billing"]
    assert env_name("my-crm.v2") == "FAULTSIM_SERVICE_MY_CRM_V2_URL"
    assert env["FAULTSIM_MCP_URL"].endswith("/mcp")
    assert json.loads(env["FAULTSIM_MCP_CONFIG"])["mcpServers"]["faultsim"]["args"][-1] == \
        env["FAULTSIM_MCP_URL"]
    assert all(urlsplit(v).hostname == "127.0.0.1" for k, v in env.items()
               if k.endswith("_URL"))


# -- the ledger sees a wire call exactly as it sees the faultsim.effect call -------------
@faultsim.effect("billing", key=lambda customer, cents, idempotency_key: idempotency_key)
def charge(customer, cents, idempotency_key):
    raise AssertionError("routed under faultsim")


@faultsim.effect("crm", key=lambda record_id, **_: record_id)
def note(record_id, note):
    raise AssertionError("routed under faultsim")


@faultsim.effect("mailer")
def send(to, text):
    raise AssertionError("routed under faultsim")


@faultsim.effect("orders", key=lambda record_id: record_id)
def order(record_id):
    raise AssertionError("routed under faultsim")


def by_effect(world: World) -> list:
    class Agent:
        def run(self):
            charge("CUST-1", 500, idempotency_key="k1")
            charge("CUST-1", 500, idempotency_key="k1")
            note("CUST-1", "charged")
            send("ada@example.com", "paid")
            order("ORD-1")
            order("ORD-9")
            return charge.lookup("k1")

    env = AgentEnv(workdir=Path("."), client=None, services=world.services,  # type: ignore
                   clock=world.clock, task="t", task_id="t", model="m", incarnation=1,
                   world=world)
    world.begin_incarnation()
    return run_incarnation(lambda env: Agent(), env)


def by_wire(world: World) -> dict:
    world.begin_incarnation()
    with serve_services(world) as wire:
        u = wire.urls
        call(u["billing"], "POST", {"customer": "CUST-1", "cents": 500}, {"Idempotency-Key": "k1"})
        call(u["billing"], "POST", {"customer": "CUST-1", "cents": 500}, {"Idempotency-Key": "k1"})
        call(u["crm"], "POST", {"record_id": "CUST-1", "note": "charged"})
        call(u["mailer"], "POST", {"to": "ada@example.com", "text": "paid"})
        call(u["orders"] + "/ORD-1", "GET")
        call(u["orders"] + "/ORD-9", "GET")
        return call(u["billing"] + "/idempotency-keys/k1", "GET")[1]


def by_mcp(world: World) -> dict:
    from mcp import Client

    world.begin_incarnation()

    async def calls(url: str):
        async with Client(url, mode="legacy") as client:
            await client.call_tool("billing", {"idempotency_key": "k1", "customer": "CUST-1",
                                               "cents": 500})
            await client.call_tool("billing", {"idempotency_key": "k1", "customer": "CUST-1",
                                               "cents": 500})
            await client.call_tool("crm", {"record_id": "CUST-1", "note": "charged"})
            await client.call_tool("mailer", {"to": "ada@example.com", "text": "paid"})
            await client.call_tool("orders", {"record_id": "ORD-1"})
            await client.call_tool("orders", {"record_id": "ORD-9"})
            found = await client.call_tool("billing_lookup", {"idempotency_key": "k1"})
            return found.structured_content

    with serve_services(world) as wire:
        return asyncio.run(calls(wire.mcp_url))


def test_the_ledger_cannot_tell_a_wire_or_mcp_call_from_a_faultsim_effect_call():
    ledgers, lookups = [], []
    for way in (by_effect, by_wire, by_mcp):
        world = make_world()
        lookups.append(way(world))
        ledgers.append([dataclasses.asdict(e) for e in world.ledger.entries])
    assert ledgers[0] and [e["outcome"] for e in ledgers[0]] == \
        ["applied", "deduplicated", "applied", "applied", "read", "not_found"]
    assert ledgers[1] == ledgers[0]
    assert ledgers[2] == ledgers[0]
    assert lookups[0] == lookups[1] == lookups[2] == {"id": "billing-0001",
                                                      "customer": "CUST-1", "cents": 500}


# -- the hook ------------------------------------------------------------------------------
def test_the_hook_sees_every_phase_numbered_per_service():
    seen = []
    with serve_services(make_world(), hook=lambda *a: seen.append(a)) as wire:
        call(wire.urls["mailer"], "POST", {"to": "a"})
        call(wire.urls["orders"] + "/ORD-1", "GET")
        call(wire.urls["mailer"], "POST", {"to": "b"})
        assert seen[-1] == ("answered", "mailer", 2)  # before the answer was sent
    assert seen == [(p, "mailer", 1) for p in ("received", "applied", "answered")] + \
        [(p, "orders", 1) for p in ("received", "applied", "answered")] + \
        [(p, "mailer", 2) for p in ("received", "applied", "answered")]


@pytest.mark.parametrize("phase,applied", [("received", 0), ("applied", 1), ("answered", 1)])
def test_a_kill_in_the_hook_drops_the_connection(phase, applied):
    kills = []

    def hook(at, service, n):
        if (at, service, n) == (phase, "billing", 1):
            kills.append(at)
            raise Killed(at)

    world = make_world()
    with serve_services(world, hook=hook) as wire:
        parts = urlsplit(wire.urls["billing"])
        conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=10)
        conn.request("POST", parts.path, body=b'{"cents": 5}',
                     headers={"Idempotency-Key": "k1", "content-type": "application/json"})
        with pytest.raises((http.client.RemoteDisconnected, ConnectionResetError)):
            conn.getresponse()  # no answer, whatever was applied
        conn.close()
        assert kills == [phase]  # the kill landed, once
        assert len(world.ledger.applied("billing")) == applied
        # the server goes on serving the next incarnation: the retry is deduplicated
        retry = call(wire.urls["billing"], "POST", {"cents": 5}, {"Idempotency-Key": "k1"})
        assert retry[0] == 200 and len(world.ledger.applied("billing")) == 1


def test_attach_serves_another_world_counting_calls_from_one():
    import copy

    seen = []
    first = make_world()
    with serve_services(first, hook=lambda *a: seen.append(a)) as wire:
        call(wire.urls["mailer"], "POST", {"to": "a"})
        second = copy.deepcopy(first)
        wire.attach(second)
        call(wire.urls["mailer"], "POST", {"to": "b"})
    assert [e.params for e in first.ledger.entries] == [{"to": "a"}]
    assert [e.params for e in second.ledger.entries] == [{"to": "a"}, {"to": "b"}]
    assert [a for a in seen if a[0] == "received"] == [("received", "mailer", 1)] * 2


def test_a_sealed_world_drops_the_dead_incarnations_call():
    world = make_world()
    with serve_services(world) as wire:
        world.sealed = True
        with pytest.raises((http.client.RemoteDisconnected, ConnectionResetError)):
            call(wire.urls["mailer"], "POST", {"to": "a"})
    assert world.ledger.entries == []


# -- MCP -----------------------------------------------------------------------------------
def mcp_session(server):
    from mcp import Client

    async def go():
        async with Client(server, mode="auto") as client:
            tools = {t.name: t for t in (await client.list_tools()).tools}
            results = []
            for _ in (1, 2):
                result = await client.call_tool(
                    "billing", {"idempotency_key": "k1", "customer": "CUST-1", "cents": 500})
                results.append(result.structured_content)
            bad = await client.call_tool("billing", {"idempotency_key": "k1", "cents": 1})
            return tools, results, bad
    return asyncio.run(go())


@pytest.mark.parametrize("transport", ["http", "stdio"])
def test_mcp_tools_over_both_transports(transport):
    from mcp.client.stdio import StdioServerParameters

    world = make_world()
    with serve_services(world) as wire:
        server = wire.mcp_url if transport == "http" else \
            StdioServerParameters(command=wire.mcp_command[0], args=wire.mcp_command[1:])
        tools, results, bad = mcp_session(server)
    assert set(tools) == {"billing", "billing_lookup", "crm", "crm_query", "mailer", "orders"}
    assert tools["billing"].input_schema["required"] == ["idempotency_key"]
    assert tools["crm_query"].input_schema["required"] == ["record_id"]
    assert results == [{"id": "billing-0001", "customer": "CUST-1", "cents": 500}] * 2
    assert bad.is_error and "different parameters" in bad.content[0].text
    assert [e.outcome for e in world.ledger.entries] == ["applied", "deduplicated", "conflict"]


def test_a_kill_at_an_mcp_call_reaches_the_client_as_a_dead_server():
    from mcp.client.stdio import StdioServerParameters

    kills = []

    def hook(phase, service, n):
        if phase == "applied":
            kills.append(n)
            raise Killed(phase)

    world = make_world()
    with serve_services(world, hook=hook) as wire:
        server = StdioServerParameters(command=wire.mcp_command[0], args=wire.mcp_command[1:])
        with pytest.raises(Exception) as raised:
            mcp_session(server)
    assert kills == [1] and len(world.ledger.applied("billing")) == 1
    assert "Connection closed" in [str(e) for e in leaves(raised.value)]  # the relay exited


def leaves(error: BaseException) -> list[BaseException]:
    if isinstance(error, BaseExceptionGroup):
        return [leaf for e in error.exceptions for leaf in leaves(e)]
    return [error]


def test_the_stdio_relay_refuses_a_non_loopback_address():
    import subprocess
    import sys

    from faultsim.world.wire import RELAY

    done = subprocess.run([sys.executable, "-I", str(RELAY), "--connect",
                           "http://192.0.2.1/mcp"], input=b"", capture_output=True, timeout=30)
    assert done.returncode == 2 and b"only a loopback address" in done.stderr


def test_close_leaves_no_thread_and_frees_the_port():
    before = set(threading.enumerate())
    wire = serve_services(make_world())
    call(wire.urls["mailer"], "POST", {"to": "a"})
    # a client that keeps its connection alive (as Node's fetch does) holds a server thread
    parts = urlsplit(wire.urls["mailer"])
    kept = http.client.HTTPConnection(parts.hostname, parts.port, timeout=10)
    kept.request("POST", parts.path, body=b"{}", headers={"content-type": "application/json"})
    assert kept.getresponse().read()
    assert len(set(threading.enumerate()) - before) >= 2  # the server's and the connection's
    port = urlsplit(wire.base_url).port
    wire.close()
    assert set(threading.enumerate()) <= before
    kept.close()
    with pytest.raises(OSError):
        call(f"http://127.0.0.1:{port}/services/mailer", "POST", {"to": "b"})
