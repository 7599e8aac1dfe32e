"""RedisStore: decisions in Redis or Redis Cluster, shared by a fleet.

Layout: everything the store touches starts with its prefix (``asyncache:`` by
default), so ``clear`` and ``count`` never reach another application's keys::

    <prefix><key>           a decision: a 9-byte header, then the value
    <prefix>lease:<key>     a lease token (``acquire_lease``)
    <prefix>lease:released  the pub/sub channel a released lease is announced on

The header is a tag byte and the expiry as a big-endian IEEE double (Unix
seconds; the tag says whether there is one). Keeping the expiry beside the
value is what makes a hit one plain ``GET`` (and a batch one ``MGET``): asking
Redis for the expiry instead (``PEXPIRETIME``) would cost a pipeline or a
script on every hit, and a hit is what this store is for. Redis expires the key
itself at the same instant (``PXAT``), so nothing needs pruning; ``renew``
rewrites both atomically. A value that does not start with a header (written by
something else) is handed to the engine whole, whose decoder rejects it: the
entry is then counted as corrupt and deleted.

``add`` is one ``SET key value NX PXAT ms GET`` (Redis >= 7.0): it stores the
value unless the key exists, and returns what was there, header included, so
the winner and its expiry come back in the same round trip.

On a cluster, keys spread over the hash slots as they fall: no hash tags,
since nothing needs two keys in one slot (every script touches one key, and a
batch is one ``MGET`` per slot, sent to each owner in one pipeline round).
``count`` and ``clear`` scan every primary.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import struct
import time
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from types import TracebackType
from typing import Any, Self

try:
    from redis.asyncio.client import PubSub
    from redis.asyncio.cluster import RedisCluster
    from redis.exceptions import RedisClusterException, RedisError
except ImportError as exc:  # pragma: no cover - exercised without the extra
    raise ImportError("RedisStore needs: pip install 'asyncache-ml[redis]'") from exc

from ..errors import ConfigurationError, StoreError
from ..stores.protocol import Entry
from ._redis_url import DEFAULT_PREFIX, Client, connect, redact

__all__ = ["RedisStore"]

_HEADER = struct.Struct(">Bd")
_HEADER_SIZE = _HEADER.size  # 9
_NO_EXPIRY = 0xA0
_EXPIRES = 0xA1
_NO_EXPIRY_HEADER = _HEADER.pack(_NO_EXPIRY, 0.0)

_LEASE = b"lease:"
_RELEASED = b"lease:released"

# Renew: rewrite the header's expiry and Redis's own together, for a live entry only.
# ARGV: the new header, the new PXAT in ms ("" for none), the caller's clock in ms.
_RENEW = """
local head = redis.call('GETRANGE', KEYS[1], 0, 8)
if string.len(head) < 9 then return 0 end
local tag = string.byte(head, 1)
if tag == 0xA1 then
  if struct.unpack('>d', head, 2) * 1000 <= tonumber(ARGV[3]) then return 0 end
elseif tag ~= 0xA0 then
  return 0
end
redis.call('SETRANGE', KEYS[1], 0, ARGV[1])
if ARGV[2] == '' then
  redis.call('PERSIST', KEYS[1])
else
  redis.call('PEXPIREAT', KEYS[1], ARGV[2])
end
return 1
"""

# Replace an entry that expired by our clock but not yet by Redis's, unless
# another writer replaced it first; returns what is there instead, or nil.
_REPLACE = """
local current = redis.call('GET', KEYS[1])
if current and current ~= ARGV[1] then return current end
if ARGV[3] == '' then
  redis.call('SET', KEYS[1], ARGV[2])
else
  redis.call('SET', KEYS[1], ARGV[2], 'PXAT', ARGV[3])
end
return false
"""

# Compare-and-delete a lease, then tell waiters to look again.
_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('DEL', KEYS[1]) end
redis.call('PUBLISH', ARGV[2], ARGV[3])
return 1
"""


_POLL_FIRST = 0.005
_POLL_MAX = 0.25


def _pack(value: bytes, expires_at: float | None) -> bytes:
    if expires_at is None:
        return _NO_EXPIRY_HEADER + value
    return _HEADER.pack(_EXPIRES, expires_at) + value


def _unpack(raw: bytes, now: float) -> Entry | None:
    """The entry ``raw`` holds, ``None`` when it expired."""
    if len(raw) >= _HEADER_SIZE:
        tag, expires_at = _HEADER.unpack_from(raw)
        if tag == _EXPIRES:
            return Entry(raw[_HEADER_SIZE:], expires_at) if expires_at > now else None
        if tag == _NO_EXPIRY:
            return Entry(raw[_HEADER_SIZE:], None)
    # Not written by a RedisStore: the engine's decoder rejects it, counts and deletes it.
    return Entry(raw, None)


def _pxat(expires_at: float) -> int:
    # Rounded up, so Redis never drops a key before its header says it expired.
    return math.ceil(expires_at * 1000)


def _glob_escape(prefix: bytes) -> bytes:
    for special in (b"\\", b"*", b"?", b"[", b"]"):
        prefix = prefix.replace(special, b"\\" + special)
    return prefix


class _Gate:
    """At most ``limit`` commands in flight; the others wait up to ``timeout`` seconds.

    A semaphore whose free path is a counter (no lock, no await), so a hit
    pays nothing while a connection is free; a freed slot passes straight to
    the longest waiter. ``prepare`` runs once, alone, before the first command
    (a cluster client must learn the topology before concurrent use: redis-py
    8.1 breaks connections when many commands race its lazy initialization).
    As a context manager the gate also turns Redis errors into ``StoreError``.
    """

    __slots__ = ("_lock", "_prepare", "_waiters", "busy", "limit", "ready", "timeout")

    def __init__(
        self,
        limit: int | None,
        timeout: float | None,
        prepare: Callable[[], Awaitable[object]] | None = None,
    ) -> None:
        if limit is not None and limit <= 0:
            raise ConfigurationError(f"max_in_flight must be positive or None, got {limit!r}")
        self.limit = limit
        self.timeout = timeout
        self.busy = 0
        self.ready = prepare is None
        self._prepare = prepare
        self._lock: asyncio.Lock | None = None
        self._waiters: deque[asyncio.Future[None]] = deque()

    def enter_now(self) -> bool:
        """Take a slot if one is free, without waiting."""
        if self.ready and (self.limit is None or self.busy < self.limit):
            self.busy += 1
            return True
        return False

    async def wait(self) -> None:
        """Wait for a slot (preparing the client first if it is not ready).

        Raises:
            StoreError: none came free within ``timeout``, or preparing failed.
        """
        if not self.ready:
            await self.ensure_ready()
            if self.enter_now():
                return
        waiter = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            async with asyncio.timeout(self.timeout):
                await waiter
        except BaseException as exc:
            if waiter.done() and not waiter.cancelled():
                self.leave()  # a slot was handed over that will not be used
            else:
                waiter.cancel()
            if isinstance(exc, TimeoutError):
                raise StoreError(
                    f"redis: no connection came free within {self.timeout}s "
                    f"({self.limit} commands in flight)"
                ) from None
            raise

    async def ensure_ready(self) -> None:
        """Run ``prepare`` unless it ran; concurrent callers wait for the one running it."""
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            if self.ready or self._prepare is None:
                return
            try:
                await self._prepare()
            except (RedisError, OSError) as exc:
                raise _store_error(exc) from exc
            self.ready = True

    def leave(self) -> None:
        """Give the slot back, to the longest waiter if there is one."""
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return
        self.busy -= 1

    async def __aenter__(self) -> None:
        if not self.enter_now():
            await self.wait()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.leave()
        if isinstance(exc, RedisError | OSError):
            raise _store_error(exc) from exc


def _store_error(exc: BaseException) -> StoreError:
    return StoreError(f"redis: {type(exc).__name__}: {exc}")


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
        self._gate = _Gate(max_in_flight, pool_timeout, prepare)
        self._execute: Callable[..., Any] = client.execute_command
        self._pattern = _glob_escape(raw_prefix) + b"*"
        self._lease_prefix = raw_prefix + _LEASE
        self._channel = raw_prefix + _RELEASED
        self._renew_script = client.register_script(_RENEW)
        self._replace_script = client.register_script(_REPLACE)
        self._release_script = client.register_script(_RELEASE)
        self._waiters: dict[bytes, set[asyncio.Event]] = {}
        self._listener: asyncio.Task[None] | None = None
        self._closed = False
        self._reads = 0
        self._hits = 0
        self._writes = 0
        self._conflicts = 0
        self._replaced = 0
        self._notified = 0

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
        named = {
            "prefix": prefix,
            "socket_timeout": socket_timeout,
            "socket_connect_timeout": socket_connect_timeout,
            "max_connections": max_connections,
            "retries": retries,
        }
        overrides = {
            name: value for name, value in {**named, **options}.items() if value is not None
        }
        try:
            connected = connect(url, overrides)
        except ConfigurationError:
            raise
        except (RedisError, RedisClusterException, ValueError, TypeError) as exc:
            raise ConfigurationError(f"cannot open {redact(url)!r}: {exc}") from exc
        store = cls(
            connected.client,
            prefix=connected.prefix,
            max_in_flight=connected.max_connections,
            pool_timeout=connected.pool_timeout,
            close_client=True,
        )
        return store

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
            raise _store_error(exc) from exc
        finally:
            gate.leave()
        self._reads += 1
        if raw is None:
            return None
        entry = _unpack(raw, time.time())
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
        entries = [None if raw is None else _unpack(raw, now) for raw in raws]
        self._reads += len(keys)
        self._hits += sum(entry is not None for entry in entries)
        return entries

    async def add(self, key: bytes, value: bytes, expires_at: float | None) -> Entry:
        """Store ``value`` unless a live entry exists; return the winner. One round trip."""
        name = self.prefix + key
        async with self._gate:
            if expires_at is None:
                old = await self._execute(
                    "SET", name, _NO_EXPIRY_HEADER + value, "NX", "GET", get=True
                )
            elif expires_at > time.time():
                stored = _HEADER.pack(_EXPIRES, expires_at) + value
                old = await self._execute(
                    "SET", name, stored, "NX", "PXAT", _pxat(expires_at), "GET", get=True
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
                pipe.execute_command("SET", name, _NO_EXPIRY_HEADER + value, "NX", "GET", get=True)
            elif expires_at > now:
                stored = _HEADER.pack(_EXPIRES, expires_at) + value
                pipe.execute_command(
                    "SET", name, stored, "NX", "PXAT", _pxat(expires_at), "GET", get=True
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
            args: list[bytes | int] = [_NO_EXPIRY_HEADER, b""]
        else:
            args = [_HEADER.pack(_EXPIRES, expires_at), _pxat(expires_at)]
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
        total = 0
        lease_prefix = self._lease_prefix
        async with self._gate:
            async for name in self.client.scan_iter(match=self._pattern, count=1000):
                # An entry whose own key starts with b"lease:" is not counted; a
                # 16-byte key from make_key does with probability 2**-48.
                if not name.startswith(lease_prefix):
                    total += 1
        return total

    async def clear(self) -> None:
        """Drop every key under this prefix (entries and leases), and nothing else.

        ``SCAN MATCH prefix*`` (every primary of a cluster) and ``UNLINK`` in
        batches; never ``FLUSHDB``.
        """
        async with self._gate:
            batch: list[bytes] = []
            async for name in self.client.scan_iter(match=self._pattern, count=1000):
                batch.append(name)
                if len(batch) >= 500:
                    await self.client.unlink(*batch)
                    batch = []
            if batch:
                await self.client.unlink(*batch)

    async def aclose(self) -> None:
        """Stop the lease listener, and close the client when the store owns it; idempotent."""
        if self._closed:
            return
        self._closed = True
        listener, self._listener = self._listener, None
        if listener is not None:
            listener.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await listener
        for events in self._waiters.values():
            for event in events:
                event.set()
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
            "lease_notifications": self._notified,
            "lease_waiters": sum(len(events) for events in self._waiters.values()),
        }

    # -- the LeaseStore capability ----------------------------------------

    async def acquire_lease(self, key: bytes, token: bytes, ttl: float) -> bool:
        """Take the lease on ``key`` for ``ttl`` seconds unless another holds it.

        ``SET <prefix>lease:<key> token NX PX ms``.
        """
        ms = max(1, math.ceil(ttl * 1000))
        async with self._gate:
            taken = await self._execute("SET", self._lease_prefix + key, token, "NX", "PX", ms)
        return bool(taken)

    async def release_lease(self, key: bytes, token: bytes) -> None:
        """Drop the lease if ``token`` still holds it, and wake whoever waits on ``key``.

        Compare-and-delete in a script, then ``PUBLISH`` the key.
        """
        async with self._gate:
            await self._release_script(
                keys=[self._lease_prefix + key], args=[token, self._channel, key]
            )

    async def wait_for_entry(self, key: bytes, timeout: float) -> Entry | None:  # noqa: ASYNC109
        """Wait up to ``timeout`` seconds for an entry under ``key`` to appear.

        Woken by the holder's ``release_lease`` (pub/sub); polls with
        exponential backoff too, for a lost message or a listener that is
        down. Returns ``None`` at the timeout, and as soon as there is neither
        an entry nor a lease (the holder gave up, died, or its lease expired):
        nobody is computing ``key`` then, and the caller should.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        event = asyncio.Event()
        # Registered before the first look, so a release in between is not lost.
        self._waiters.setdefault(key, set()).add(event)
        self._ensure_listener()
        delay = _POLL_FIRST
        try:
            while not self._closed:
                entry, leased = await self._probe(key)
                if entry is not None:
                    return entry
                remaining = deadline - loop.time()
                if not leased or remaining <= 0:
                    return None
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(min(delay, remaining)):
                        await event.wait()
                event.clear()
                delay = min(delay * 2, _POLL_MAX)
            return None
        finally:
            events = self._waiters.get(key)
            if events is not None:
                events.discard(event)
                if not events:
                    del self._waiters[key]

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
        existing = _unpack(old, now)
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
        stored = _pack(value, expires_at)
        pxat: bytes | int = b"" if expires_at is None else _pxat(expires_at)
        for _ in range(3):
            async with self._gate:
                current = await self._replace_script(keys=[name], args=[old, stored, pxat])
            if current is None:
                self._replaced += 1
                return Entry(value, expires_at)
            existing = _unpack(current, time.time())
            if existing is not None:
                self._conflicts += 1
                return existing
            old = current
        return Entry(value, expires_at)

    async def _probe(self, key: bytes) -> tuple[Entry | None, bool]:
        """The live entry under ``key`` and whether its lease is held, in one round trip."""
        pipe = self._pipeline()
        pipe.execute_command("GET", self.prefix + key)
        pipe.execute_command("EXISTS", self._lease_prefix + key)
        async with self._gate:
            raw, leased = await pipe.execute()
        entry = None if raw is None else _unpack(raw, time.time())
        return entry, bool(leased)

    def _ensure_listener(self) -> None:
        if self._listener is None and not self._closed:
            self._listener = asyncio.get_running_loop().create_task(
                self._listen(), name=f"asyncache-redis-leases-{self.prefix!r}"
            )

    async def _listen(self) -> None:
        """Wake the waiters of each key a released lease announces, for the store's life."""
        delay = _POLL_FIRST
        while True:
            pubsub: PubSub | None = None
            try:
                await self._gate.ensure_ready()
                pubsub = self.client.pubsub()
                await pubsub.subscribe(self._channel)
                delay = _POLL_FIRST
                await self._relay(pubsub)
            except (RedisError, OSError, StoreError):
                pass  # waiters keep polling meanwhile; subscribe again after a backoff
            finally:
                if pubsub is not None:
                    with contextlib.suppress(RedisError, OSError):
                        await pubsub.aclose()  # type: ignore[no-untyped-call]
            await asyncio.sleep(delay)
            delay = min(delay * 2, 2.0)

    async def _relay(self, pubsub: PubSub) -> None:
        while True:
            # A bounded wait, not timeout=None: older redis-py applies
            # socket_timeout to a blocking read and would drop the subscription.
            message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=30.0)
            if message is None or message.get("type") != "message":
                continue
            events = self._waiters.get(message["data"])
            if events:
                self._notified += 1
                for event in events:
                    event.set()
