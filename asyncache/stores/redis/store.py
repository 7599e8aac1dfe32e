"""RedisStore: the DecisionStore protocol on Redis or Redis Cluster (see the package's doc)."""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any, Self

from redis.asyncio.cluster import RedisCluster

from ...errors import ConfigurationError, StoreError
from ...tags import DECISION_TAGS, Tagging, labels_of
from ..protocol import Entry
from .channels import Invalidated, Invalidations
from .gate import DRIVER_ERRORS, cause_of, store_error
from .layout import EXPIRES, HEADER, NO_EXPIRY_HEADER, expiry, pack, pxat, unpack
from .loops import Bound, Command, Loops, Settings, refuse_other_loops, running_loop
from .nodes import NodeHealth
from .scan import count_entries, describe_prefix, unlink_all, walk_entries
from .tags import REFUSED, add_tagged, index_head, labels_name
from .tags import forget as forget_labels
from .url import DEFAULT_PREFIX, Client, connect

__all__ = ["RedisStore"]


class RedisStore:
    """A ``DecisionStore`` (and ``LeaseStore``) on Redis or Redis Cluster.

    Every key it touches starts with ``prefix``; several stores (or apps) can
    share a database under different prefixes, as long as no prefix starts
    with another (``app:`` would own the keys of ``app:v2:``). A hit is one
    ``GET``, a batch one ``MGET`` (one per hash slot on a cluster), an ``add``
    one ``SET NX GET``. Needs Redis 7.0 or newer. Redis errors are raised as
    ``StoreError``. No expiry is ``None`` or ``inf``; an expiry past Redis's
    range (2**63 ms) is clamped to ``MAX_EXPIRES_AT`` (9.2e15 s).

    Args:
        client: a ``redis.asyncio.Redis`` or ``redis.asyncio.cluster.RedisCluster``
            with ``decode_responses=False``, or a function that makes one.
            ``from_url`` builds one with timeouts, a bounded pool and retries.
        prefix: what every key starts with; not empty.
        max_in_flight: most commands at once (callers beyond wait for a slot,
            up to ``pool_timeout`` seconds); ``None`` leaves it to the client.
        pool_timeout: seconds to wait for a slot; ``None`` waits as long as it takes.
        close_client: ``aclose()`` also closes ``client``.

    A redis-py client works on the one event loop its connections were made
    on, so the store keeps a client per running loop: the first loop that
    uses it gets ``client``; each other one (a second ``asyncio.run()``, a
    thread's own loop) gets a client of its own, which the store owns: made by
    ``client`` when that is a function (``from_url`` passes one), else a copy
    of a ``Redis`` client's pool settings (a ``RedisCluster`` cannot be
    copied: pass a function). A loop's client closes when ``asyncio.run`` (or
    ``asyncio.Runner``) ends that loop, and when the store closes. After
    ``aclose()`` every call raises ``StoreError``.

    ``subscribe_invalidations`` lets a ``TieredStore`` in front of this one
    (in any process) drop its memory copies when ``clear`` or ``delete`` drops
    entries here.

    ``enforces_timeouts`` is ``False``: the engine times each call with its
    ``store_timeout`` (calls share one timer per tick: ``asyncache.engine._guard``).
    The store's own socket, connect and pool timeouts, with retries, can add
    up to several seconds, more than a cache should wait. Set it to ``True``
    (saving about a microsecond a call) only when those bounds are tighter
    than the cache's ``store_timeout``.

    Auto-pipelining: a get that finds no other get in flight goes straight
    out (over a connection the loop keeps for lone gets when the store made
    its client); gets that arrive while one is in flight are gathered, and
    once the loop has run every caller ready in that turn they go out as one
    ``MGET`` (one per hash slot on a cluster); adds likewise as one pipeline
    of ``SET NX PXAT GET``. Each caller still awaits its own answer, so the
    engine's timeout, a cancellation and a failure each touch one call.

    redis-py is asyncio's alone: made or used under trio, the store raises
    ``ConfigurationError`` at once (under trio, use ``SQLiteStore``).

    Raises:
        ConfigurationError: the prefix is empty, the client decodes responses,
            or a loop other than asyncio's (trio) is running.
    """

    def __init__(
        self,
        client: Client | Callable[[], Client],
        *,
        prefix: str | bytes = DEFAULT_PREFIX,
        max_in_flight: int | None = None,
        pool_timeout: float | None = None,
        close_client: bool = False,
    ) -> None:
        refuse_other_loops()
        raw_prefix = prefix.encode() if isinstance(prefix, str) else bytes(prefix)
        if not raw_prefix:
            raise ConfigurationError(
                "RedisStore prefix must not be empty: clear() would drop every key in the database"
            )
        self.prefix = raw_prefix
        self._invalidations = Invalidations(raw_prefix)
        self._counters = {"lease_notifications": 0}
        settings = Settings(
            raw_prefix,
            max_in_flight,
            pool_timeout,
            self._invalidations,
            self._counters,
            NodeHealth(),
        )
        self._loops = Loops(client, close_client, settings)
        self.cluster = isinstance(self._loops.first, RedisCluster)
        self.enforces_timeouts = False
        """Every call ends within the store's own timeouts (see ``DecisionStore``)."""
        self.isolates_failures = self.cluster
        """On a cluster, reads go out per node and a failing node is cooled alone (``nodes``),
        and each write goes to its key's node: the engine's guard never skips the whole
        store's reads or writes for one node's faults."""
        self._written = 0  # items written (won or not)
        self._conflicts = 0  # adds that found another writer's live entry
        self._replaced = 0  # entries stored over one expired by this clock but not Redis's
        self._reads = 0
        self._hits = 0
        self._node_misses = 0  # keys a get_many answered None for because their node failed

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
        settings = {
            "prefix": prefix,
            "socket_timeout": socket_timeout,
            "socket_connect_timeout": socket_connect_timeout,
            "max_connections": max_connections,
            "retries": retries,
            **options,
        }
        connected = connect(url, settings)
        made = [connected.client]

        def make_client() -> Client:
            # The first loop gets the client made here; each other loop a new one.
            return made.pop() if made else connect(url, settings).client

        return cls(
            make_client,
            prefix=connected.prefix,
            max_in_flight=connected.max_connections,
            pool_timeout=connected.pool_timeout,
        )

    @property
    def client(self) -> Client:
        """The running event loop's client (outside one: the client the store was given)."""
        bound = self._loops.running()
        return self._loops.first if bound is None else bound.client

    @property
    def max_in_flight(self) -> int | None:
        """Most commands at once (per event loop); ``None`` when the client alone bounds them."""
        return self._loops.settings.max_in_flight

    @property
    def pool_timeout(self) -> float | None:
        """Seconds a command waits for a slot; ``None`` to wait as long as it takes."""
        return self._loops.settings.pool_timeout

    def __repr__(self) -> str:
        kind = "cluster" if self.cluster else "redis"
        return f"RedisStore({kind}, prefix={self.prefix!r})"

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    # -- the DecisionStore protocol ---------------------------------------

    async def get(self, key: bytes) -> Entry | None:
        """Return the live entry under ``key``, or ``None``; one ``GET``.

        Gets that arrive while another is in flight are gathered and sent as
        one ``MGET`` (``batches``); a lone get goes straight out.
        """
        # The hot path: the loop check, the gate's free path and the error mapping inline.
        bound = self._loops.last
        if bound is None or bound.loop is not running_loop():
            bound = await self._loops.bind()
        reads = bound.reads
        if bound.cluster:
            # On a cluster every get is gathered, with its node's others (``nodes``).
            name = self.prefix + key
            if not bound.gate.ready:
                await bound.gate.ensure_ready()  # the topology, to find the key's node
            raw = await bound.reads_of(name).join(name)
        elif reads.lone():
            gate = bound.gate
            reads.busy += 1  # from here on, other gets gather behind this one
            try:
                if not gate.enter_now():
                    await gate.wait()
                try:
                    raw = await bound.get(self.prefix + key)
                finally:
                    gate.leave()
            except DRIVER_ERRORS as exc:
                raise store_error(exc) from cause_of(exc)
            finally:
                reads.busy -= 1
        else:
            raw = await reads.join(self.prefix + key)
        self._reads += 1
        if raw is None:
            return None
        entry = unpack(raw, time.time())
        if entry is not None:
            self._hits += 1
        return entry

    async def get_many(self, keys: Sequence[bytes]) -> list[Entry | None]:
        """Return the live entry (or ``None``) per key; one ``MGET`` (per slot on a cluster).

        On a cluster, the keys of a node that failed (or is cooling after
        failures: ``nodes``) are ``None``, counted in ``stats()["node_misses"]``;
        a ``StoreError`` only when every node failed.
        """
        if not keys:
            return []
        prefix = self.prefix
        names = [prefix + key for key in keys]
        bound = await self._bound()
        raws: list[bytes | None]
        async with bound.gate:
            if bound.cluster:
                raws = self._node_failures(await bound.read_nodes(names))
            else:
                raws = await bound.execute("MGET", *names)
        now = time.time()
        entries = [None if raw is None else unpack(raw, now) for raw in raws]
        self._reads += len(keys)
        self._hits += sum(entry is not None for entry in entries)
        return entries

    async def add(self, key: bytes, value: bytes, expires_at: float | None) -> Entry:
        """Store ``value`` unless a live entry exists; return the winner. One round trip."""
        if DECISION_TAGS.get() is not None:
            found = await labels_of(key)
            if found is not None:
                return await self._add_tagged(key, value, expires_at, found)
        return await self._add(await self._bound(), key, value, expires_at)

    async def add_many(self, items: Sequence[tuple[bytes, bytes, float | None]]) -> list[Entry]:
        """``add`` for each item, in order, in one pipeline; return the winners."""
        if not items:
            return []
        if DECISION_TAGS.get() is not None:
            return list(
                await asyncio.gather(*(self.add(key, value, exp) for key, value, exp in items))
            )
        return await self._add_many(await self._bound(), items)

    # -- forgetting: tagged adds, and forget (``tags``) -----------------------

    async def _add_tagged(
        self,
        key: bytes,
        value: bytes,
        expires_at: float | None,
        found: tuple[Tagging, tuple[bytes, ...]],
    ) -> Entry:
        """``add`` of a decision the door tagged: one script on its key's slot."""
        bound = await self._mapped()
        expires_at = expiry(expires_at)
        if expires_at is not None and expires_at <= time.time():
            return await self._add(bound, key, value, expires_at)  # nothing to store
        tagging, labels = found
        async with bound.gate:
            old = await add_tagged(
                bound.client,
                self.prefix,
                key,
                pack(value, expires_at),
                expires_at,
                labels,
                tagging.since,
                bound.invalidated,
            )
        self._written += 1
        if old is REFUSED:
            tagging.refuse(key)
            return Entry(value, expires_at)
        return await self._settle(bound, self.prefix + key, value, expires_at, old)

    async def forget(
        self,
        labels: Sequence[bytes],
        *,
        dry_run: bool = False,
        progress: Callable[[int, int], object] | None = None,
    ) -> int:
        """Drop every live decision indexed under any of ``labels``; return how many.

        One script on a single Redis; on a cluster, one round trip per primary
        per batch of labels (``tags``). Then ``PUBLISH`` on ``<prefix>invalidated``,
        so that memory tiers in front of this prefix, in every process, drop their copies.
        """
        bound = await self._mapped()
        async with bound.gate:
            dropped = await forget_labels(
                bound.client,
                bound.pipeline,
                self.prefix,
                labels,
                dry_run=dry_run,
                progress=progress,
            )
            if not dry_run:
                await bound.execute("PUBLISH", bound.invalidated, b"")
        return dropped

    def _node_failures(self, raws: list[bytes | StoreError | None]) -> list[bytes | None]:
        """A cluster ``get_many``'s replies: the keys of a node that failed are misses.

        Raises:
            StoreError: every node failed (the store as a whole, for the guard).
        """
        errors = [raw for raw in raws if isinstance(raw, StoreError)]
        if not errors:
            return [raw for raw in raws if not isinstance(raw, StoreError)]
        if len(errors) == len(raws):
            raise StoreError(str(errors[0]))
        self._node_misses += len(errors)
        return [None if isinstance(raw, StoreError) else raw for raw in raws]

    # -- the write path: one SET NX GET per add, and who won -----------------

    async def _add(self, bound: Bound, key: bytes, value: bytes, expires_at: float | None) -> Entry:
        """Store ``value`` unless a live entry exists; return the winner. One round trip.

        Adds that arrive while another is in flight go out together in one pipeline.
        """
        name = self.prefix + key
        expires_at = expiry(expires_at)
        command = self._command(name, value, expires_at, time.time())
        # On a cluster every add is gathered, with its node's others (``nodes``).
        if bound.cluster and not bound.gate.ready:
            await bound.gate.ensure_ready()  # the topology, to find the key's node
        adds = bound.adds_of(name) if bound.cluster else bound.adds
        if adds.lone() and not bound.cluster:
            adds.busy += 1
            try:
                async with bound.gate:
                    old = await bound.execute(*command[0], **command[1])
            finally:
                adds.busy -= 1
        else:
            old = await adds.join(command)
        self._written += 1
        return await self._settle(bound, name, value, expires_at, old)

    async def _add_many(
        self, bound: Bound, items: Sequence[tuple[bytes, bytes, float | None]]
    ) -> list[Entry]:
        """``add`` for each item, in order, in one pipeline; return the winners."""
        items = [(key, value, expiry(expires_at)) for key, value, expires_at in items]
        now = time.time()
        pipe = bound.pipeline()
        prefix = self.prefix
        for key, value, expires_at in items:
            args, options = self._command(prefix + key, value, expires_at, now)
            pipe.execute_command(*args, **options)
        async with bound.gate:
            olds = await pipe.execute()
        self._written += len(items)
        return [
            await self._settle(bound, prefix + key, value, expires_at, old)
            for (key, value, expires_at), old in zip(items, olds, strict=True)
        ]

    @staticmethod
    def _command(name: bytes, value: bytes, expires_at: float | None, now: float) -> Command:
        """The one command of an ``add``: ``SET NX (PXAT) GET``, or a ``GET`` when expired."""
        if expires_at is None:
            return ("SET", name, NO_EXPIRY_HEADER + value, "NX", "GET"), {"get": True}
        if expires_at > now:
            stored = HEADER.pack(EXPIRES, expires_at) + value
            return ("SET", name, stored, "NX", "PXAT", pxat(expires_at), "GET"), {"get": True}
        # Already expired: nothing to store, but a live entry there still wins.
        return ("GET", name), {}

    async def _settle(
        self, bound: Bound, name: bytes, value: bytes, expires_at: float | None, old: bytes | None
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
        return await self._replace_stale(bound, name, old, value, expires_at)

    async def _replace_stale(
        self, bound: Bound, name: bytes, old: bytes, value: bytes, expires_at: float | None
    ) -> Entry:
        """Store over an entry that expired by this clock but not yet by Redis's.

        Happens only when this host's clock runs ahead of the server's. A
        compare-and-set, so an entry another writer stored meanwhile still wins.
        """
        stored = pack(value, expires_at)
        expiry_ms: bytes | int = b"" if expires_at is None else pxat(expires_at)
        for _ in range(3):
            async with bound.gate:
                current = await bound.replace(keys=[name], args=[old, stored, expiry_ms])
            if current is None:
                self._replaced += 1
                return Entry(value, expires_at)
            existing = unpack(current, time.time())
            if existing is not None:
                self._conflicts += 1
                return existing
            old = current
        return Entry(value, expires_at)

    async def replace(
        self, key: bytes, expected: bytes, value: bytes, expires_at: float | None
    ) -> Entry:
        """Store ``value`` if ``key`` still holds ``expected`` (or nothing); the winner.

        One script on the key's own slot (so on a cluster too); a replaced entry
        is announced, so that memory tiers in front drop their copies of it.
        """
        if DECISION_TAGS.get() is not None:
            found = await labels_of(key)
            if found is not None:
                # Tagged: dropped and added again, indexed (a writer in between wins).
                await self.delete(key)
                return await self._add_tagged(key, value, expires_at, found)
        name = self.prefix + key
        expires_at = expiry(expires_at)
        expiry_ms: bytes | int = b"" if expires_at is None else pxat(expires_at)
        bound = await self._bound()
        cluster = bound.cluster
        async with bound.gate:
            current = await bound.swap(
                keys=[name, labels_name(self.prefix, key, cluster=cluster)],
                args=[
                    expected,
                    pack(value, expires_at),
                    expiry_ms,
                    bound.invalidated,
                    key,
                    index_head(self.prefix, key, cluster=cluster),
                ],
            )
        self._written += 1
        if current is None:
            return Entry(value, expires_at)
        existing = unpack(current, time.time())
        if existing is None:  # expired by our clock, not yet by Redis's
            return await self._replace_stale(bound, name, current, value, expires_at)
        self._conflicts += 1
        return existing

    async def renew(self, key: bytes, expires_at: float | None) -> bool:
        """Move a live entry's expiry (header and Redis's own); ``False`` when there is none."""
        expires_at = expiry(expires_at)
        if expires_at is None:
            args: list[bytes | int] = [NO_EXPIRY_HEADER, b""]
        else:
            args = [HEADER.pack(EXPIRES, expires_at), pxat(expires_at)]
        args.append(math.floor(time.time() * 1000))
        bound = await self._bound()
        cluster = bound.cluster
        # A tagged decision's indexes follow its expiry (its labels key names them).
        args += [index_head(self.prefix, key, cluster=cluster), key]
        names = [self.prefix + key, labels_name(self.prefix, key, cluster=cluster)]
        async with bound.gate:
            renewed = await bound.renew(keys=names, args=args)
        return bool(renewed)

    async def delete(self, key: bytes) -> None:
        """Drop the entry under ``key`` if there is one, and announce it to memory tiers."""
        bound = await self._bound()
        async with bound.gate:
            await bound.delete(keys=[self.prefix + key], args=[bound.invalidated, key])

    async def prune(self) -> int:
        """Nothing to do: Redis expires keys itself. Returns 0."""
        return 0

    async def count(self) -> int:
        """How many entries this prefix holds (on a cluster, over every primary).

        A ``SCAN``, so O(keys in the database): for tools, not hot paths.
        """
        bound = await self._bound()
        async with bound.gate:
            return await count_entries(bound.client, self.prefix)

    async def clear(self) -> None:
        """Drop every key under this prefix (entries and leases), and nothing else.

        ``SCAN MATCH prefix*`` (every primary of a cluster) and ``UNLINK`` in
        chunks; never ``FLUSHDB``. Then ``PUBLISH`` on ``<prefix>invalidated``,
        so that memory tiers in front of this prefix drop their copies.
        """
        bound = await self._bound()
        async with bound.gate:
            await unlink_all(bound.client, self.prefix)
            await bound.execute("PUBLISH", bound.invalidated, b"")

    async def entries(self, *, batch_size: int = 500) -> AsyncIterator[list[tuple[bytes, Entry]]]:
        """Yield the live entries under this prefix: ``SCAN``, then ``MGET`` per batch.

        Raises:
            StoreError: Redis failed.
        """
        bound = await self._bound()
        try:
            async for batch in walk_entries(bound.client, self.prefix, batch_size):
                yield batch
        except DRIVER_ERRORS as exc:
            raise store_error(exc) from cause_of(exc)

    def subscribe_invalidations(self, callback: Invalidated) -> Callable[[], None]:
        """Have ``callback(key)`` awaited when entries here are dropped, by any process.

        ``key`` is the entry's key (a ``delete``, or an eviction the server
        announces), or ``None`` for every entry: a ``clear``, and whenever
        announcements may have been missed (each time the subscription is made
        or lost). Heard through one pub/sub subscription per event loop,
        started when a loop first uses the store. Returns a function that
        unsubscribes. ``TieredStore`` subscribes its L1.
        """
        unsubscribe = self._invalidations.subscribe(callback)
        bound = self._loops.running()
        if bound is not None:
            bound.listener.ensure()
        return unsubscribe

    async def aclose(self) -> None:
        """Stop listening, and close the clients the store owns; idempotent."""
        await self._loops.aclose()

    def stats(self) -> dict[str, int]:
        """Counters since the store opened: keys read, hits, writes, conflicts and more."""
        bounds = self._loops.all()
        return {
            "reads": self._reads,
            "hits": self._hits,
            "writes": self._written,
            "conflicts": self._conflicts,
            "stale_replaced": self._replaced,
            "in_flight": sum(bound.gate.busy for bound in bounds),
            "lease_notifications": self._counters["lease_notifications"],
            "lease_waiters": sum(bound.leases.waiting() for bound in bounds),
            "invalidations": self._invalidations.heard,
            "node_misses": self._node_misses,
            "nodes_cooling": len(self._loops.settings.nodes.cooling_nodes()),
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
        bound = await self._bound()
        async with bound.gate:
            facts = await describe_prefix(bound.client, self.prefix, bound.pipeline)
        return {
            "kind": "cluster" if self.cluster else "redis",
            "prefix": self.prefix.decode(errors="backslashreplace"),
            **facts,
            "max_in_flight": self.max_in_flight,
        }

    # -- the LeaseStore capability ----------------------------------------

    async def acquire_lease(self, key: bytes, token: bytes, ttl: float) -> bool:
        """Take the lease on ``key`` for ``ttl`` seconds unless another token holds it.

        The holder's own token renews it (from now). One script: ``SET
        <prefix>lease:<key> token PX ms`` unless another token is there.
        """
        return await (await self._bound()).leases.acquire(key, token, ttl)

    async def renew_lease(self, key: bytes, token: bytes, ttl: float) -> bool:
        """Extend the lease on ``key`` to ``ttl`` seconds from now if ``token`` still holds it.

        Never takes a lease: a renewal that crossed its holder's release (or a
        takeover) changes nothing and returns ``False``. The engine renews with
        this where a store has it, and with ``acquire_lease`` where not.
        """
        return await (await self._bound()).leases.renew(key, token, ttl)

    async def release_lease(self, key: bytes, token: bytes) -> None:
        """Drop the lease if ``token`` still holds it, and wake whoever waits on ``key``.

        Compare-and-delete in a script, then ``PUBLISH`` the key.
        """
        await (await self._bound()).leases.release(key, token)

    async def wait_for_entry(self, key: bytes, timeout: float) -> Entry | None:  # noqa: ASYNC109
        """Wait up to ``timeout`` seconds for an entry under ``key`` to appear.

        Woken by the holder's ``release_lease`` (pub/sub); polls with
        exponential backoff too, for a lost message or a listener that is
        down. Returns ``None`` at the timeout, and as soon as there is neither
        an entry nor a lease (the holder gave up, died, or its lease expired):
        nobody is computing ``key`` then, and the caller should.
        """
        return await (await self._bound()).leases.wait_for_entry(key, timeout)

    # -- internals ----------------------------------------------------------

    async def _mapped(self) -> Bound:
        """``_bound``, with a cluster's topology known (the slots' primaries)."""
        bound = await self._bound()
        if bound.cluster and not bound.gate.ready:
            await bound.gate.ensure_ready()
        return bound

    async def _bound(self) -> Bound:
        """What the running event loop uses: its client, gate, scripts and leases."""
        bound = self._loops.last
        if bound is not None and bound.loop is running_loop():
            return bound
        return await self._loops.bind()
