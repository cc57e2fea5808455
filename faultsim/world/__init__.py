"""What survives a crash: external services with their ledger, and the clock."""
from .clock import WorldClock, parse_instant
from .ledger import Ledger, LedgerEntry, effect_difference
from .services import (RECEIVER_KINDS, BlindReceiver, IdempotencyConflict, KeyedReceiver,
                       QueryableReceiver, ReadOnlyReceiver, Receiver, ServiceError)
from .world import World

__all__ = ["BlindReceiver", "IdempotencyConflict", "KeyedReceiver", "Ledger", "LedgerEntry",
           "QueryableReceiver", "RECEIVER_KINDS", "ReadOnlyReceiver", "Receiver",
           "ServiceError", "World", "WorldClock", "effect_difference", "parse_instant"]
