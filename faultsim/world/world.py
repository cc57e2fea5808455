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

    # what `adopt` keeps of this world's model: its wiring to this world and its observers
    _MODEL_WIRING = ("_incarnation", "_on_event", "sealed", "before_request")

    def adopt(self, other: "World") -> None:
        """Take `other`'s state in place: `other` is a copy of this world, changed by
        another process and sent back (subprocess mode's pause model hands the world from
        the incarnation that stops to the one that goes on, `faultsim.real.pause`).

        Why in place: the agent holds pieces of the world, not the world: its receivers
        (`env.services`, or one it kept), the clock, the model's handler its SDK clients
        call. Each piece keeps its identity and takes the other's state, so whatever the
        agent holds sees the world as the other incarnation left it, as two processes
        talking to one server would. Kept of this world: its observers (`_listeners`),
        the model's and the receivers' wiring to it (bound methods, `_world`). Every other
        attribute is the other's (a new attribute of the world, its model or a receiver is
        adopted too: nothing is listed but the wiring). `other` is consumed: its objects
        (the ledger, the model's records) become this world's."""
        now = other.clock.now()
        if self.clock._factory is not None:  # attached to this process's frozen time
            self.clock._factory.move_to(now.replace(tzinfo=None))
        self.clock._now = now
        for key, value in other.__dict__.items():
            if key not in ("clock", "model", "services", "_listeners", "durable"):
                setattr(self, key, value)
        # an adapter's server-side state: the same dict, the other's entries
        self.durable.clear()
        self.durable.update(other.durable)
        for key, value in other.model.__dict__.items():
            if key not in self._MODEL_WIRING:
                setattr(self.model, key, value)
        for name, theirs in other.services.items():
            mine = self.services.get(name)
            if mine is None or type(mine) is not type(theirs):
                theirs._world = self
                self.services[name] = theirs
                continue
            for key, value in theirs.__dict__.items():
                if key != "_world":
                    setattr(mine, key, value)
        for name in [n for n in self.services if n not in other.services]:
            del self.services[name]
