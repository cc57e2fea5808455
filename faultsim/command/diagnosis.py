"""An agent command's events in the agent's terms: which model request, which service
call, which file. Where two clean runs part is said by the pipeline's check of both
real-process backends (`faultsim.pipeline.golden.agree`), naming events with `name`."""
from __future__ import annotations

from typing import Sequence

from ..core.trace import Event


def name(event: Event, before: Sequence[Event]) -> str:
    """An event as the agent's author knows it."""
    if event.kind == "model.response":
        n = 1 + sum(1 for e in before if e.kind == "model.response")
        return f"model request {n} (answered {event.detail or 'ok'}, script turn {event.subject})"
    if event.kind == "model.stream":
        return f"the stream of answer {event.subject} ({event.detail})"
    if event.kind.startswith("effect."):
        n = 1 + sum(1 for e in before if e.kind.startswith("effect.")
                    and e.subject == event.subject)
        return (f"call {n} to {event.subject} ({event.kind[len('effect.'):]}"
                + (f", {event.detail.split(' ', 1)[1]}" if " key=" in event.detail else "")
                + ")")
    if event.kind.startswith("fs."):
        what = {"fs.create": "created", "fs.write": "wrote", "fs.truncate": "truncated",
                "fs.rename": "renamed onto", "fs.unlink": "removed", "fs.mkdir": "made",
                "fs.rmdir": "removed", "fs.fsync": "fsynced",
                "fs.fdatasync": "fdatasynced"}.get(event.kind, event.kind)
        extra = f" ({event.detail})" if event.detail else ""
        return f"it {what} file {event.subject}{extra}"
    return event.describe()
