"""Stores: the protocol, the URL registry, and the stores that need nothing outside.

``asyncache.adapters`` holds the stores that talk to outside systems (SQLite,
Redis); ``asyncache.testing`` the contract suite every store must pass.
"""

from .memory import ENTRY_SCOPE, MemoryStore, entries_of
from .protocol import DecisionStore, Entry, EntryScan, Forgetting, LeaseStore, is_live
from .registry import open_store, register_store
from .tiered import TieredStore

__all__ = [
    "ENTRY_SCOPE",
    "DecisionStore",
    "Entry",
    "EntryScan",
    "Forgetting",
    "LeaseStore",
    "MemoryStore",
    "TieredStore",
    "entries_of",
    "is_live",
    "open_store",
    "register_store",
]
