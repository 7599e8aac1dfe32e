"""The exceptions asyncache raises.

Builtins are raised where they fit: ``TypeError`` for an argument the key
cannot encode, ``ValueError`` for a bad option, the builtin ``TimeoutError``.
Everything asyncache defines itself derives from ``AsyncacheError``::

    AsyncacheError
     ├── StoreError               a store failed (the engine turns it into a miss)
     │    └── SchemaVersionError  a store file was written by a newer asyncache
     ├── DecodeError              a stored value is corrupt, tampered or unknown
     ├── ConfigurationError       a URL, option or environment variable is invalid
     └── OffloadError             a worker pool failed
          └── WorkerDiedError     the worker running a call died
"""

from __future__ import annotations

__all__ = [
    "AsyncacheError",
    "ConfigurationError",
    "DecodeError",
    "OffloadError",
    "SchemaVersionError",
    "StoreError",
    "WorkerDiedError",
]


class AsyncacheError(Exception):
    """Base of every exception asyncache defines."""


class StoreError(AsyncacheError):
    """A store could not complete an operation."""


class SchemaVersionError(StoreError):
    """A persistent store was written by a newer, incompatible asyncache."""


class DecodeError(AsyncacheError):
    """A stored value could not be decoded or failed its HMAC."""


class ConfigurationError(AsyncacheError, ValueError):
    """A store URL, option or environment variable is invalid."""


class OffloadError(AsyncacheError):
    """A worker pool could not run a call."""


class WorkerDiedError(OffloadError):
    """The worker process running a call died before it answered."""
