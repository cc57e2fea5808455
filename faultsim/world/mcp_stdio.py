"""The stdio MCP server an agent starts (`FAULTSIM_MCP_COMMAND`): a relay that forwards
each JSON-RPC message it reads on stdin (one per line) to faultsim's streamable HTTP
endpoint and writes the answer on stdout, one line each. The services, the ledger and the
kill points stay in faultsim's process (`wire`); this process holds no state.

    python -I faultsim/world/mcp_stdio.py --connect http://127.0.0.1:PORT/mcp

Run as a script with the standard library only (`-I`: no site packages, no faultsim
import), so it starts fast in every incarnation. When the endpoint drops a connection (a
kill at a service call) the relay exits without answering: what the agent's MCP client
sees of a server that died. Only a loopback URL is accepted.
"""
from __future__ import annotations

import http.client
import json
import sys
import urllib.error
import urllib.request
from urllib.parse import urlsplit


def relay(url: str, line: bytes) -> bytes | None:
    request = urllib.request.Request(url, data=line, method="POST", headers={
        "content-type": "application/json",
        "accept": "application/json, text/event-stream"})
    try:
        with urllib.request.urlopen(request, timeout=600) as response:
            body = response.read()
    except urllib.error.HTTPError as e:  # 4xx with a JSON-RPC error body
        body = e.read()
    return body.strip() or None


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] != "--connect":
        print("usage: mcp_stdio.py --connect http://127.0.0.1:PORT/mcp", file=sys.stderr)
        return 2
    url = argv[1]
    if urlsplit(url).hostname not in ("127.0.0.1", "localhost", "::1"):
        print(f"mcp_stdio: {url}: only a loopback address is relayed to", file=sys.stderr)
        return 2
    out = sys.stdout.buffer
    for line in sys.stdin.buffer:
        if not line.strip():
            continue
        try:
            answer = relay(url, line.strip())
        except (OSError, http.client.HTTPException) as e:
            print(f"mcp_stdio: the service endpoint dropped the call ({e})", file=sys.stderr)
            return 1
        if answer is not None:
            json.loads(answer)  # one message per line: refuse to relay a torn one
            out.write(answer.replace(b"\n", b" ") + b"\n")
            out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
