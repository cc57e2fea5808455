"""The world: everything that survives a crash (services, their ledger, the clock, the model)."""
from __future__ import annotations

from typing import Any, Callable

from ..model import FakeClaude, Script
from .clock import WorldClock
from .ledger import Ledger
from .services import Receiver, make_receiver

Listener = Callable[..., None]


class World:
    """Lives outside the agent's crash domain; one per explored run.

    Each incarnation of the agent (a start or a resume) is numbered, and every ledger entry
    and model request is tagged with the incarnation that made it.
    """

    def __init__(self, *, clock: WorldClock | None = None,
                 scripts: Script | list[Script] = (), retry_after_ms: int = 1) -> None:
        self.clock = clock or WorldClock()
        self.ledger = Ledger()
        self.services: dict[str, Receiver] = {}
        self.incarnation = 0
        self._listeners: list[Listener] = []
        self.model = FakeClaude(scripts, retry_after_ms=retry_after_ms,
                                incarnation=lambda: self.incarnation, on_event=self.emit)

    def add_service(self, name: str, kind: str, **options: Any) -> Receiver:
        if name in self.services:
            raise ValueError(f"service {name!r} is defined twice")
        self.services[name] = make_receiver(kind, name, self, **options)
        return self.services[name]

    def service(self, name: str) -> Receiver:
        try:
            return self.services[name]
        except KeyError:
            raise KeyError(f"no service {name!r} in this world; it has: "
                           f"{', '.join(sorted(self.services)) or 'none'}") from None

    def begin_incarnation(self) -> int:
        self.incarnation += 1
        self.emit("incarnation.start", incarnation=self.incarnation)
        return self.incarnation

    # Observers (the engine's trace) subscribe here; the world itself never depends on them.
    def subscribe(self, listener: Listener) -> Callable[[], None]:
        self._listeners.append(listener)
        return lambda: self._listeners.remove(listener)

    def emit(self, kind: str, **info: Any) -> None:
        for listener in list(self._listeners):
            listener(kind, **info)
