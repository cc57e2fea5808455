"""The world: everything that survives a crash (services, their ledger, the clock, the model)."""
from __future__ import annotations

from typing import Any, Callable

from ..model import FakeClaude, Script
from .clock import WorldClock, faithful_copies
from .ledger import Ledger
from .services import Receiver, make_receiver

Listener = Callable[..., None]


class World:
    """Lives outside the agent's crash domain; one per explored run.

    Each incarnation of the agent (a start or a resume) is numbered, and every ledger entry
    and model request is tagged with the incarnation that made it.
    """

    def __init__(self, *, clock: WorldClock | None = None,
                 scripts: Script | list[Script] = (), retry_after_ms: int = 1,
                 prefill_models: tuple[str, ...] | None = None,
                 allow: tuple[tuple[str, int], ...] = ()) -> None:
        self.clock = clock or WorldClock()
        self.ledger = Ledger()
        self.services: dict[str, Receiver] = {}
        self.incarnation = 0
        self.sealed = False  # set at a kill: a dead incarnation can no longer act
        # State an adapter keeps outside the agent's process, as a server would (LangGraph's
        # in-memory checkpointer): it survives crashes, is copied with the world and is part
        # of what a resumed run can observe (`faultsim.inprocess.explore.world_signature`).
        self.durable: dict[str, Any] = {}
        # The network guard: the addresses the scenario lets the agent reach besides
        # faultsim's own, and every connection it refused (faultsim.interpose.netguard), as
        # "HOST:PORT from FILE:LINE (incarnation N)"
        self.allow = allow
        self.unrouted: list[str] = []
        # processes the agent started that faultsim could not contain, refused before they
        # ran (faultsim.interpose.procguard): "COMMAND from FILE:LINE (incarnation N)"
        self.processes: list[str] = []
        self.processes_why = ""  # why faultsim could not contain them (and what to do)
        self._listeners: list[Listener] = []
        # Bound methods, not lambdas, so that copy.deepcopy(world) rebinds them.
        self.model = FakeClaude(scripts, retry_after_ms=retry_after_ms,
                                incarnation=self.current_incarnation, on_event=self.emit,
                                sealed=self.is_sealed, prefill_models=prefill_models)

    def current_incarnation(self) -> int:
        return self.incarnation

    def is_sealed(self) -> bool:
        return self.sealed

    def __deepcopy__(self, memo: dict) -> "World":
        """A copy of the world's state (services, ledger, model, clock) without observers:
        the explorer copies the world at a kill point to try several crash outcomes."""
        import copy

        listeners, self._listeners = self._listeners, []
        try:
            cls = type(self)
            clone = cls.__new__(cls)
            memo[id(self)] = clone
            with faithful_copies():
                for key, value in self.__dict__.items():
                    setattr(clone, key, copy.deepcopy(value, memo))
        finally:
            self._listeners = listeners
        return clone

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
