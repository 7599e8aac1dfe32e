"""What RedisStore needs of redis-py beyond its public API: here, and nowhere else.

The store supports redis-py from 5.0.1 (the floor ``pyproject.toml`` declares)
to the newest. Where releases differ in something the store relies on, the
choice is made once, at import, by a feature check (never by a version
number, so that a backport or a fork is judged by what it has):

- ``ConnectionPool.get_connection``: 5.x requires a command name, later
  releases take none (``take_connection``).
- The cluster client's topology refresh: where the cluster client has
  ``_initialize_due``, ``_request_refresh`` and ``topology_refresh_min_interval``
  (``BACKGROUND_REFRESH``: redis-py 8.2) a refresh is asked for by flag and
  runs in a task of the store's own, at most every ``TOPOLOGY_REFRESH``
  seconds, while the current topology keeps serving. Older releases have no
  such knob: the store asks the nodes manager itself, in a task of its own, at
  the same rate, the failed node asked last (``Cluster.refresh_soon``). Their
  own refreshes still run inside commands after their errors (8.1), and 5.x
  drops every node's connections on a timeout or a lost connection: there one
  node's stall or death costs the other nodes' commands in flight too
  (docs/stores.md says so; the tests of that isolation run from 8.2).
- Which errors the cluster client retries (``ERRORS_ALLOW_RETRY``): timeouts
  are taken off the list on every release (``Cluster``).
- Pub/sub on a cluster: the 5.x asyncio cluster client has no ``pubsub()``;
  there the store subscribes on one node (``open_pubsub``), which is enough,
  as a cluster delivers every ``PUBLISH`` to every node.
- A node that times out or cools asks for a refresh (``ask_for_refresh``):
  a stalled node answers with nothing that would make the client ask.
- Which slots each primary serves, as the cluster client mapped them
  (``primaries_with_slots``: its nodes manager's slot table), for a forget's
  one script per primary (``tags``).

``tests/stores/test_redis_driver.py`` checks each choice against the
installed release; CI runs the Redis suites at 5.0.1 and at the newest.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
from typing import Any

from redis.asyncio.client import PubSub
from redis.asyncio.cluster import RedisCluster
from redis.asyncio.connection import ConnectionPool
from redis.exceptions import ClusterDownError, SlotNotCoveredError
from redis.exceptions import ConnectionError as RedisConnectionError

from .gate import DRIVER_ERRORS

__all__ = [
    "BACKGROUND_REFRESH",
    "POOL_NEEDS_COMMAND",
    "TOPOLOGY_REFRESH",
    "Cluster",
    "ask_for_refresh",
    "cluster_options",
    "open_pubsub",
    "primaries_with_slots",
    "refresh_if_due",
    "take_connection",
]

TOPOLOGY_REFRESH = 0.2
"""Seconds between two topology refreshes a cluster client's errors ask for (redis-py's
``topology_refresh_min_interval``, 1 s by default, where it has one): after a failover
the client follows the promoted replica within about this, plus a node's cool-down
(``nodes.NODE_COOLDOWN``)."""

_command_name = inspect.signature(ConnectionPool.get_connection).parameters.get("command_name")
POOL_NEEDS_COMMAND = _command_name is not None and _command_name.default is inspect.Parameter.empty
"""``ConnectionPool.get_connection`` requires a command name (redis-py 5.x)."""

BACKGROUND_REFRESH = all(
    hasattr(RedisCluster, name) for name in ("_initialize_due", "_request_refresh")
) and ("topology_refresh_min_interval" in inspect.signature(RedisCluster.__init__).parameters)
"""The cluster client refreshes its topology at a bounded rate, when asked, while the
current one serves (redis-py 8.2): the store runs those refreshes in a task of its own."""


async def take_connection(pool: Any) -> Any:
    """A connection of ``pool``'s own, for the store to hold (``loops.Bound.get``)."""
    if POOL_NEEDS_COMMAND:
        return await pool.get_connection("GET")
    return await pool.get_connection()


def open_pubsub(client: Any) -> PubSub:
    """A pub/sub object on ``client``: its own, or (a 5.x cluster client, which has
    none) one on the cluster's default node, over a pool of its own that its
    ``aclose`` disconnects."""
    own = getattr(client, "pubsub", None)
    if own is not None:
        return own()  # type: ignore[no-any-return]
    node = client.get_default_node()
    kwargs = dict(node.connection_kwargs)
    pool = ConnectionPool(connection_class=node.connection_class, max_connections=1, **kwargs)
    return PubSub(pool)


def cluster_options() -> dict[str, Any]:
    """The cluster client's options that only some releases take."""
    if BACKGROUND_REFRESH:
        return {"topology_refresh_min_interval": TOPOLOGY_REFRESH}
    return {}


class Cluster(RedisCluster):
    """redis-py's cluster client, without retrying a command that timed out.

    The cluster client retries its own list of errors whatever its ``retry``
    says, timeouts included: a get to a stalled primary took three socket
    timeouts (1.5 s at ``socket_timeout=0.5``). A slow server stays slow;
    connection errors (a dead primary, whose slots a refresh of the topology
    moves to the promoted replica) and a cluster that is down still retry.
    """

    ERRORS_ALLOW_RETRY = (  # type: ignore[assignment]
        RedisConnectionError,
        ClusterDownError,
        SlotNotCoveredError,
    )

    # Where the client refreshes at a bounded rate (BACKGROUND_REFRESH), the refreshes
    # its errors ask for run in a task of their own once it has a topology, never inside
    # the next command: a refresh asks the nodes one by one, and one that reaches a
    # stalled node waits out its socket timeout, which the command that ran it (a
    # healthy node's lease step, say) paid in full.
    _refresher: asyncio.Task[None] | None = None
    _refreshing = False

    if BACKGROUND_REFRESH:

        def _initialize_due(self) -> bool:
            due: bool = super()._initialize_due()
            if not due or self._refreshing or not getattr(self, "_topology_ready", False):
                return due
            refresher = self._refresher
            if refresher is None or refresher.done():
                self._refresher = asyncio.get_running_loop().create_task(self._refresh())
            return False  # the current topology keeps serving meanwhile

    _asked_at = float("-inf")

    def refresh_soon(self, node: str) -> None:
        """Learn the topology in a task of its own, ``node`` asked last, unless that ran
        less than ``TOPOLOGY_REFRESH`` seconds ago (releases without a bounded rate).

        The nodes manager's own refresh, not the client's ``initialize``: that one
        holds a lock every command then waits on, and asks the default node (which
        may be the stalled one) for its command table. Until the new slot map is
        complete the current one keeps serving.
        """
        loop = asyncio.get_running_loop()
        refresher = self._refresher
        if loop.time() - self._asked_at < TOPOLOGY_REFRESH or (
            refresher is not None and not refresher.done()
        ):
            return
        self._asked_at = loop.time()
        startup = self.nodes_manager.startup_nodes
        if node in startup:
            startup[node] = startup.pop(node)  # the refresh asks the nodes in this order
        self._refresher = loop.create_task(self._learn_slots())

    async def _learn_slots(self) -> None:
        # Best effort, and bounded: a refresh that fails or hangs is asked for again by
        # the next failure, once this task has ended.
        bound = 4 * (self.connection_kwargs.get("socket_timeout") or 1.0)
        with contextlib.suppress(Exception):
            async with asyncio.timeout(bound):
                await self.nodes_manager.initialize()

    async def _refresh(self) -> None:
        self._refreshing = True
        try:
            await self.initialize()  # takes the lock before it awaits: due for no one else
        except DRIVER_ERRORS:
            pass  # asked for again by the next error
        finally:
            self._refreshing = False

    async def aclose(self) -> None:
        refresher, self._refresher = self._refresher, None
        if refresher is not None and not refresher.done():
            refresher.cancel()
            with contextlib.suppress(asyncio.CancelledError, *DRIVER_ERRORS):
                await refresher
        await super().aclose()


async def refresh_if_due(client: RedisCluster) -> None:
    """Run the topology refresh an error asked for (a failover), once, if it is due.

    Outside every node's timeout: run inside one node's request, it would count
    against that (healthy) node. It never raises; it keeps the current topology
    when it reaches no node. Without ``BACKGROUND_REFRESH`` the client's next
    command refreshes by itself.
    """
    due = getattr(client, "_initialize_due", None)
    if BACKGROUND_REFRESH and due is not None and due():
        with contextlib.suppress(*DRIVER_ERRORS):
            await client.initialize()


def ask_for_refresh(client: RedisCluster, node: str) -> None:
    """Have the client learn the topology from the other nodes, ``node`` (which timed out
    or is left alone while it cools) asked last.

    A stalled node answers with nothing: no ``MOVED``, no refused connection;
    and a timeout of the store's own (``nodes``' per-node bound) or a node left
    alone while it cools never reaches the client's error paths at all. So the
    client kept the stalled node's slots pointed at it until it resumed, though
    its replica was promoted meanwhile: this asks for the refresh a lost
    connection would have. Asking often costs nothing: refreshes run at most
    every ``TOPOLOGY_REFRESH`` seconds, in a task of their own, and one that
    finds the same topology changes nothing.
    """
    if BACKGROUND_REFRESH:
        client._request_refresh(last_failed_node_name=node)  # run by the next refresh_if_due
    elif isinstance(client, Cluster):
        client.refresh_soon(node)


async def primaries_with_slots(client: RedisCluster) -> list[tuple[Any, list[int]]]:
    """Each primary of ``client``'s cluster (a ``ClusterNode``) with the slots it serves."""
    manager = client.nodes_manager
    if not manager.slots_cache:
        await client.initialize()
    by_node: dict[str, tuple[Any, list[int]]] = {}
    for slot, nodes in manager.slots_cache.items():
        by_node.setdefault(nodes[0].name, (nodes[0], []))[1].append(slot)
    return list(by_node.values())
