"""The exceptions asyncache raises.

Builtins are raised where they fit: ``TypeError`` for an argument the key
cannot encode, ``ValueError`` for a bad option, the builtin ``TimeoutError``.
Everything asyncache defines itself derives from ``AsyncacheError``::

    AsyncacheError
     ├── StoreError               a store failed (a miss; one from a bug is raised)
     │    └── SchemaVersionError  a store file was written by a newer asyncache
     ├── DecodeError              a stored value is corrupt, tampered or unknown
     │    └── SignatureError      its signature does not match the secret (or it has none)
     ├── ConfigurationError       a URL, option or environment variable is invalid
     ├── ReplayMiss               mode="replay" holds no usable decision for a call
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
    "ReplayRefused",
    "SchemaVersionError",
    "SignatureError",
    "StoreError",
    "WorkerDiedError",
]


class AsyncacheError(Exception):
    """Base of every exception asyncache defines."""


class StoreError(AsyncacheError):
    """A store could not complete an operation.

    The engine makes it a miss or a skipped write, unless its ``__cause__`` is a
    sign of a bug or a version mismatch (a ``TypeError``, ``AttributeError``,
    ``NameError`` or ``ImportError``): that one is raised to the caller.

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


class SignatureError(DecodeError):
    """A stored value's signature does not match this cache's secret, or it has none.

    The value may be intact: it was written under another secret (or none).
    """


class ConfigurationError(AsyncacheError, ValueError):
    """A store URL, option or environment variable is invalid."""


# Why a replayed call has no decision to answer with, and what to do about it.
_REPLAY_REASONS = {
    "not recorded": "record it first with mode='record' (ASYNCACHE_MODE=record)",
    "signature does not match": (
        "check ASYNCACHE_SECRET: it must be the secret= the decision was recorded with"
    ),
    "corrupt": "the recorded entry does not decode; record it again",
    "expired": "the recorded entry expired; record it again with no ttl (ttl=None)",
    "store unreadable": "the recording could not be read: check the store's path or URL",
}


class ReplayMiss(AsyncacheError):
    """``mode="replay"`` holds no usable decision for a call; the model was not run.

    Replay never writes, so whatever it found is left as it was recorded.

    Attributes:
        function: the namespace of the function (or route) that was called,
            ``None`` when the door that raised it does not know one.
        digest: a short digest of the call's inputs (the first hex digits of
            the BLAKE2b of their canonical encoding), to tell missing calls apart.
        key: the 16-byte cache key that was not found.
        reason: ``"not recorded"`` (the store holds nothing under the key),
            ``"signature does not match"`` (recorded under another secret),
            ``"corrupt"``, ``"expired"`` or ``"store unreadable"`` (the read
            failed: a SQLite path with no file, a server that is down).
        detail: what the decoder or the store said, when there is more to say.
    """

    def __init__(
        self,
        function: str | None,
        digest: str,
        key: bytes,
        reason: str = "not recorded",
        detail: str | None = None,
    ) -> None:
        self.function = function
        self.digest = digest
        self.key = key
        self.reason = reason
        self.detail = detail
        where = function if function is not None else "a call"
        advice = _REPLAY_REASONS.get(reason, "")
        said = f" ({detail})" if detail else ""
        if reason == "not recorded":
            found = f"no recorded decision for {where} with inputs {digest} (key {key.hex()})"
        elif reason == "store unreadable":
            found = f"the decision for {where} with inputs {digest} (key {key.hex()}) was not read"
        else:
            found = (
                f"the recorded decision for {where} with inputs {digest} (key {key.hex()}) "
                "cannot be used"
            )
        super().__init__(f"replay: {found}: {reason}{said}; {advice}")

    def __reduce__(
        self,
    ) -> tuple[type[ReplayMiss], tuple[str | None, str, bytes, str, str | None]]:
        return ReplayMiss, (self.function, self.digest, self.key, self.reason, self.detail)

    def named(self, function: str) -> ReplayMiss:
        """The same miss, naming ``function``."""
        return ReplayMiss(function, self.digest, self.key, self.reason, self.detail)


class ReplayRefused(AsyncacheError):
    """``mode="replay"`` was asked to change the store (``forget``); replay never writes."""


class OffloadError(AsyncacheError):
    """A worker pool could not run a call."""


class WorkerDiedError(OffloadError):
    """The worker process running a call died before it answered."""
