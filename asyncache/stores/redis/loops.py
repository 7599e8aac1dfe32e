"""RedisStore's connections, one set per event loop.

A redis-py client belongs to the event loop its connections were made on: used
from another (a second ``asyncio.run()``, tests with a loop each, a thread's
own loop) every command fails with "Event loop is closed". So a store binds
what it uses (client, gate, scripts, leases, subscription) to the running
loop: the first loop gets the client the store was given, every other loop a
client of its own, made when that loop first uses the store (by the store's
factory, or as a copy of a plain ``Redis`` client's pool). What a loop got is
closed when that loop shuts down (``asyncio.run`` and ``asyncio.Runner`` close
the loop's async generators as they end, and one of those closes it), when the
store closes, and when the store is garbage collected while the loop runs.

redis-py's client is asyncio's alone: under trio (or with no asyncio loop
running) the store refuses at once, when it is made and when it is used,
with a ``ConfigurationError`` that says so (``running_loop``), instead of
failing every call.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, Awaitable, Callable, Sequence
from typing import Any, NamedTuple, TypeVar

from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster
from redis.exceptions import RedisError

from ...errors import ConfigurationError, StoreError
from .batches import Batcher
from .channels import Handler, Invalidations, Listener
from .driver import take_connection
from .gate import Gate, check_limit
from .layout import INVALIDATED, RELEASED
from .leases import LeaseKeys
from .nodes import NodeHealth, node_of, read_per_node, write_per_node
from .scripts import DELETE, RENEW, REPLACE, SWAP
from .url import Client

In = TypeVar("In")
Out = TypeVar("Out")

__all__ = [
    "ASYNCIO_ONLY",
    "Bound",
    "Command",
    "Loops",
    "Settings",
    "copy_client",
    "refuse_other_loops",
    "running_loop",
]

ASYNCIO_ONLY = (
    "RedisStore needs a running asyncio event loop: redis-py's client is asyncio-only, "
    "so it cannot serve trio (or code outside an event loop). Under trio, use "
    "SQLiteStore or MemoryStore"
)
"""The message of the ``ConfigurationError`` a store used outside asyncio raises."""


def running_loop() -> asyncio.AbstractEventLoop:
    """The running asyncio loop.

    Raises:
        ConfigurationError: none is running (trio, or no event loop at all).
    """
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        raise ConfigurationError(ASYNCIO_ONLY) from None


def refuse_other_loops() -> None:
    """Raise at once when a loop other than asyncio's runs here (a store made under trio).

    Outside any loop (a store made at import time) nothing is raised: the
    loop that first uses the store decides.

    Raises:
        ConfigurationError: another async library's loop is running.
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        pass
    else:
        return
    import anyio.lowlevel  # here: only a store made outside asyncio gets this far

    try:
        anyio.lowlevel.current_token()
    except Exception:  # no event loop at all
        return
    raise ConfigurationError(ASYNCIO_ONLY)


Command = tuple[tuple[Any, ...], dict[str, Any]]
"""A command's arguments and its options for redis-py (``get=True`` for ``SET ... GET``)."""


class Settings(NamedTuple):
    """What every loop's share of a store is made with."""

    prefix: bytes
    max_in_flight: int | None
    pool_timeout: float | None
    invalidations: Invalidations
    counters: dict[str, int]
    nodes: NodeHealth
    """A cluster's health per node, shared by every loop."""


def copy_client(client: Client) -> Client:
    """A client for another event loop with ``client``'s connection settings.

    Raises:
        StoreError: ``client`` is a ``RedisCluster``, which cannot be copied.
    """
    if isinstance(client, RedisCluster):
        raise StoreError(
            "redis: a RedisCluster client serves the one event loop it was first used on; "
            "give RedisStore a function that makes one, or use RedisStore.from_url"
        )
    pool = client.connection_pool
    copied = type(pool)(
        connection_class=pool.connection_class,
        max_connections=pool.max_connections,
        **pool.connection_kwargs,
    )
    return Redis.from_pool(copied)


class Bound:
    """A store's client and what goes with it, on one event loop.

    Args:
        loop: the loop.
        client: the client its commands go through.
        owned: ``aclose`` closes ``client`` too.
        settings: the store's settings.
        forget: called once when this closes, so the store drops it.
    """

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        client: Client,
        owned: bool,
        settings: Settings,
        forget: Callable[[Bound], None],
    ) -> None:
        self.loop = loop
        self.client = client
        self.owned = owned
        self.cluster = isinstance(client, RedisCluster)
        self.closed = False
        self._forget = forget
        prefix = settings.prefix
        prepare = client.initialize if isinstance(client, RedisCluster) else None
        self.gate = Gate(settings.max_in_flight, settings.pool_timeout, prepare)
        self.execute: Callable[..., Any] = client.execute_command
        self.nodes = settings.nodes
        self.node_timeout: float | None = (
            client.connection_kwargs.get("socket_timeout")
            if isinstance(client, RedisCluster)
            else None
        )
        """Seconds one cluster node's share of a read may take (the client's ``socket_timeout``)."""
        self._node_gates: dict[str, Gate] = {}
        self._limits = (settings.max_in_flight, settings.pool_timeout)
        # On a cluster a batch is no command of its own: each node's share of it takes a
        # slot of that node's gate (``node_gate``), so that a stalled node's commands
        # never hold the slots the other nodes' commands need.
        batches = Gate(None, settings.pool_timeout, prepare) if self.cluster else self.gate
        self._batches = batches
        self._node_reads: dict[str, Batcher[bytes, bytes | None]] = {}
        self._node_adds: dict[str, Batcher[Command, bytes | None]] = {}
        self.reads: Batcher[bytes, bytes | None] = Batcher(batches, self._get_batch)
        """Concurrent ``get``s, sent as one ``MGET`` (one per node, per hash slot, on a cluster)."""
        self.adds: Batcher[Command, bytes | None] = Batcher(batches, self._add_batch)
        """Concurrent ``add``s, sent as one pipeline of ``SET NX GET`` (one per node on a
        cluster, each failing alone)."""
        # Lone gets go over a connection of their own when the store owns the client and
        # its pool has room for one beyond the commands in flight (``from_url`` sizes it
        # so: listener + lone gets): see ``get``.
        self._held: Any = None
        self._pool: Any = None
        if owned and isinstance(client, Redis) and client.connection is None:
            limit = settings.max_in_flight
            room = getattr(client.connection_pool, "max_connections", 0)
            if limit is None or room >= limit + 2:
                self._pool = client.connection_pool
        self._held_busy = False
        self.renew = client.register_script(RENEW)
        self.replace = client.register_script(REPLACE)
        self.swap = client.register_script(SWAP)
        self.delete = client.register_script(DELETE)
        self.invalidated = prefix + INVALIDATED
        """The channel ``clear`` and ``delete`` announce on."""
        invalidations = settings.invalidations
        handlers: dict[bytes, Handler] = {prefix + RELEASED: self._released}
        handlers[self.invalidated] = invalidations.published
        if isinstance(client, Redis):
            db = client.connection_pool.connection_kwargs.get("db") or 0
            handlers[b"__keyevent@%d__:evicted" % int(db)] = invalidations.evicted
        self.listener = Listener(
            client, self.gate, f"asyncache-redis-{prefix!r}", handlers, invalidations.gap
        )
        self.leases = LeaseKeys(
            client,
            self.gate,
            prefix,
            self.pipeline,
            self.listener.ensure,
            settings.counters,
            settings.nodes,
            self.node_timeout,
            self.node_gate,
        )
        if invalidations.callbacks:
            self.listener.ensure()
        self._keeper: AsyncGenerator[None, None] | None = None
        self._abandoned = False

    async def start(self) -> None:
        """Have this closed when its loop closes its async generators (``asyncio.run`` does)."""
        self._keeper = self._keep()
        await anext(self._keeper)

    def reads_of(self, name: bytes) -> Batcher[bytes, bytes | None]:
        """Where a get of ``name`` is gathered: on a cluster, with the other gets of its
        node only, so that a stalled node's batch (waiting out its timeout) never holds
        back the gets of another node's keys that arrived in the same loop turn."""
        if not isinstance(self.client, RedisCluster):
            return self.reads
        return self._of_node(self._node_reads, name, self._get_batch)

    def adds_of(self, name: bytes) -> Batcher[Command, bytes | None]:
        """Where an add of ``name`` is gathered: on a cluster, with its node's adds only."""
        if not isinstance(self.client, RedisCluster):
            return self.adds
        return self._of_node(self._node_adds, name, self._add_batch)

    def _of_node(
        self,
        batchers: dict[str, Batcher[In, Out]],
        name: bytes,
        send: Callable[[list[In]], Awaitable[Sequence[Out | StoreError]]],
    ) -> Batcher[In, Out]:
        """The batcher of ``name``'s node in ``batchers``, made on the node's first call."""
        node = self._node_name(name)
        batcher = batchers.get(node)
        if batcher is None:
            batcher = batchers[node] = Batcher(self._batches, send)
        return batcher

    def _node_name(self, name: bytes) -> str:
        assert isinstance(self.client, RedisCluster)
        try:
            return node_of(self.client, name)
        except StoreError:
            return ""  # no node covers the slot now: the send finds out again, and fails it

    def node_gate(self, node: str) -> Gate:
        """A cluster node's own bound on commands in flight (``max_in_flight`` per node,
        as redis-py's pools are per node): a stalled node fills its own, not the others'."""
        gate = self._node_gates.get(node)
        if gate is None:
            gate = self._node_gates[node] = Gate(*self._limits)
        return gate

    def pipeline(self) -> Any:
        """A non-transactional pipeline on this loop's client."""
        if isinstance(self.client, RedisCluster):
            return self.client.pipeline()
        return self.client.pipeline(transaction=False)

    async def get(self, name: bytes) -> bytes | None:
        """``GET name``: a lone get, the one a caller alone in its loop turn sends.

        Over the connection this loop keeps for them when it has one and it is
        free: redis-py's ``execute_command`` takes a connection from the pool
        and gives it back on every call, which costs about as much again as
        the round trip on a loopback. The connection's retry policy and socket
        timeouts still apply; a failed or cancelled read leaves it
        disconnected (redis-py's rule), and the next get reconnects it.
        """
        if self._pool is None or self._held_busy:
            return await self.execute("GET", name)  # type: ignore[no-any-return]
        self._held_busy = True
        try:
            held = self._held
            if held is None:
                held = self._held = await take_connection(self._pool)
            return await held.retry.call_with_retry(  # type: ignore[no-any-return]
                lambda: self._get_on(held, name), lambda _: held.disconnect()
            )
        finally:
            self._held_busy = False

    @staticmethod
    async def _get_on(connection: Any, name: bytes) -> bytes | None:
        await connection.send_command("GET", name)
        return await connection.read_response()  # type: ignore[no-any-return]

    async def read_nodes(self, names: list[bytes]) -> list[bytes | StoreError | None]:
        """A cluster's ``MGET`` of ``names``, node by node (``nodes``): each node fails alone."""
        assert isinstance(self.client, RedisCluster)
        return await read_per_node(
            self.client, names, self.node_timeout, self.nodes, self.node_gate
        )

    async def _get_batch(self, names: list[bytes]) -> list[bytes | StoreError | None]:
        # A hot key asked for by many callers at once is read once.
        unique = list(dict.fromkeys(names))
        raws: list[bytes | StoreError | None]
        if self.cluster:
            raws = await self.read_nodes(unique)
        else:
            raws = await self.execute("MGET", *unique)
        if len(unique) == len(names):
            return list(raws)
        found = dict(zip(unique, raws, strict=True))
        return [found[name] for name in names]

    async def _add_batch(self, commands: list[Command]) -> list[bytes | StoreError | None]:
        if isinstance(self.client, RedisCluster):
            # One pipeline per node, side by side: a stalled node fails only its adds.
            return await write_per_node(
                self.client, commands, self.node_timeout, self.nodes, self.node_gate
            )
        pipe = self.pipeline()
        for args, options in commands:
            pipe.execute_command(*args, **options)
        return list(await pipe.execute())

    async def aclose(self) -> None:
        """Stop listening, wake lease waiters, close an owned client; idempotent."""
        if self.closed:
            return
        self.closed = True
        self._forget(self)
        self.leases.close()
        for batcher in [self.reads, *self._node_reads.values()]:
            await batcher.aclose()
        for adder in [self.adds, *self._node_adds.values()]:
            await adder.aclose()
        held, self._held = self._held, None
        if held is not None:
            with contextlib.suppress(RedisError, OSError):
                await self._pool.release(held)
        await self.listener.aclose()
        keeper, self._keeper = self._keeper, None
        if keeper is not None:
            await keeper.aclose()
        if self.owned:
            with contextlib.suppress(RedisError, OSError):
                await self.client.aclose()

    def abandon(self) -> None:
        """Let go of what belongs to a loop that closed without closing this.

        Nothing can be awaited on a closed loop: its connections are left to
        the garbage collector (which warns about them).
        """
        self.closed = self._abandoned = True
        self._forget(self)
        keeper, self._keeper = self._keeper, None
        if keeper is not None:
            # Closed by hand, so that the collector does not ask the closed loop to.
            with contextlib.suppress(StopIteration):
                keeper.aclose().send(None)

    async def _keep(self) -> AsyncGenerator[None, None]:
        try:
            yield
        finally:
            if not self._abandoned:
                self._keeper = None  # this is the keeper closing: aclose must not close it
                with contextlib.suppress(Exception):
                    await self.aclose()

    async def _released(self, key: bytes) -> None:
        await self.leases.wake(key)


class Loops:
    """A store's ``Bound`` per event loop.

    Args:
        client: the client for the first loop, or a function that makes one
            for each loop (the store owns what it makes).
        close_client: the store owns ``client`` (a factory's clients it always owns).
        settings: the store's settings.

    Raises:
        ConfigurationError: the client decodes responses, or ``max_in_flight`` is not positive.
    """

    def __init__(
        self,
        client: Client | Callable[[], Client],
        close_client: bool,
        settings: Settings,
    ) -> None:
        check_limit(settings.max_in_flight)
        self.factory: Callable[[], Client] | None = None
        if not isinstance(client, Redis | RedisCluster):
            self.factory = client
            client = client()
            close_client = True
        if client.get_encoder().decode_responses:
            raise ConfigurationError("RedisStore needs a client with decode_responses=False")
        self.first = client
        """The client the store was given (or made first)."""
        self.settings = settings
        self.closed = False
        self.last: Bound | None = None
        """The loop last bound: the common case costs one comparison."""
        self._unclaimed: Client | None = client
        self._owns_first = close_client
        self._bounds: dict[asyncio.AbstractEventLoop, Bound] = {}

    def running(self) -> Bound | None:
        """The running loop's ``Bound``, if it has one."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return None
        return self._bounds.get(loop)

    def all(self) -> list[Bound]:
        """Every loop's ``Bound``."""
        return list(self._bounds.values())

    async def bind(self) -> Bound:
        """The running loop's ``Bound``, made when it has none.

        Raises:
            StoreError: the store is closed, or the client cannot be copied.
            ConfigurationError: no asyncio loop is running (trio).
        """
        loop = running_loop()
        bound = self._bounds.get(loop)
        if bound is None:
            if self.closed:
                raise StoreError("redis: the store is closed")
            for other in self.all():
                if other.loop.is_closed():
                    other.abandon()
            if self._unclaimed is not None:
                client, owned = self._unclaimed, self._owns_first
                self._unclaimed = None
            elif self.factory is not None:
                client, owned = self.factory(), True
            else:
                client, owned = copy_client(self.first), True
            bound = Bound(loop, client, owned, self.settings, self._forget)
            self._bounds[loop] = bound
            await bound.start()
        self.last = bound
        return bound

    async def aclose(self) -> None:
        """Close every loop's share: this loop's now, a running one's soon; idempotent."""
        if self.closed:
            return
        self.closed = True
        try:
            current: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:  # trio: no loop of ours can be running here
            current = None
        for bound in self.all():
            if bound.loop is current:
                await bound.aclose()
            elif bound.loop.is_closed():
                bound.abandon()
            elif bound.loop.is_running():
                asyncio.run_coroutine_threadsafe(bound.aclose(), bound.loop)
            # A loop that is neither closes it as it shuts down.
        unclaimed, self._unclaimed = self._unclaimed, None
        # Never used, so never connected: outside asyncio, there is nothing to close.
        if unclaimed is not None and self._owns_first and current is not None:
            await unclaimed.aclose()

    def _forget(self, bound: Bound) -> None:
        if self._bounds.get(bound.loop) is bound:
            del self._bounds[bound.loop]
        if self.last is bound:
            self.last = None
