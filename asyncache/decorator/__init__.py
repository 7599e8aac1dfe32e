"""The decorator: ``@cached_prediction`` and what it builds.

Its modules are private; the names below are the API, also exported from
``asyncache``:

- ``_decorator``: ``cached_prediction``, ``CachedPrediction``, ``BoundPrediction``,
  ``CachedStream``, ``BoundStream``;
- ``_streaming``: streamed results (async generators) through the engine's stream door;
- ``_binding``: binding a call's arguments to the signature, and methods;
- ``_batching``: micro-batching (``BatchedPrediction``) and its batch path;
- ``_returns``: typed returns (a miss, a hit and a bypass give the same types).
"""

from ._batching import BatchedPrediction
from ._binding import MethodWarning
from ._decorator import (
    BoundPrediction,
    BoundStream,
    CachedPrediction,
    CachedStream,
    cached_prediction,
)

__all__ = [
    "BatchedPrediction",
    "BoundPrediction",
    "BoundStream",
    "CachedPrediction",
    "CachedStream",
    "MethodWarning",
    "cached_prediction",
]
