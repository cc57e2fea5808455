"""Any agent, any language: crash-test an agent run as a command (`--agent 'cmd:node
agent.mjs'`), from outside, without importing it.

Each incarnation is the command, started in the sandbox's workdir with
`ANTHROPIC_BASE_URL`/`ANTHROPIC_API_KEY` at faultsim's loopback fake Claude, the scenario's
services on loopback (`FAULTSIM_SERVICE_<NAME>_URL`, faultsim.world.wire), `HOME` and
`TMPDIR` in the sandbox, `FAULTSIM_SEED` and `FAULTSIM_INCARNATION`, and no credential
variable; in a process group of its own, in subprocess mode's jail (loopback only, every
mount read-only but the sandbox) where the kernel allows it, under strace. The outcome
contract is `launch.py`'s (docs/reference/agent-contract.md).

  launch.py      the command's environment, process group, jail, kill and outcome contract
  syscalls.py    strace's command line (holding a call at its entry) and its log, parsed
  disk.py        the workdir as the traced calls changed it: trace events and the power
                 model's durability (faultsim.core.crashmodel's model, the same as in-process)
  control.py     the boundaries (model requests and streams, service calls, file system
                 calls, the exit) and the kill at the target one
  incarnation.py one run of the command, its kill proven
  sweep.py       clean runs; the command's crash runs, crash states and resumes given to
                 the pipeline's kill-point loop (faultsim.pipeline.crashes, the Claude
                 Agent SDK adapter's too), which makes the verdicts and the report
  pairs.py       two crashes: each first crash's resumed run crashed along its course
  diagnosis.py   its events in the agent's terms (where two clean runs part)
"""
from __future__ import annotations

from .launch import ESCALATE, outcome, split
from .pairs import explore
from .sweep import Exploration

__all__ = ["ESCALATE", "Exploration", "explore", "outcome", "split"]
