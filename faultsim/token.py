"""Replay tokens: one short, self-contained string per counterexample.

A token names everything a replay needs and nothing it can look up: the scenario file, the
agent factory, the crash model, the seed, the mode (real processes or in-process), and for
each crash of the schedule where it
landed (event index, byte offset inside a torn write) and which crash state it left.
Kill points are addressed by position, not by id, because a later incarnation's ids only
exist once that incarnation has run; the replay prints the ids again.

A token names code that a replay imports and runs (its agent): `show` says what, from the
token alone. Versions: the format is the prefix (fs1); a token of another format is
refused, one of this format made by another faultsim release replays with a warning
(`other_version`): its positions mean the same where that release placed kill points as
this one does, which a changed engine may not.
"""
from __future__ import annotations

import base64
import functools
import hashlib
import json
import os
import re
import zlib
from dataclasses import dataclass

from .errors import UsageError

PREFIX = "fs1_"


class TokenError(UsageError, ValueError):
    """A replay token that cannot be read."""


@dataclass(frozen=True)
class Step:
    index: int  # kill after event `index` of the incarnation's trace ...
    offset: int | None  # ... or inside it, after `offset` bytes of its write
    order: int = 0  # which of the crash states the model allows there


@dataclass(frozen=True)
class ReplayToken:
    scenario: str  # path of the scenario file, as given to the run
    agent: str  # MODULE[:ATTR]
    crash_model: str
    seed: str
    steps: tuple[Step, ...]
    mode: str = "in-process"  # or "subprocess": replayed on real processes (SIGKILL)
    version: str = ""  # the faultsim that made it
    fingerprint: str = ""  # of the scenario file's bytes: a replay refuses a changed one

    def encode(self) -> str:
        doc = [self.scenario, self.agent, self.crash_model, self.seed,
               [[s.index, -1 if s.offset is None else s.offset, s.order] for s in self.steps],
               self.mode]
        if self.version or self.fingerprint:
            doc.append({"v": self.version, "fp": self.fingerprint})
        raw = zlib.compress(json.dumps(doc, separators=(",", ":")).encode(), 9)
        return PREFIX + base64.urlsafe_b64encode(raw).decode().rstrip("=")

    @classmethod
    def decode(cls, token: str) -> "ReplayToken":
        token = token.strip()
        other = re.match(r"fs(\d+)_", token)
        if other and not token.startswith(PREFIX):
            raise TokenError(f"a replay token of format fs{other.group(1)} (made by another "
                             f"faultsim release); this faultsim reads {PREFIX[:-1]} tokens: "
                             "replay it with the release that made it")
        if not token.startswith(PREFIX):
            raise TokenError(f"{token[:20]!r} is not a faultsim replay token (they start "
                             f"with {PREFIX!r}; copy it whole from a report)")
        body = token[len(PREFIX):]
        try:
            raw = zlib.decompress(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
            scenario, agent, model, seed, steps, *rest = json.loads(raw)
            mode = rest[0] if rest and isinstance(rest[0], str) else "in-process"
            meta = next((r for r in rest if isinstance(r, dict)), {})
            version, fingerprint = str(meta.get("v", "")), str(meta.get("fp", ""))
            parsed = tuple(Step(int(i), None if int(o) < 0 else int(o), int(n))
                           for i, o, n in steps)
        except Exception:
            raise TokenError("the replay token is damaged (truncated or mistyped?); copy it "
                             "whole from a report") from None
        if not parsed or not all(isinstance(x, str) for x in (scenario, agent, model, seed,
                                                              mode)):
            raise TokenError("the replay token is damaged: it names no crash")
        if mode not in ("in-process", "subprocess"):
            raise TokenError(f"the replay token names an unknown mode {mode!r} (made by a "
                             "newer faultsim?)")
        return cls(scenario, agent, model, seed, parsed, mode, version, fingerprint)

    def other_version(self, current: str) -> str | None:
        """One line when a faultsim release other than `current` made this token (None:
        the same, or a token from before versions were stamped)."""
        if not self.version or self.version == current:
            return None
        return (f"this token was made by faultsim {self.version}, this is faultsim "
                f"{current}: it replays the same positions, which name the same kill points "
                "only if the two place them alike (a verdict that differs from the report "
                "may be the version)")

    def show(self, current: str) -> list[str]:
        """What a replay of this token would import and run, from the token alone."""
        if not os.path.exists(self.scenario):
            state = "not here: replay from the folder the report was made in"
        elif not self.fingerprint:
            state = "found (the token holds no fingerprint to compare)"
        elif scenario_fingerprint(self.scenario) == self.fingerprint:
            state = "unchanged since the token was made"
        else:
            state = "CHANGED since the token was made: a replay refuses it"
        lines = [f"a {PREFIX[:-1]} replay token made by faultsim {self.version or '(unknown)'}"
                 f"{'' if self.version == current else f' (this is faultsim {current})'}",
                 f"  scenario:     {self.scenario} ({state})",
                 f"  agent:        {self.agent} (imported and run by a replay unless --agent "
                 "names another)",
                 f"  crash model:  {self.crash_model}",
                 f"  seed:         {self.seed}",
                 f"  mode:         {self.mode}"]
        if self.crash_model == "pause":  # one step: the pause point, and the wake point
            from .core.crashmodel import wake_label

            return lines + [f"  pause:        after event #{s.index}, woken at the new "
                            f"incarnation's {wake_label(s.order)}" for s in self.steps]
        for k, step in enumerate(self.steps, 1):
            where = (f"after event #{step.index}" if step.offset is None else
                     f"inside the write of event #{step.index}, after {step.offset} bytes")
            lines.append(f"  crash {k}:      {where}, of incarnation {k}"
                         + (f", crash state {step.order}" if step.order else ""))
        return lines

    def check_scenario(self) -> None:
        """Refuse, in one line, a scenario file that changed since the token was made: the
        same positions would name other kill points (a silent replay of something else)."""
        if not self.fingerprint:
            return  # a token from before fingerprints
        now = scenario_fingerprint(self.scenario)
        if now != self.fingerprint:
            from ._version import __version__

            made = f"faultsim {self.version or '?'}" + (
                f"; this is {__version__}" if self.version != __version__ else "")
            raise TokenError(
                f"{self.scenario}: the scenario changed since this token was made (by "
                f"{made}): it would replay other kill points; rerun faultsim run for fresh "
                "tokens")


def scenario_fingerprint(path: str) -> str:
    """A short digest of the scenario file's bytes ('' when it cannot be read); read once
    per version of the file (every counterexample of a run asks)."""
    try:
        stat = os.stat(path)
    except OSError:
        return ""
    return _fingerprint(path, stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=64)
def _fingerprint(path: str, mtime_ns: int, size: int) -> str:
    try:
        with open(path, "rb") as f:
            return hashlib.blake2b(f.read(), digest_size=6).hexdigest()
    except OSError:
        return ""
