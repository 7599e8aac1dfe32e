"""What a model adapter offers: a fingerprint and a synchronous batch prediction.

``OnnxModel`` and ``TorchModel`` implement ``PredictionModel``; so can any user
class. Nothing here imports an ML library.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

__all__ = ["PredictionModel"]

# 16 bytes, as for cache keys: a collision would need 2**64 distinct models.
_DIGEST_SIZE = 16


@runtime_checkable
class PredictionModel(Protocol):
    """A model that answers a batch of items at once, identified by its fingerprint."""

    @property
    def fingerprint(self) -> str:
        """What identifies the model's decisions: derived from its weights, or pinned."""
        ...

    def predict_batch(self, items: Sequence[Any]) -> list[Any]:
        """One answer per item, in order; safe to call from several threads at once."""
        ...


def new_digest() -> hashlib.blake2b:
    """A fresh hasher for fingerprints (BLAKE2b, 16 bytes, like the cache key)."""
    return hashlib.blake2b(digest_size=_DIGEST_SIZE)
