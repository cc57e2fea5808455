"""What survives a crash: external services with their ledger, and the clock.

Layer 2 (the simulated world): may import the bottom layer and `model/`, never the
pipeline, a backend or a front end (nothing under `real/`: the throwaway Redis server
lives there, `faultsim.real.redis_server`). Its errors (ServiceError, ...) are what the
agent meets, outside faultsim's own tree in errors.py."""
from .clock import WorldClock, parse_instant
from .ledger import Ledger, LedgerEntry, effect_difference
from .services import (RECEIVER_KINDS, BlindReceiver, IdempotencyConflict, KeyedReceiver,
                       QueryableReceiver, ReadOnlyReceiver, Receiver, ServiceError)
from .world import World

__all__ = ["BlindReceiver", "IdempotencyConflict", "KeyedReceiver", "Ledger", "LedgerEntry",
           "QueryableReceiver", "RECEIVER_KINDS", "ReadOnlyReceiver", "Receiver",
           "ServiceError", "World", "WorldClock", "effect_difference", "parse_instant"]
