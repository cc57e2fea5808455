"""Crash-test a Claude Agent SDK agent, unchanged: `pip install 'faultsim[claude-agent-sdk]'`.

You give faultsim the coroutine your code already has that runs the agent: it calls
`query(...)` or uses `ClaudeSDKClient` with your `ClaudeAgentOptions`, starts the task or
resumes it the way your service does after a restart (`resume=session_id` read from a file
of yours, or `continue_conversation=True`), and returns the final answer::

    async def run_billing(task: str, workdir: Path) -> str:
        ...ClaudeAgentOptions(cwd=workdir, mcp_servers={"billing": billing}, resume=...)

    result = explore(run_billing, scenario)

Tools that act on the world are in-process SDK MCP tools (`@tool` + `create_sdk_mcp_server`)
whose effects go through `faultsim.effect`, as for any faultsim agent.

A scenario with follow-ups (several user turns) needs a coroutine that takes them,
`run(task, workdir, follow_ups)`: it sends each once into the same session, and a restarted
one learns from the session on disk which it sent (`incarnations.arguments`; a coroutine of
two parameters is refused on such a scenario).

Why not the engine's in-process or subprocess mode: the agent is two processes, the Python
one (your code and its MCP tools) and the bundled Claude Code CLI it spawns, which keeps the
session transcript (`CLAUDE_CONFIG_DIR/projects/<cwd>/<session>.jsonl`). Neither forking
at a kill point (the CLI child is not forked with its parent) nor pyfakefs (the CLI writes
the real disk) applies. So this is its own crash-state source, on real processes: each crash
run replays the clean run from the start and, at the chosen kill point, SIGKILLs the CLI's
process group (the CLI runs in a session of its own) and stops the Python side with
`faultsim.core.trace.Killed`; the sandbox is read at that instant. Crash states equal to one resumed
already (the same sandbox up to the CLI's own ids and clock, the same world: `memo.py`)
share its resumed run. The world (services, ledger,
the fake Claude) lives in this process, as in the other modes.

Each incarnation runs with (set in `os.environ`, which the SDK passes on to the CLI; your
`options.env` still wins): `ANTHROPIC_BASE_URL` at faultsim's loopback fake Messages endpoint
(SSE), a fake `ANTHROPIC_API_KEY`, no other credential variable, the CLI's non-essential
traffic, telemetry, auto-updater and error reporting off (no connection but loopback), tool
search off (`ENABLE_TOOL_SEARCH=false`: MCP tools are offered to the model directly, as the
scripted turns call them), and `CLAUDE_CONFIG_DIR`, `HOME`, `TMPDIR` and the working
directory inside the sandbox. The sandbox (`work/`, the agent's cwd; `claude/`, the config
dir with the transcript; `home/`; `tmp/`) is the crash state; it is restored at the same
absolute path for every incarnation, because the CLI names a project by its cwd. A CLI
starting a new session gets a session id of faultsim's (`--session-id`, from the scenario,
the incarnation and the how-manieth CLI): two runs write the same transcript path, which the
write kills must know before the CLI starts; a resume, a continue or the agent's own id is
left as the agent asked.

Kill points (categories), each in the order of the clean run:
  model-request      the fake Claude answered request N, before the CLI read the answer
  after-tool-use     inside the stream, right after a `tool_use` block closed (the CLI
                     starts the tool then, before the message ends)
  handler-entry      the SDK called the Python tool handler (MCP `tools/call`)
  before-effect      the handler is about to act (`faultsim.effect`)
  after-effect       the effect happened, its result not yet returned
  handler-return     the handler returned, the CLI has not the result yet
  transcript-write   at the entry of the CLI's Nth write(2) to the session transcript,
                     which never happens (strace; `writes.py`), where strace can trace and
                     the session id is faultsim's
A kill first waits `settle` seconds and then until the config dir is still for 0.2 s (the
CLI is blocked on faultsim then, on the model or on the tool), so the CLI's transcript
batch, flushed on a ~100 ms timer, is on disk: the state "as written" is the most the CLI
can have written by that point, whatever the machine's load.
Each kill is proven: the CLI's process group is gone (its pid reaped or a zombie) and the
Python side was stopped (`Exploration.kills_landed`). Two runs stand in for the
crash runs, one stopped at every point where the CLI waits on faultsim, one under strace at
the entry of every transcript write: at each it does what a kill does up to the SIGKILL,
then SIGSTOPs the group, proves it stopped, reads the crash state and lets the run go on
(`control.Controller._stop`, `Exploration.stopped`; `stops=False`: a crash run per point).

Crash states per kill point (`prefixes=`):
  written    the sandbox and config dir as they stood at the kill
  "messages" (default) also every whole-entry prefix of the session transcript ending at a
             conversation entry (a `user` or `assistant` line) but the last one written
             (that one holds the conversation as written), and no transcript at all:
             the CLI appends entries in batches and never fsyncs, so a process crash earlier
             in a batch window leaves any of these; entries between two conversation entries
             (attachments, request metadata) change what resume rebuilds only with the entry
             after them, which a shorter prefix already covers
  "entries"  every whole-entry prefix (slower; a superset)
  power=True adds the power-loss states: the transcript's unsynced appends lost (covered by
             the prefixes above, down to no file: its directory entry was never fsynced
             either) and each message-boundary prefix followed by the next entry torn in half
             (the CLI skips a torn last line: the torn states should judge as their prefix).
The rest of the sandbox is taken as written at the kill in every state. A kill inside a
transcript write leaves one state, as written: a real kill made it.

`backend.py` (faultsim's backend seam, `faultsim.backends`) and `runs.py` put all this
behind every front end given the spec `claude-agent-sdk:FILE.py:ATTR` (`faultsim
run/list/replay`, the pytest marker, `faultsim.explore`), and `Exploration.assert_ok`.

The machinery is the command backend's (`faultsim.command`), one copy of each piece: the
loop over kill points with its landed check, memo, resumes, verdicts, progress lines and
its conversion to the report (`faultsim.pipeline.crashes`, `pipeline.sweep.Shared`), the
clean runs' check saying where two runs part (`pipeline.golden.agree`), strace's command
line and log (`faultsim.host.strace`), the process group's kill, stop and their proofs (`faultsim.host.groups`),
the sandbox's read and write (`faultsim.core.tree`). What is this adapter's own:

  sdk.py           the pinned SDK and CLI, the CLI's environment
  control.py       the SDK seams that report its kill points, the kill at the target,
                   the stops of a run that reads many points' states
  incarnations.py  one run of the user's coroutine, to its end, its kill or past its stops
  writes.py        the transcript-write kills (which calls strace holds, the proof)
  sandbox.py       the sandbox's four folders, at one absolute path
  states.py        the crash states a kill leaves (the transcript's prefixes)
  memo.py          the memo's key (the CLI's ids and clock masked), and why it is sound
  sweep.py         the clean run, the survey, and `Backend`: the above given to the loop
  results.py       its verdicts (what the findings table counts), exploration, survey
  report.py        the kill points named for the report, the transcript's counterexample
  tables.py        the findings table
  backend.py, runs.py  the backend seam: run, list, replay
"""
from __future__ import annotations

from .control import CATEGORIES, WRITE_KILL, KillPoint
from .sweep import (Exploration, Survey, Verdict, explore, golden_run, resume,
                      survey, write_points)
from .incarnations import AgentRun, Incarnation, incarnation
from .sandbox import restore, snapshot
from .sdk import CLI_VERSION, SDK_VERSION, cli_environment, cli_unavailable
from .states import CHECKPOINT, PREFIXES, TRANSCRIPTS, crash_states
from .tables import COLUMNS, classify, table

__all__ = ["CATEGORIES", "CHECKPOINT", "CLI_VERSION", "COLUMNS", "PREFIXES", "SDK_VERSION",
           "TRANSCRIPTS", "WRITE_KILL", "AgentRun", "Exploration", "Incarnation", "KillPoint",
           "Survey", "Verdict", "classify", "cli_environment", "cli_unavailable",
           "crash_states", "explore", "golden_run", "incarnation", "restore", "resume",
           "snapshot", "survey", "table", "write_points"]
