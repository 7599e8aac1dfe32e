"""A Redis Cluster's reads, node by node: one node's fault costs only its keys.

Gathered gets (a loop turn's ``get`` calls, a ``get_many``) span every
primary. Sent as one cluster pipeline, they fail together when one primary
stalls or dies: the healthy primaries' hits become misses too. Here they go
out as one request per node, side by side, each bounded by the client's
``socket_timeout`` (so a stalled node costs one timeout, never the driver's
retries of it), and each node keeps its own health: after
``NODE_FAILURES`` failures in a row its keys fail at once, without a round
trip, for ``NODE_COOLDOWN`` seconds; then one request tries it again. A
failover moves the slots to another node, whose health is its own, so the
keys come back as soon as the client learns the new topology.

A failure here is a ``StoreError`` whose ``shard`` names the node: the
engine's guard then knows that one node failed, not the store.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence

from redis.asyncio.cluster import RedisCluster
from redis.exceptions import RedisError

from ...errors import StoreError
from .gate import DRIVER_ERRORS, store_error

__all__ = ["NODE_COOLDOWN", "NODE_FAILURES", "NodeHealth", "read_per_node"]

NODE_FAILURES = 3
"""Failures in a row after which a node's keys fail at once for a while."""
NODE_COOLDOWN = 1.0
"""Seconds a failing node is left alone before one request tries it again.

Short, so that a node that recovers (or whose slots moved to a promoted
replica, which the retry teaches the client) serves again within about a second.
"""


class NodeHealth:
    """Failures in a row per cluster node, and the nodes left alone for now."""

    __slots__ = ("_failures", "_skip_until")

    def __init__(self) -> None:
        self._failures: dict[str, int] = {}
        self._skip_until: dict[str, float] = {}

    def cooling(self, node: str) -> bool:
        """Whether ``node``'s keys fail at once for now (it failed too often in a row).

        Once the cool-down ends, one caller's request is let through (and the
        node cools again at once if it fails).
        """
        until = self._skip_until.get(node)
        if until is None:
            return False
        if time.monotonic() < until:
            return True
        del self._skip_until[node]
        self._failures[node] = NODE_FAILURES - 1  # one more failure cools it again
        return False

    def failed(self, node: str) -> None:
        """Count a failure of ``node``."""
        failures = self._failures.get(node, 0) + 1
        self._failures[node] = failures
        if failures >= NODE_FAILURES:
            self._skip_until[node] = time.monotonic() + NODE_COOLDOWN

    def succeeded(self, node: str) -> None:
        """``node`` answered: its failures in a row are over."""
        if self._failures:
            self._failures.pop(node, None)

    def cooling_nodes(self) -> list[str]:
        """The nodes whose keys fail at once right now."""
        now = time.monotonic()
        return sorted(node for node, until in self._skip_until.items() if now < until)


async def read_per_node(
    client: RedisCluster,
    names: Sequence[bytes],
    timeout: float | None,  # noqa: ASYNC109 - a node's own bound, inside the engine's
    health: NodeHealth,
) -> list[bytes | StoreError | None]:
    """``MGET`` ``names`` node by node; a node that fails fails only its names.

    Returns per name its raw value, ``None``, or the ``StoreError`` (with
    ``shard`` set to the node) its node failed with.
    """
    due = getattr(client, "_initialize_due", None)
    if due is not None and due():
        # A refresh of the topology an error asked for (a failover) runs here, once,
        # outside every node's timeout: run inside one node's request, it would
        # count against that (healthy) node. It never raises; it keeps the current
        # topology when it reaches no node.
        try:
            await client.initialize()
        except DRIVER_ERRORS:
            pass
    groups: dict[str, list[int]] = {}
    failed: dict[int, StoreError] = {}
    nodes_manager = client.nodes_manager
    for index, name in enumerate(names):
        try:
            node = nodes_manager.get_node_from_slot(client.keyslot(name)).name
        except RedisError as exc:  # a slot no node covers (mid-failover)
            failed[index] = store_error(exc, shard=f"slot {client.keyslot(name)}")
            continue
        groups.setdefault(node, []).append(index)
    nodes = list(groups)
    replies = await asyncio.gather(
        *(
            _read_node(client, node, [names[i] for i in groups[node]], timeout, health)
            for node in nodes
        )
    )
    results: list[bytes | StoreError | None] = [None] * len(names)
    for node, reply in zip(nodes, replies, strict=True):
        indices = groups[node]
        if isinstance(reply, StoreError):
            for index in indices:
                results[index] = reply
        else:
            for index, raw in zip(indices, reply, strict=True):
                results[index] = raw
    for index, error in failed.items():
        results[index] = error
    return results


async def _read_node(
    client: RedisCluster,
    node: str,
    names: list[bytes],
    timeout: float | None,  # noqa: ASYNC109
    health: NodeHealth,
) -> list[bytes | None] | StoreError:
    """The values of ``names`` (all on ``node``), or the error that node failed with."""
    if health.cooling(node):
        return StoreError(
            f"redis: node {node} failed repeatedly; its keys are skipped for now", shard=node
        )
    try:
        async with asyncio.timeout(timeout):
            # One MGET per slot, pipelined to the node (a redirection still followed).
            raws = await client.mget_nonatomic(names)
    except TimeoutError:
        health.failed(node)
        return StoreError(f"redis: node {node} timed out after {timeout}s", shard=node)
    except DRIVER_ERRORS as exc:
        health.failed(node)
        return store_error(exc, shard=node)
    health.succeeded(node)
    return list(raws)
