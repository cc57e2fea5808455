"""The agent's system calls as strace logs them: `faultsim.host.strace`'s command line (holding
a call at its entry) and log parser, where this backend's modules ask for them (one copy,
shared with the Claude Agent SDK adapter)."""
from __future__ import annotations

from ..host.strace import (CHANGING, TRACED, Call, Hold, LogReader, command_line,
                      count_entries, follow, parse, read_log, strace_unavailable, unhex)

__all__ = ["CHANGING", "TRACED", "Call", "Hold", "LogReader", "command_line",
           "count_entries", "follow", "parse", "read_log", "strace_unavailable", "unhex"]
