"""What a fork server is asked (`job`) and how its child's report is read (`report_of`,
`with_refused`): the messages of subprocess mode, shared by the clean run, the crashes,
the resumes and the probe.

Part of the subprocess backend: may import `pool` and the bottom layer."""
from __future__ import annotations

from typing import Any

from ..errors import WorkerDied
from ..killpoints import KillPoint
from .pool import JobResult


def new_job(job_id: Any, *, files: dict | None = None, world: bytes | None = None,
            kill: KillPoint | None = None, downtime: float = 0.0, timed: bool = True) -> dict:
    return {"id": job_id, "files": files, "world": world, "downtime": downtime,
            "kill": None if kill is None else (kill.index, kill.offset), "timed": timed}


def report_of(result: JobResult, what: str) -> dict:
    report = result.report
    if report is None or report.get("kind") == "crashed":
        detail = report["error"] if report else f"it ended by {result.how} {result.code}"
        raise WorkerDied(f"{what}: the child process died without reporting: {detail}")
    return report


def with_refused(world: Any, result: JobResult) -> Any:
    """The connections the jail refused to the incarnation's process tree
    (faultsim.host.jail), noted as the network guard notes its own: the same finding."""
    for address in result.refused:
        world.unrouted.append(f"{address} from a process the agent started, or code below "
                              f"Python's sockets (incarnation {world.incarnation})")
    return world
