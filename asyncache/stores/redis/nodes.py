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
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any, TypeVar

from redis.asyncio.cluster import RedisCluster
from redis.exceptions import RedisClusterException, RedisError

from ...errors import StoreError
from .driver import ask_for_refresh, refresh_if_due
from .gate import DRIVER_ERRORS, Gate, cause_of, store_error

T = TypeVar("T")
Item = TypeVar("Item")

__all__ = [
    "NODE_COOLDOWN",
    "NODE_FAILURES",
    "NodeHealth",
    "node_of",
    "on_node",
    "read_per_node",
    "write_per_node",
]

NODE_FAILURES = 3
"""Failures in a row after which a node's keys fail at once for a while."""
NODE_COOLDOWN = 0.25
"""Seconds a failing node is left alone before one request (its probe) tries it again.

Short, so that a node that recovers (or whose slots moved to a promoted
replica, which the client learns within its topology refresh interval:
``driver.TOPOLOGY_REFRESH``) serves again within a fraction of a second. While
the probe is out, every other request for the node's keys still fails at
once: one probe per cooling node, not one per caller.
"""


class NodeHealth:
    """Failures in a row per cluster node, and the nodes left alone for now."""

    __slots__ = ("_failures", "_skip_until")

    def __init__(self) -> None:
        self._failures: dict[str, int] = {}
        self._skip_until: dict[str, float] = {}

    def cooling(self, node: str, probe_bound: float | None = None) -> bool:
        """Whether ``node``'s keys fail at once for now (it failed too often in a row).

        Once the cool-down ends, the caller that asks first is the probe: its
        request is let through, and the node stays cooling for every other
        caller until the probe answers (``succeeded`` ends the cool-down,
        ``failed`` starts another) or, if it never does, for ``probe_bound``
        seconds (the probe's own timeout; at least ``NODE_COOLDOWN``).
        """
        until = self._skip_until.get(node)
        if until is None:
            return False
        now = time.monotonic()
        if now < until:
            return True
        self._skip_until[node] = now + max(NODE_COOLDOWN, probe_bound or 0.0)
        self._failures[node] = NODE_FAILURES - 1  # one more failure cools it again
        return False

    def failed(self, node: str) -> None:
        """Count a failure of ``node``."""
        failures = self._failures.get(node, 0) + 1
        self._failures[node] = failures
        if failures >= NODE_FAILURES:
            self._skip_until[node] = time.monotonic() + NODE_COOLDOWN

    def succeeded(self, node: str) -> None:
        """``node`` answered: its failures in a row (and any cool-down) are over."""
        if self._failures:
            self._failures.pop(node, None)
            self._skip_until.pop(node, None)

    def cooling_nodes(self) -> list[str]:
        """The nodes whose keys fail at once right now."""
        now = time.monotonic()
        return sorted(node for node, until in self._skip_until.items() if now < until)


async def read_per_node(
    client: RedisCluster,
    names: Sequence[bytes],
    timeout: float | None,  # noqa: ASYNC109 - a node's own bound, inside the engine's
    health: NodeHealth,
    gates: Callable[[str], Gate],
) -> list[bytes | StoreError | None]:
    """``MGET`` ``names`` node by node; a node that fails fails only its names.

    Returns per name its raw value, ``None``, or the ``StoreError`` (with
    ``shard`` set to the node) its node failed with.
    """
    return await _scatter(
        client,
        list(names),
        names,
        lambda node, part: _read_node(client, node, part, timeout, health, gates(node)),
    )


async def _scatter(
    client: RedisCluster,
    items: list[Item],
    names: Sequence[bytes],
    send: Callable[[str, list[Item]], Awaitable[Sequence[Any] | StoreError]],
) -> list[Any]:
    """``send`` each node its share of ``items`` (``names[i]`` is item i's key), side by
    side; per item its reply, or the ``StoreError`` its node failed with."""
    await refresh_if_due(client)
    groups, failed = _by_node(client, names)
    nodes = list(groups)
    replies = await asyncio.gather(
        *(send(node, [items[i] for i in groups[node]]) for node in nodes)
    )
    results: list[Any] = [None] * len(items)
    for node, reply in zip(nodes, replies, strict=True):
        indices = groups[node]
        if isinstance(reply, StoreError):
            for index in indices:
                results[index] = reply
        else:
            for index, value in zip(indices, reply, strict=True):
                results[index] = value
    for index, error in failed.items():
        results[index] = error
    return results


async def _read_node(
    client: RedisCluster,
    node: str,
    names: list[bytes],
    timeout: float | None,  # noqa: ASYNC109
    health: NodeHealth,
    gate: Gate,
) -> list[bytes | None] | StoreError:
    """The values of ``names`` (all on ``node``), or the error that node failed with."""
    # One MGET per slot, pipelined to the node (a redirection still followed).
    return await _node_call(
        client, node, timeout, health, gate, lambda: client.mget_nonatomic(names)
    )


async def _node_call(
    client: RedisCluster,
    node: str,
    timeout: float | None,  # noqa: ASYNC109
    health: NodeHealth,
    gate: Gate,
    send: Callable[[], Awaitable[Sequence[Any]]],
) -> list[Any] | StoreError:
    """``send()``'s replies (a request to ``node``, in a slot of its gate, within
    ``timeout``), or the error it failed with; counted in ``node``'s health.

    A node that fails, or is left alone while it cools, has the client learn the
    topology again from the other nodes (``driver.ask_for_refresh``): a stalled
    primary's replica may have been promoted.
    """
    if health.cooling(node, timeout):
        ask_for_refresh(client, node)
        return _skipped(node)
    try:
        async with asyncio.timeout(timeout), _slot(gate):
            replies = await send()
    except TimeoutError:
        health.failed(node)
        ask_for_refresh(client, node)
        return StoreError(f"redis: node {node} timed out after {timeout}s", shard=node)
    except (*DRIVER_ERRORS, StoreError) as exc:
        health.failed(node)
        ask_for_refresh(client, node)
        return exc if isinstance(exc, StoreError) else store_error(exc, shard=node)
    health.succeeded(node)
    return list(replies)


def node_of(client: RedisCluster, name: bytes) -> str:
    """The name of the node serving ``name``'s slot, by the client's topology.

    Raises:
        StoreError: no node covers the slot (mid-failover).
    """
    slot = client.keyslot(name)
    try:
        return str(client.nodes_manager.get_node_from_slot(slot).name)
    except (RedisError, RedisClusterException) as exc:
        raise store_error(exc, shard=f"slot {slot}") from None


def _by_node(
    client: RedisCluster, names: Sequence[bytes]
) -> tuple[dict[str, list[int]], dict[int, StoreError]]:
    """The indices of ``names`` per node, and the errors of names no node covers."""
    groups: dict[str, list[int]] = {}
    failed: dict[int, StoreError] = {}
    for index, name in enumerate(names):
        try:
            node = node_of(client, name)
        except StoreError as exc:
            failed[index] = exc
            continue
        groups.setdefault(node, []).append(index)
    return groups, failed


def _skipped(node: str) -> StoreError:
    return StoreError(
        f"redis: node {node} failed repeatedly; its keys are skipped for now", shard=node
    )


Sent = Sequence[tuple[tuple[Any, ...], dict[str, Any]]]
"""Commands for a pipeline: each one's arguments (the key second) and options."""


async def write_per_node(
    client: RedisCluster,
    commands: Sent,
    timeout: float | None,  # noqa: ASYNC109 - a node's own bound, inside the engine's
    health: NodeHealth,
    gates: Callable[[str], Gate],
) -> list[Any]:
    """Send ``commands`` (each on one key: ``args[1]``) as one pipeline per node, side by side.

    A node that fails (or is cooling) fails only its own commands: their places
    in the reply hold the ``StoreError`` (``shard`` naming the node); the other
    places hold each command's reply.
    """
    return await _scatter(
        client,
        list(commands),
        [args[1] for args, _ in commands],
        lambda node, part: _write_node(client, node, part, timeout, health, gates(node)),
    )


async def _write_node(
    client: RedisCluster,
    node: str,
    commands: Sent,
    timeout: float | None,  # noqa: ASYNC109
    health: NodeHealth,
    gate: Gate,
) -> list[Any] | StoreError:
    """The replies of ``commands`` (all for ``node``), or the error that node failed with."""
    pipe = client.pipeline()
    for args, options in commands:
        pipe.execute_command(*args, **options)
    return await _node_call(client, node, timeout, health, gate, pipe.execute)


async def on_node(
    client: RedisCluster,
    name: bytes,
    health: NodeHealth,
    timeout: float | None,  # noqa: ASYNC109
    gates: Callable[[str], Gate],
    send: Callable[[], Awaitable[T]],
) -> T:
    """``send()`` (a command on ``name``'s node, in a slot of its gate) unless that node
    is cooling; its health.

    A lease step on a cluster: a stalled node's lease keys fail at once once it
    cools, instead of each paying the socket timeout.

    Raises:
        StoreError: the node is cooling, or the command failed (``shard`` names the node).
    """
    node = node_of(client, name)
    if health.cooling(node, timeout):
        ask_for_refresh(client, node)
        raise _skipped(node)
    try:
        async with _slot(gates(node)):
            result = await send()
    except DRIVER_ERRORS as exc:
        health.failed(node)
        ask_for_refresh(client, node)
        raise store_error(exc, shard=node) from cause_of(exc)
    health.succeeded(node)
    return result


@contextlib.asynccontextmanager
async def _slot(gate: Gate) -> AsyncIterator[None]:
    """A slot of ``gate`` (a node's own) for the block; ``StoreError`` when none came free."""
    if not gate.enter_now():
        await gate.wait()
    try:
        yield
    finally:
        gate.leave()
