"""The store contract: ``DecisionStore``, ``Entry`` and ``open_store(url)``.

A store maps 16-byte keys to encoded decisions with an optional expiry in Unix
seconds. Its ``add`` keeps an existing unexpired entry and returns it, so the
first decision stored wins across tasks, processes and machines.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import NamedTuple, Protocol, runtime_checkable

from .errors import ConfigurationError

__all__ = ["DecisionStore", "Entry", "LeaseStore", "is_live", "open_store"]


class Entry(NamedTuple):
    """One stored decision: the encoded value and when it expires (Unix seconds)."""

    value: bytes
    expires_at: float | None


def is_live(expires_at: float | None, now: float | None = None) -> bool:
    """Whether an entry with this expiry may still be returned."""
    return expires_at is None or expires_at > (time.time() if now is None else now)


@runtime_checkable
class DecisionStore(Protocol):
    """What the engine needs from a store.

    Every method is safe under concurrent use from one event loop; persistent
    stores are also safe across processes. Expired entries are never returned.

    A store may also have an ``enforces_timeouts`` attribute (optional, not a
    member of the protocol). ``True`` promises that every call ends, returning
    or raising, within bounds the store keeps itself (a ``RedisStore`` from
    ``from_url``: socket, connect and pool timeouts); the engine then does not
    time its calls with ``store_timeout``, which saves a timer on every call.
    A cache reads it once, when it starts using the store.
    """

    async def get(self, key: bytes) -> Entry | None:
        """Return the live entry under ``key``, or ``None``."""
        ...

    async def get_many(self, keys: Sequence[bytes]) -> list[Entry | None]:
        """Return the live entry (or ``None``) for each key, in order."""
        ...

    async def add(self, key: bytes, value: bytes, expires_at: float | None) -> Entry:
        """Store ``value`` unless a live entry exists; return whichever is stored."""
        ...

    async def add_many(self, items: Sequence[tuple[bytes, bytes, float | None]]) -> list[Entry]:
        """``add`` for each item, in order; return the winners."""
        ...

    async def renew(self, key: bytes, expires_at: float | None) -> bool:
        """Move a live entry's expiry; ``False`` when there is none."""
        ...

    async def prune(self) -> int:
        """Drop expired entries; return how many were dropped (when known)."""
        ...

    async def count(self) -> int:
        """How many entries the store holds (expired ones may be counted)."""
        ...

    async def clear(self) -> None:
        """Drop every entry this store owns."""
        ...

    async def aclose(self) -> None:
        """Release connections and background work; safe to call twice."""
        ...


@runtime_checkable
class LeaseStore(Protocol):
    """Optional capability: short cross-process leases on keys being computed.

    A lease says "this process is computing that key"; others wait for the
    decision instead of running the model again.
    """

    async def acquire_lease(self, key: bytes, token: bytes, ttl: float) -> bool:
        """Take the lease on ``key`` for ``ttl`` seconds unless another holds it."""
        ...

    async def release_lease(self, key: bytes, token: bytes) -> None:
        """Drop the lease if ``token`` still holds it."""
        ...

    async def wait_for_entry(self, key: bytes, timeout: float) -> Entry | None:  # noqa: ASYNC109
        """Wait up to ``timeout`` seconds for an entry under ``key`` to appear."""
        ...


def open_store(url: str) -> DecisionStore:
    """Open a store from a URL.

    Accepts ``memory://``, ``sqlite:///path``, ``redis://``, ``rediss://``,
    ``redis+cluster://`` and ``tiered+<any of those>``; query parameters are
    the store's options (``memory://?max_entries=1000``).

    Raises:
        ConfigurationError: the URL's scheme or options are not understood.
        ImportError: the store needs an extra that is not installed.
    """
    scheme, sep, _rest = url.partition("://")
    if not sep:
        raise ConfigurationError(
            f"not a store URL: {url!r} (expected e.g. memory:// or sqlite:///path)"
        )
    scheme = scheme.lower()
    if scheme.startswith("tiered+"):
        from .memory import MemoryStore
        from .tiered import TieredStore

        l2_url, l1 = _split_l1_options(url[len("tiered+") :])
        # Absent means TieredStore's default (60 s), not "no cap"; l1_ttl= (empty) is no cap.
        ttl_option = l1.pop("ttl", None)
        l1_ttl = 60.0 if ttl_option is None else _float_option(ttl_option, "l1_ttl")
        return TieredStore(MemoryStore(**_memory_options(l1)), open_store(l2_url), l1_ttl=l1_ttl)
    if scheme == "memory":
        from .memory import MemoryStore

        return MemoryStore(**_memory_options(_query(url)))
    if scheme == "sqlite":
        from .adapters.sqlite import SQLiteStore

        return SQLiteStore.from_url(url)
    if scheme in ("redis", "rediss", "redis+cluster", "rediss+cluster", "unix"):
        from .adapters.redis import RedisStore

        return RedisStore.from_url(url)
    raise ConfigurationError(
        f"unknown store scheme {scheme!r} in {url!r}; "
        "use memory://, sqlite:///path, redis://, rediss://, redis+cluster:// or tiered+..."
    )


def _query(url: str) -> dict[str, str]:
    """A URL's query options."""
    from urllib.parse import parse_qsl, urlsplit

    return dict(parse_qsl(urlsplit(url).query))


def _split_l1_options(url: str) -> tuple[str, dict[str, str]]:
    """Take the ``l1_*`` query options off a tiered URL; the rest stays with L2."""
    from urllib.parse import parse_qsl, urlsplit  # here: it costs `import asyncache` 2 ms

    parts = urlsplit(url)
    l1: dict[str, str] = {}
    rest: list[tuple[str, str]] = []
    for name, value in parse_qsl(parts.query, keep_blank_values=True):
        if name.startswith("l1_"):
            l1[name[3:]] = value
        else:
            rest.append((name, value))
    query = "&".join(f"{name}={value}" for name, value in rest)
    # Slice rather than geturl(): geturl() drops an empty netloc, which turns
    # sqlite:////abs/path into sqlite://abs/path (a host) and sqlite:///rel into sqlite:/rel.
    base = url.partition("?")[0]
    return (f"{base}?{query}" if query else base), l1


def _float_option(value: str | None, name: str) -> float | None:
    if value is None or value == "":
        return None
    try:
        return float(value)
    except ValueError:
        raise ConfigurationError(f"store option {name}={value!r} is not a number") from None


def _memory_options(options: dict[str, str]) -> dict[str, int]:
    """Parse ``max_entries``, ``max_bytes`` and ``max_entry_bytes`` for a MemoryStore."""
    known = {"max_entries", "max_bytes", "max_entry_bytes"}
    unknown = set(options) - known
    if unknown:
        raise ConfigurationError(
            f"unknown memory store option(s) {sorted(unknown)}; known: {sorted(known)}"
        )
    parsed: dict[str, int] = {}
    for name, value in options.items():
        try:
            parsed[name] = int(value)
        except ValueError:
            raise ConfigurationError(f"store option {name}={value!r} is not an integer") from None
    return parsed
