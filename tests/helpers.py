"""Crash-then-resume driver for hand-made crash tests."""
from __future__ import annotations

import socket
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from faultsim import ScenarioRun

try:
    from conftest import Killed
except ImportError:  # pragma: no cover
    from tests.conftest import Killed


@dataclass
class CrashRun:
    run: ScenarioRun
    kills: list[Any] = field(default_factory=list)  # where each kill landed
    outcome: Any = None  # the final incarnation's Outcome
    error: BaseException | None = None  # or what it raised

    @property
    def world(self):
        return self.run.world

    @property
    def ledger(self):
        return self.run.world.ledger


def crash_then_resume(scenario, factory, workdir: Path, *killers, between:
                      Callable[[ScenarioRun], None] | None = None) -> CrashRun:
    """Run one incarnation per killer (each must land: a kill that never fires fails the
    test), call `between(run)` before the last, then one clean resume to the end."""
    run = ScenarioRun(scenario, factory, workdir=workdir)
    result = CrashRun(run)
    with run:
        for killer in killers:
            is_listener = hasattr(killer, "service")
            unsubscribe = run.world.subscribe(killer) if is_listener else None
            try:
                run.incarnation(mark=None if is_listener else killer)
            except Killed:
                result.kills.append(killer.landed)
            else:
                raise AssertionError(f"the kill {vars(killer)} never landed: the run completed")
            finally:
                if unsubscribe:
                    unsubscribe()
        if between is not None:
            between(run)
        try:
            result.outcome = run.incarnation()
        except Exception as exc:  # the mutants' failures: 400s, unreadable checkpoints, …
            result.error = exc
    return result


def scenario_from(tmp_path_factory, text: str):
    """A scenario written inline by a test, loaded from its own file (named by its id)."""
    from faultsim import load_scenario
    import tomllib

    name = tomllib.loads(text)["id"]
    path = tmp_path_factory.mktemp(name) / f"{name}.toml"
    path.write_text(text)
    return load_scenario(path)


class CountingServer:
    """Accepts on 127.0.0.1 and counts connections: the real service nobody may reach
    (the network guard's and the containment's tests aim probes at it)."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.count = 0
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.count += 1
            conn.close()

    def close(self) -> None:
        self.sock.close()


def by_point(report) -> dict[str, list[str]]:
    """A one-run report's verdicts: kill point id -> the invariants violated there."""
    (run,) = report.runs
    return {v.kill_point.id: sorted({x.invariant for x in v.violations})
            for v in run.verdicts}


def part_of(i: int, n: int):
    """Every n-th kill point from the i-th, in the clean run's order: `only=part_of(1, 2)`,
    for a test that needs some of them, not all (`shard=` splits crash states, in
    subprocess mode too: every shard still kills at every kill point). A run offers `only`
    each kill point once, in order; a point is placed by its first offer."""
    seen: dict[str, int] = {}

    def keep(point) -> bool:
        return seen.setdefault(point.id, len(seen)) % n == i - 1

    return keep


def same_points(real):
    """The in-process run on the kill points the subprocess run explored (all, or those
    its `only` kept)."""
    if not real.runs[0].kill_points or len(real.runs[0].explored) == len(
            real.runs[0].kill_points):
        return None
    ids = {p.id for p in real.runs[0].explored}
    return lambda p: p.id in ids


# Two turns of the reference agent: 127 kill points, about two seconds swept.
SMALL = """\
id = "small"
task = "Look up order ORD-7 and say its total."
expected_final_answer = "ORD-7 is 12.00."

[services.orders]
kind = "readonly"
records."ORD-7" = { customer = "CUST-1", total_cents = 1200 }

[[turns]]
tool_calls = [{ name = "lookup_order", input = { order_id = "ORD-7" } }]
[[turns]]
final = "ORD-7 is 12.00."
"""
