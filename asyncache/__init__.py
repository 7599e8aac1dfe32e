"""asyncache: asyncio-native caching for model predictions.

A hit skips the model's forward pass; a miss runs the model once however many
callers ask at the same moment; every replica that shares a store gives the
same answer for the same input.
"""

from .cache import DecisionCache
from .codec import Decoded
from .decorator import CachedPrediction, cached_prediction
from .errors import (
    AsyncacheError,
    ConfigurationError,
    DecodeError,
    OffloadError,
    SchemaVersionError,
    StoreError,
    WorkerDiedError,
)
from .keys import KEY_VERSION, make_key
from .memory import MemoryStore
from .store import DecisionStore, Entry, LeaseStore, open_store

__version__ = "0.1.0"

__all__ = [
    "KEY_VERSION",
    "AsyncacheError",
    "CachedPrediction",
    "ConfigurationError",
    "DecisionCache",
    "DecisionStore",
    "DecodeError",
    "Decoded",
    "Entry",
    "LeaseStore",
    "MemoryStore",
    "OffloadError",
    "SchemaVersionError",
    "StoreError",
    "WorkerDiedError",
    "__version__",
    "cached_prediction",
    "make_key",
    "open_store",
]
