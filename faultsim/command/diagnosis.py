"""Where two runs of an agent command part, in the agent's terms: which model request,
which service call, which file."""
from __future__ import annotations

from typing import Sequence

from ..trace import Event


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


def in_agent_terms(a: Sequence[Event], b: Sequence[Event]) -> str:
    """Where runs `a` and `b` part (one line), or that they do not."""
    for n, (x, y) in enumerate(zip(a, b)):
        if x.signature() != y.signature():
            return (f"after {n} equal events, the first run's next is {name(x, a[:n])}, "
                    f"the second's {name(y, b[:n])}")
    if len(a) != len(b):
        n = min(len(a), len(b))
        longer = a if len(a) > n else b
        return f"after {n} equal events one run goes on with {name(longer[n], longer[:n])}, " \
               "the other stops"
    return "the runs do not part"
