"""The exceptions asyncache raises.

Builtins are raised where they fit: ``TypeError`` for an argument the key
cannot encode, ``ValueError`` for a bad option, the builtin ``TimeoutError``.
Everything asyncache defines itself derives from ``AsyncacheError``::

    AsyncacheError
     ├── StoreError               a store failed (the engine turns it into a miss)
     │    └── SchemaVersionError  a store file was written by a newer asyncache
     ├── DecodeError              a stored value is corrupt, tampered or unknown
     ├── ConfigurationError       a URL, option or environment variable is invalid
     ├── ReplayMiss               mode="replay" was asked for a decision it does not hold
     └── OffloadError             a worker pool failed
          └── WorkerDiedError     the worker running a call died
"""

from __future__ import annotations

__all__ = [
    "AsyncacheError",
    "ConfigurationError",
    "DecodeError",
    "OffloadError",
    "ReplayMiss",
    "SchemaVersionError",
    "StoreError",
    "WorkerDiedError",
]


class AsyncacheError(Exception):
    """Base of every exception asyncache defines."""


class StoreError(AsyncacheError):
    """A store could not complete an operation.

    Attributes:
        shard: the part of the store that failed (a Redis Cluster node's
            ``host:port``), when the store can name one and the rest of it
            still works; ``None`` when the failure may be the whole store's.
            The engine's guard keeps the rest of the store in use.
    """

    def __init__(self, *args: object, shard: str | None = None) -> None:
        super().__init__(*args)
        self.shard = shard


class SchemaVersionError(StoreError):
    """A persistent store was written by a newer, incompatible asyncache."""


class DecodeError(AsyncacheError):
    """A stored value could not be decoded or failed its HMAC."""


class ConfigurationError(AsyncacheError, ValueError):
    """A store URL, option or environment variable is invalid."""


class ReplayMiss(AsyncacheError):
    """``mode="replay"`` found no recorded decision for a call; the model was not run.

    Attributes:
        function: the namespace of the function (or route) that was called,
            ``None`` when the door that raised it does not know one.
        digest: a short digest of the call's inputs (the first hex digits of
            the BLAKE2b of their canonical encoding), to tell missing calls apart.
        key: the 16-byte cache key that was not found.
    """

    def __init__(self, function: str | None, digest: str, key: bytes) -> None:
        self.function = function
        self.digest = digest
        self.key = key
        where = function if function is not None else "a call"
        super().__init__(
            f"replay: no recorded decision for {where} with inputs {digest} "
            f"(key {key.hex()}); record it first with mode='record' (ASYNCACHE_MODE=record)"
        )

    def __reduce__(self) -> tuple[type[ReplayMiss], tuple[str | None, str, bytes]]:
        return ReplayMiss, (self.function, self.digest, self.key)

    def named(self, function: str) -> ReplayMiss:
        """The same miss, naming ``function``."""
        return ReplayMiss(function, self.digest, self.key)


class OffloadError(AsyncacheError):
    """A worker pool could not run a call."""


class WorkerDiedError(OffloadError):
    """The worker process running a call died before it answered."""
