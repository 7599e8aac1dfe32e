"""asyncache: asyncio-native caching for model predictions.

A hit skips the model's forward pass; a miss runs the model once however many
callers ask at the same moment; every replica that shares a store gives the
same answer for the same input.
"""

# `import typing`, not `from typing import ...`: asyncache.Any would look like public API.
import typing

from .cache import DecisionCache
from .codec import Decoded
from .decorator import (
    BatchedPrediction,
    BoundPrediction,
    BoundStream,
    CachedPrediction,
    CachedStream,
    MethodWarning,
    cached_prediction,
)
from .engine import StoreCheck, TrustReport
from .errors import (
    AsyncacheError,
    ConfigurationError,
    DecodeError,
    OffloadError,
    ReplayMiss,
    ReplayRefused,
    SchemaVersionError,
    SignatureError,
    StoreError,
    WorkerDiedError,
)
from .keys import KEY_VERSION, make_key
from .stores import (
    DecisionStore,
    Entry,
    Forgetting,
    LeaseStore,
    MemoryStore,
    open_store,
    register_store,
)

if typing.TYPE_CHECKING:
    from .offload import DeviceOffload, Offload, ProcessOffload, ThreadOffload

__version__ = "0.1.0"

# Imported on first use: most programs never offload, and `import asyncache` stays fast.
_LAZY = {
    "DeviceOffload": "offload",
    "Offload": "offload",
    "ProcessOffload": "offload",
    "ThreadOffload": "offload",
}


def __getattr__(name: str) -> typing.Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'asyncache' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


__all__ = [
    "KEY_VERSION",
    "AsyncacheError",
    "BatchedPrediction",
    "BoundPrediction",
    "BoundStream",
    "CachedPrediction",
    "CachedStream",
    "ConfigurationError",
    "DecisionCache",
    "DecisionStore",
    "DecodeError",
    "Decoded",
    "DeviceOffload",
    "Entry",
    "Forgetting",
    "LeaseStore",
    "MemoryStore",
    "MethodWarning",
    "Offload",
    "OffloadError",
    "ProcessOffload",
    "ReplayMiss",
    "ReplayRefused",
    "SchemaVersionError",
    "SignatureError",
    "StoreCheck",
    "StoreError",
    "ThreadOffload",
    "TrustReport",
    "WorkerDiedError",
    "__version__",
    "cached_prediction",
    "make_key",
    "open_store",
    "register_store",
]
