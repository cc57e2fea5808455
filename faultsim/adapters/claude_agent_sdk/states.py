"""The crash states a kill leaves: the sandbox as written, the transcript's whole-entry
prefixes (batched appends, never fsynced) and, under power loss, a torn last entry."""
from __future__ import annotations

import json

from ...core.checkpoints import CheckpointSpec

PREFIXES = ("written", "messages", "entries")
TRANSCRIPTS = "claude/projects/*/*.jsonl"  # the session transcripts, under the sandbox
# The transcript is a checkpoint for the state guards; "bytes": its line count says nothing
# (the prompt arrives with attachments and metadata lines), the tool-use ids it holds do.
CHECKPOINT = CheckpointSpec(files=(TRANSCRIPTS,), format="bytes", declared=True)


def is_transcript(path: str) -> bool:
    import fnmatch

    return fnmatch.fnmatchcase(path, TRANSCRIPTS)


def entry_kind(line: bytes) -> str:
    try:
        return str(json.loads(line).get("type"))
    except (ValueError, AttributeError):
        return "?"


def crash_states(files: dict[str, bytes], prefixes: str = "messages",
                 power: bool = False) -> list[tuple[str, dict[str, bytes | None]]]:
    """The states a kill with `files` on disk may leave (see the module docstring), each
    named in words; the first is the state as written."""
    states: list[tuple[str, dict[str, bytes | None]]] = [("as written", dict(files))]
    if prefixes == "written":
        return states
    seen = {_key(files)}
    for path, data in sorted(files.items()):
        if not is_transcript(path):
            continue
        lines = data.split(b"\n")[:-1]  # whole entries only
        talk = [k for k in range(1, len(lines) + 1)
                if entry_kind(lines[k - 1]) in ("user", "assistant")]
        # a cut after the last conversation entry holds the conversation as written: only
        # request metadata, whose number and order vary from run to run, would differ
        cuts = list(range(1, len(lines))) if prefixes == "entries" else talk[:-1]
        for k in [0, *cuts]:
            state = dict(files)
            if k == 0:
                del state[path]  # the first batch never written: no file at all
                # named without the session id: the CLI draws it when the agent continues
                name = "transcript not yet written" if sum(map(is_transcript, files)) == 1 \
                    else f"{path.rsplit('/', 1)[-1]} not yet written"
            else:
                state[path] = b"\n".join(lines[:k]) + b"\n"
                # not "of N": the entries after the last conversation entry (request
                # metadata) vary in number from run to run, the names must not
                name = f"transcript cut after entry {k} ({entry_kind(lines[k - 1])})"
            if _key(state) not in seen:
                seen.add(_key(state))
                states.append((name, state))
            if power and 0 < k < len(lines):
                torn = dict(state)
                torn[path] = state[path] + lines[k][:len(lines[k]) // 2]
                states.append((f"power loss: transcript cut after entry {k}, "
                               f"entry {k + 1} torn in half", torn))
    return states


def _key(files: dict[str, bytes | None]) -> tuple:
    return tuple(sorted((p, d) for p, d in files.items()))



def orphaned(files: dict[str, bytes | None]) -> bool:
    uses, results = set(), set()
    for path, data in files.items():
        if data is None or not is_transcript(path):
            continue
        for line in data.split(b"\n")[:-1]:
            try:
                content = (json.loads(line).get("message") or {}).get("content")
            except (ValueError, AttributeError):
                continue
            for block in content if isinstance(content, list) else ():
                if isinstance(block, dict) and block.get("type") == "tool_use":
                    uses.add(block.get("id"))
                elif isinstance(block, dict) and block.get("type") == "tool_result":
                    results.add(block.get("tool_use_id"))
    return bool(uses - results)
