"""How the bundled CLI writes the session transcript: one clean run of the billing agent with
the CLI under strace (Linux, /usr/bin/strace), the write(2) calls to the transcript mapped to
the entries they end at.

    python examples/claude_agent_sdk/transcript_writes.py

A SIGKILL cannot split one write(2) to a file, so in a run timed like this one a process
crash leaves the transcript cut at one of these boundaries; faultsim explores every
message-boundary prefix (a superset: with a real model's latency the batches are smaller).
"""
from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import faultsim  # noqa: E402
from faultsim.adapters import claude_agent_sdk as cs  # noqa: E402
from faultsim.adapters.claude_agent_sdk.states import entry_kind, is_transcript  # noqa: E402

import claude_billing_agent  # noqa: E402


def main() -> int:
    strace = shutil.which("strace")
    if strace is None:
        print("strace is not installed: nothing to measure", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="faultsim-strace-") as tmp:
        log = Path(tmp) / "strace.out"
        def traced(command: list[str]) -> list[str]:
            return [strace, "-f", "-qq", "-y", "-s", "0", "-e", "signal=none", "-e",
                    "trace=write,writev,pwrite64,fsync,fdatasync", "-o", str(log), *command]

        scenario = faultsim.load_scenario(HERE / "scenario.toml")
        root = Path(tmp) / "sandbox"
        cs.golden_run(claude_billing_agent.run_billing, scenario, root, wrap_cli=traced)
        files = cs.snapshot(root)
        path, data = next((p, d) for p, d in files.items() if is_transcript(p))
        calls = [line for line in log.read_text().splitlines()
                 if f"{path.rsplit('/', 1)[-1]}>" in line]
    writes = [int(c.rsplit("=", 1)[1]) for c in calls if " write" in c or "writev(" in c]
    syncs = [c for c in calls if "sync(" in c]
    ends, pos = [], 0
    lines = data.split(b"\n")[:-1]
    for line in lines:
        pos += len(line) + 1
        ends.append(pos)
    bounds, total = [], 0
    for size in writes:
        total += size
        bounds.append(str(ends.index(total) + 1) if total in ends else f"inside entry ({total})")
    kinds = [entry_kind(line) for line in lines]
    print(f"transcript: {len(lines)} entries ({kinds.count('user')} user, "
          f"{kinds.count('assistant')} assistant), {len(writes)} write(2) calls, "
          f"{len(syncs)} fsync calls")
    print("each write ends after entry: " + ", ".join(bounds))
    return 0


if __name__ == "__main__":
    sys.exit(main())
