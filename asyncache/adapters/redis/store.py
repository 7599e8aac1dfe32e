"""RedisStore: the DecisionStore protocol on Redis or Redis Cluster (see the package's doc)."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from typing import Any, Self

from redis.asyncio.cluster import RedisCluster
from redis.exceptions import RedisError

from ...errors import ConfigurationError
from ...stores.protocol import Entry
from .gate import Gate, store_error
from .layout import EXPIRES, HEADER, NO_EXPIRY_HEADER, pack, pxat, unpack
from .leases import LeaseKeys
from .scan import count_entries, describe_prefix, unlink_all
from .scripts import RENEW, REPLACE
from .url import DEFAULT_PREFIX, Client, connect

__all__ = ["RedisStore"]


class RedisStore:
    """A ``DecisionStore`` (and ``LeaseStore``) on Redis or Redis Cluster.

    Every key it touches starts with ``prefix``; several stores (or apps) can
    share a database under different prefixes, as long as no prefix starts
    with another (``app:`` would own the keys of ``app:v2:``). A hit is one
    ``GET``, a batch one ``MGET`` (one per hash slot on a cluster), an ``add``
    one ``SET NX GET``. Needs Redis 7.0 or newer. Redis errors are raised as
    ``StoreError``.

    Args:
        client: a ``redis.asyncio.Redis`` or ``redis.asyncio.cluster.RedisCluster``
            with ``decode_responses=False``. ``from_url`` builds one with
            timeouts, a bounded pool and retries.
        prefix: what every key starts with; not empty.
        max_in_flight: most commands at once (callers beyond wait for a slot,
            up to ``pool_timeout`` seconds); ``None`` leaves it to the client.
        pool_timeout: seconds to wait for a slot; ``None`` waits as long as it takes.
        close_client: ``aclose()`` also closes ``client`` (``from_url`` sets it).

    ``enforces_timeouts`` is ``False``: the engine times each call with its
    ``store_timeout``. The store's own socket, connect and pool timeouts, with
    retries, can add up to several seconds, more than a cache should wait.
    Set it to ``True`` (saving a timer, about 8 us a call on a slow machine)
    only when those bounds are tighter than the cache's ``store_timeout``.

    Raises:
        ConfigurationError: the prefix is empty or the client decodes responses.
    """

    def __init__(
        self,
        client: Client,
        *,
        prefix: str | bytes = DEFAULT_PREFIX,
        max_in_flight: int | None = None,
        pool_timeout: float | None = None,
        close_client: bool = False,
    ) -> None:
        raw_prefix = prefix.encode() if isinstance(prefix, str) else bytes(prefix)
        if not raw_prefix:
            raise ConfigurationError(
                "RedisStore prefix must not be empty: clear() would drop every key in the database"
            )
        if client.get_encoder().decode_responses:
            raise ConfigurationError("RedisStore needs a client with decode_responses=False")
        self.client = client
        self.prefix = raw_prefix
        self.cluster = isinstance(client, RedisCluster)
        self._close_client = close_client
        self.enforces_timeouts = False
        """Every call ends within the store's own timeouts (see ``DecisionStore``)."""
        prepare = client.initialize if isinstance(client, RedisCluster) else None
        self._gate = Gate(max_in_flight, pool_timeout, prepare)
        self._execute: Callable[..., Any] = client.execute_command
        self._renew_script = client.register_script(RENEW)
        self._replace_script = client.register_script(REPLACE)
        self._leases = LeaseKeys(client, self._gate, raw_prefix, self._pipeline)
        self._closed = False
        self._reads = 0
        self._hits = 0
        self._writes = 0
        self._conflicts = 0
        self._replaced = 0

    @classmethod
    def from_url(
        cls,
        url: str,
        *,
        prefix: str | None = None,
        socket_timeout: float | None = None,
        socket_connect_timeout: float | None = None,
        max_connections: int | None = None,
        retries: int | None = None,
        **options: Any,
    ) -> Self:
        """Open a store from a Redis URL, with timeouts, a bounded pool and retries.

        Schemes: ``redis://``, ``rediss://`` (TLS), ``unix:///path``,
        ``redis+cluster://host:port,host:port,...`` and ``rediss+cluster://``.
        Options go in the query (``?prefix=app:&socket_timeout=0.5``) or as
        keyword arguments, which win. Besides those below: ``pool_timeout``
        (seconds to wait for a free connection; default ``socket_timeout``),
        ``backoff_base`` and ``backoff_cap`` (retry backoff in seconds; 0.01
        and 0.25), ``health_check_interval``, ``client_name``, ``db`` (or the
        path: ``redis://host/2``), and for TLS ``ssl_cert_reqs``
        (none/optional/required), ``ssl_ca_certs``, ``ssl_certfile``,
        ``ssl_keyfile``, ``ssl_check_hostname``.

        Args:
            url: where Redis is; a user and password may be in it.
            prefix: what every key starts with (default ``asyncache:``).
            socket_timeout: seconds a command may take (default 2).
            socket_connect_timeout: seconds connecting may take (default 1).
            max_connections: most commands in flight, and connections per node
                (default 64; one more connection serves the lease listener).
            retries: retries after a connection error, with exponential backoff
                and jitter (default 2). Timeouts are not retried: a slow server
                stays slow. The engine's ``store_timeout`` still bounds each
                call as a whole.
            **options: the other options named above.

        Raises:
            ConfigurationError: the URL or an option is invalid.
        """
        connected = connect(
            url,
            {
                "prefix": prefix,
                "socket_timeout": socket_timeout,
                "socket_connect_timeout": socket_connect_timeout,
                "max_connections": max_connections,
                "retries": retries,
                **options,
            },
        )
        return cls(
            connected.client,
            prefix=connected.prefix,
            max_in_flight=connected.max_connections,
            pool_timeout=connected.pool_timeout,
            close_client=True,
        )

    @property
    def max_in_flight(self) -> int | None:
        """Most commands at once; ``None`` when the client alone bounds them."""
        return self._gate.limit

    @property
    def pool_timeout(self) -> float | None:
        """Seconds a command waits for a slot; ``None`` to wait as long as it takes."""
        return self._gate.timeout

    def __repr__(self) -> str:
        kind = "cluster" if self.cluster else "redis"
        return f"RedisStore({kind}, prefix={self.prefix!r})"

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    # -- the DecisionStore protocol ---------------------------------------

    async def get(self, key: bytes) -> Entry | None:
        """Return the live entry under ``key``, or ``None``; one ``GET``."""
        # The hot path: the gate's free path and the error mapping inline.
        gate = self._gate
        if not gate.enter_now():
            await gate.wait()
        try:
            raw = await self._execute("GET", self.prefix + key)
        except (RedisError, OSError) as exc:
            raise store_error(exc) from exc
        finally:
            gate.leave()
        self._reads += 1
        if raw is None:
            return None
        entry = unpack(raw, time.time())
        if entry is not None:
            self._hits += 1
        return entry

    async def get_many(self, keys: Sequence[bytes]) -> list[Entry | None]:
        """Return the live entry (or ``None``) per key; one ``MGET`` (per slot on a cluster)."""
        if not keys:
            return []
        prefix = self.prefix
        names = [prefix + key for key in keys]
        async with self._gate:
            if self.cluster:
                raws = await self.client.mget_nonatomic(names)  # type: ignore[union-attr]
            else:
                raws = await self._execute("MGET", *names)
        now = time.time()
        entries = [None if raw is None else unpack(raw, now) for raw in raws]
        self._reads += len(keys)
        self._hits += sum(entry is not None for entry in entries)
        return entries

    async def add(self, key: bytes, value: bytes, expires_at: float | None) -> Entry:
        """Store ``value`` unless a live entry exists; return the winner. One round trip."""
        name = self.prefix + key
        async with self._gate:
            if expires_at is None:
                old = await self._execute(
                    "SET", name, NO_EXPIRY_HEADER + value, "NX", "GET", get=True
                )
            elif expires_at > time.time():
                stored = HEADER.pack(EXPIRES, expires_at) + value
                old = await self._execute(
                    "SET", name, stored, "NX", "PXAT", pxat(expires_at), "GET", get=True
                )
            else:
                # Already expired: nothing to store, but a live entry there still wins.
                old = await self._execute("GET", name)
        self._writes += 1
        return await self._settle(name, value, expires_at, old)

    async def add_many(self, items: Sequence[tuple[bytes, bytes, float | None]]) -> list[Entry]:
        """``add`` for each item, in order, in one pipeline; return the winners."""
        if not items:
            return []
        now = time.time()
        pipe = self._pipeline()
        prefix = self.prefix
        for key, value, expires_at in items:
            name = prefix + key
            if expires_at is None:
                pipe.execute_command("SET", name, NO_EXPIRY_HEADER + value, "NX", "GET", get=True)
            elif expires_at > now:
                stored = HEADER.pack(EXPIRES, expires_at) + value
                pipe.execute_command(
                    "SET", name, stored, "NX", "PXAT", pxat(expires_at), "GET", get=True
                )
            else:
                pipe.execute_command("GET", name)
        async with self._gate:
            olds = await pipe.execute()
        self._writes += len(items)
        return [
            await self._settle(prefix + key, value, expires_at, old)
            for (key, value, expires_at), old in zip(items, olds, strict=True)
        ]

    async def renew(self, key: bytes, expires_at: float | None) -> bool:
        """Move a live entry's expiry (header and Redis's own); ``False`` when there is none."""
        if expires_at is None:
            args: list[bytes | int] = [NO_EXPIRY_HEADER, b""]
        else:
            args = [HEADER.pack(EXPIRES, expires_at), pxat(expires_at)]
        args.append(math.floor(time.time() * 1000))
        async with self._gate:
            renewed = await self._renew_script(keys=[self.prefix + key], args=args)
        return bool(renewed)

    async def delete(self, key: bytes) -> None:
        """Drop the entry under ``key`` if there is one."""
        async with self._gate:
            await self._execute("UNLINK", self.prefix + key)

    async def prune(self) -> int:
        """Nothing to do: Redis expires keys itself. Returns 0."""
        return 0

    async def count(self) -> int:
        """How many entries this prefix holds (on a cluster, over every primary).

        A ``SCAN``, so O(keys in the database): for tools, not hot paths.
        """
        async with self._gate:
            return await count_entries(self.client, self.prefix)

    async def clear(self) -> None:
        """Drop every key under this prefix (entries and leases), and nothing else.

        ``SCAN MATCH prefix*`` (every primary of a cluster) and ``UNLINK`` in
        chunks; never ``FLUSHDB``.
        """
        async with self._gate:
            await unlink_all(self.client, self.prefix)

    async def aclose(self) -> None:
        """Stop the lease listener, and close the client when the store owns it; idempotent."""
        if self._closed:
            return
        self._closed = True
        await self._leases.aclose()
        if self._close_client:
            await self.client.aclose()

    def stats(self) -> dict[str, int]:
        """Counters since the store opened: keys read, hits, writes, conflicts and more."""
        return {
            "reads": self._reads,
            "hits": self._hits,
            "writes": self._writes,
            "conflicts": self._conflicts,
            "stale_replaced": self._replaced,
            "in_flight": self._gate.busy,
            "lease_notifications": self._leases.notified,
            "lease_waiters": self._leases.waiting(),
        }

    async def describe(self) -> dict[str, Any]:
        """What this prefix holds, for ``asyncache stats``: entries, bytes, expiries, leases.

        Keys: ``kind`` (``"redis"`` or ``"cluster"``), ``prefix``, ``entries``
        (all ``live``; ``expired`` is 0, as Redis drops expired keys itself),
        ``without_expiry``, ``stored_bytes`` (values with their 9-byte
        header), ``next_expiry`` and ``last_expiry`` (Unix seconds, or
        ``None``), ``leases``, and ``max_in_flight``. One ``SCAN`` with
        ``STRLEN`` and ``PTTL`` pipelined: O(keys in the database).

        Raises:
            StoreError: Redis failed.
        """
        async with self._gate:
            facts = await describe_prefix(self.client, self.prefix, self._pipeline)
        return {
            "kind": "cluster" if self.cluster else "redis",
            "prefix": self.prefix.decode(errors="backslashreplace"),
            **facts,
            "max_in_flight": self.max_in_flight,
        }

    # -- the LeaseStore capability ----------------------------------------

    async def acquire_lease(self, key: bytes, token: bytes, ttl: float) -> bool:
        """Take the lease on ``key`` for ``ttl`` seconds unless another holds it.

        ``SET <prefix>lease:<key> token NX PX ms``.
        """
        return await self._leases.acquire(key, token, ttl)

    async def release_lease(self, key: bytes, token: bytes) -> None:
        """Drop the lease if ``token`` still holds it, and wake whoever waits on ``key``.

        Compare-and-delete in a script, then ``PUBLISH`` the key.
        """
        await self._leases.release(key, token)

    async def wait_for_entry(self, key: bytes, timeout: float) -> Entry | None:  # noqa: ASYNC109
        """Wait up to ``timeout`` seconds for an entry under ``key`` to appear.

        Woken by the holder's ``release_lease`` (pub/sub); polls with
        exponential backoff too, for a lost message or a listener that is
        down. Returns ``None`` at the timeout, and as soon as there is neither
        an entry nor a lease (the holder gave up, died, or its lease expired):
        nobody is computing ``key`` then, and the caller should.
        """
        return await self._leases.wait_for_entry(key, timeout)

    # -- internals ----------------------------------------------------------

    def _pipeline(self) -> Any:
        if self.cluster:
            return self.client.pipeline()
        return self.client.pipeline(transaction=False)

    async def _settle(
        self, name: bytes, value: bytes, expires_at: float | None, old: bytes | None
    ) -> Entry:
        """The winner of an ``add`` that found ``old`` under ``name``."""
        if old is None:
            return Entry(value, expires_at)
        now = time.time()
        existing = unpack(old, now)
        if existing is not None:
            self._conflicts += 1
            return existing
        if expires_at is not None and expires_at <= now:
            return Entry(value, expires_at)
        return await self._replace_stale(name, old, value, expires_at)

    async def _replace_stale(
        self, name: bytes, old: bytes, value: bytes, expires_at: float | None
    ) -> Entry:
        """Store over an entry that expired by this clock but not yet by Redis's.

        Happens only when this host's clock runs ahead of the server's. A
        compare-and-set, so an entry another writer stored meanwhile still wins.
        """
        stored = pack(value, expires_at)
        expiry_ms: bytes | int = b"" if expires_at is None else pxat(expires_at)
        for _ in range(3):
            async with self._gate:
                current = await self._replace_script(keys=[name], args=[old, stored, expiry_ms])
            if current is None:
                self._replaced += 1
                return Entry(value, expires_at)
            existing = unpack(current, time.time())
            if existing is not None:
                self._conflicts += 1
                return existing
            old = current
        return Entry(value, expires_at)
