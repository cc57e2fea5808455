"""The equal-state memo of this backend: crash states that are equal share one resumed run.

The other backends key a crash state by (the digest of its files, the world's signature)
and resume each key once (`faultsim.pipeline.sweep.Sweep.known`/`learn`, the in-process and
subprocess modes). This backend and the command backend (`faultsim.command.sweep`, per kill
point) share one piece for it, `faultsim.pipeline.sweep.Shared`: `Sweep`'s memo (with
`equivalences=False`: equal states only, no masked classes), `ResumeResult` for what the
resumed run showed, and `schedule_violations` to judge each state; `world_signature` for
the world. What this module adds is *which* bytes are compared (`key`).

Why not the raw bytes: every crash run is a new CLI process, and the CLI stamps what it
writes with values of its own that no two processes share: a random UUID for every
transcript entry (`uuid`, `parentUuid`, `promptId`, `requestRef`, ...), random `machineID`
and `userID` in `.claude.json`, its wall clock (`timestamp`, `firstStartTime`,
`lastUsedAt`, a backup named by the millisecond), and a registry entry of the live process
named by its pid (`claude/sessions/<pid>.json`). Measured on the billing example: of its
75 crash states not two were byte-equal, so a raw-byte memo shares nothing. The key
(`canonical`) is the state with exactly those values normalised:

- `work/` (the agent's own files): exact bytes. Any other file that is not JSON or JSONL
  the CLI wrote (or a line that does not parse: a torn tail): exact bytes.
- In each JSON document under `claude/` (a `.json` file, a `.jsonl` line), outside the
  conversation itself (never inside `message` or `toolUseResult`: what the model was sent
  and what the tools returned stay exact):
  * every string that is a UUID or a 32+ digit hex id is renamed by its first appearance
    (`<id1>`, `<id2>`, ..., in path order). The renaming is a bijection, so two states with
    equal keys are the same state up to a consistent renaming of ids: every link
    (`parentUuid` -> `uuid`, `leafUuid`, `requestRef` -> `id`) and every identity (two
    fields holding one id) is kept. An id that also appears in a path or under `work/`
    (the session id faultsim gives the CLI, which names the transcript and which the agent
    keeps in its own file) is not renamed: it must be the same id in both states.
  * the values of the CLI's clock fields (`timestamp`, and keys ending in `At`, `Time` or
    `Ms`: when it wrote, how long it streamed the model's thinking) are masked.
- `claude/backups/*.backup.<ms>`: the name's millisecond masked, the content as above.
- Left out: `claude/sessions/*` (the live-process registry, one entry per CLI pid) and
  the CLI's debug log of each MCP server (`home/.cache/claude-cli-nodejs/<cwd>/
  mcp-logs-<server>/<time>.jsonl`: flushed on a timer, so at a kill it is there or not,
  and it holds how many milliseconds each tool call took).

Why equal keys give the same resumed run, so the same resume guards' verdict:
- The world: the resumed run starts from a copy of the world the kill left, and its
  signature (`world_signature`: the ledger, the fake's answers and faults, the clock, each
  service's state, the durable stores) and the incarnation number (it names the resumed
  CLI's session id) are in the key. The rest of the world the run reads is the scenario's.
- The agent's Python code reads `work/` (exact) and the world; it is deterministic (the
  clean run's checks), so its course depends on nothing else.
- The CLI reads the sandbox. Proven from the bytes: a renamed id is only renamed (the
  bijection keeps every link and every identity), and everything else compared is exact.
  Assumed of the CLI (2.1.327, the release the adapter pins), not proven from the bytes:
  that its course as faultsim observes it (the requests it sends the fake, the tools it
  calls, its answer) does not depend on the digits of its own random ids, on its clock
  values (when it wrote an entry, how long a stream took), nor on its pid registry and MCP
  debug logs (the registry lists live processes and every entry in a crash state is the
  killed CLI's; the logs are written for a person). No two runs share any of these, the
  two clean runs `faultsim list` compares included, so every sweep already relies on the
  first two. `tests/test_claude_agent_sdk.py` checks them where they matter: the findings
  with the memo on and off (`explore(share=False)` resumes every state) are the same.
- The guards that read the crash state (`STATE_GUARDS`, and what a verdict says of its
  state: orphaned, the effects before the kill) are judged for every state on its own
  bytes (`schedule_violations`), never shared; only what the resumed run did is. The kill
  point's category adds nothing to a resumed run: it decides only which state the kill
  left (the sandbox, the world), which is the key.
"""
from __future__ import annotations

import json
import re
from typing import Any

from ...core.crashmodel import CrashState
from ...pipeline.incarnation import world_signature
from ...world import World

_ID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}|[0-9a-f]{32,}")
_BACKUP = re.compile(r"(\.backup\.)\d+$")
_CONVERSATION = ("message", "toolUseResult")
_CLOCK = ("At", "Time", "Ms")  # lastUsedAt, firstStartTime, thinkingDurationMs  # what the model was sent, the tools returned
_REGISTRY = "claude/sessions/"
# the CLI's debug log of each MCP server (home/.cache/claude-cli-nodejs/<cwd>/mcp-logs-<server>/
# <ISO time>.jsonl): written on its timer, so present or not at a kill, with durations
_MCP_LOG = re.compile(r"home/\.cache/claude-cli-nodejs/[^/]+/mcp-logs-[^/]+/[^/]+$")


def _left_out(path: str) -> bool:
    return path.startswith(_REGISTRY) or _MCP_LOG.match(path) is not None


def canonical(files: dict[str, bytes | None]) -> CrashState:
    """The state as the memo compares it (see the module docstring)."""
    paths = sorted(p for p in files if not _left_out(p))
    fixed: set[str] = set()  # ids that must stay themselves
    for path in paths:
        fixed.update(_ID.findall(path))
        data = files[path]
        if path.startswith("work/") and isinstance(data, bytes):
            fixed.update(_ID.findall(data.decode("latin-1")))
    names: dict[str, str] = {}

    def rename(value: Any, key: str = "") -> Any:
        if isinstance(value, dict):
            return {k: v if k in _CONVERSATION else rename(v, k) for k, v in value.items()}
        if isinstance(value, list):
            return [rename(v, key) for v in value]
        if key == "timestamp" or key.endswith(_CLOCK):
            return "<clock>"
        if isinstance(value, str) and value not in fixed and _ID.fullmatch(value):
            return names.setdefault(value, f"<id{len(names) + 1}>")
        return value

    def document(data: bytes) -> bytes:
        try:
            parsed = json.loads(data)
        except ValueError:
            return data  # not JSON (a torn line): exact
        return json.dumps(rename(parsed), separators=(",", ":")).encode()

    out: dict[str, bytes | None] = {}
    for path in paths:
        data = files[path]
        if path.startswith("claude/") and isinstance(data, bytes):
            if path.endswith(".jsonl"):
                lines = data.split(b"\n")
                data = b"\n".join([*map(document, lines[:-1]), lines[-1]])
            elif path.endswith(".json") or _BACKUP.search(path):
                data = document(data)
            path = _BACKUP.sub(r"\1<ms>", path)
        out[path] = data
    return CrashState.of("process", "canonical", out)


def key(files: dict[str, bytes | None], killed: World) -> tuple[CrashState, str]:
    """The state's key for `faultsim.pipeline.sweep.Shared` (the memo the command backend
    uses too): the sandbox as `canonical` compares it, and the world the resume starts
    from with the incarnation number (which names the resumed CLI's session id)."""
    return canonical(files), f"{killed.incarnation}:{world_signature(killed)}"
