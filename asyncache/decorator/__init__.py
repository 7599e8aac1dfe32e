"""The decorator: ``@cached_prediction`` and what it builds.

Its modules are private; the names below are the API, also exported from
``asyncache``:

- ``_decorator``: ``cached_prediction``, ``CachedPrediction``, ``BoundPrediction``;
- ``_binding``: binding a call's arguments to the signature, and methods;
- ``_batching``: micro-batching (``BatchedPrediction``) and its batch path;
- ``_returns``: typed returns (a miss, a hit and a bypass give the same types).
"""

from ._batching import BatchedPrediction
from ._binding import MethodWarning
from ._decorator import BoundPrediction, CachedPrediction, cached_prediction

__all__ = [
    "BatchedPrediction",
    "BoundPrediction",
    "CachedPrediction",
    "MethodWarning",
    "cached_prediction",
]
