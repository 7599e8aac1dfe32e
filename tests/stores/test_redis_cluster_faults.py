"""A Redis Cluster primary that stalls (or fails over) costs only its own keys.

Each test starts a cluster of three real redis-server primaries of its own and
stops one with SIGSTOP (as a hung host, a long fork or a swap storm would):
the gets for keys on the other primaries must still be hits, through the store
and through the cache, and the cache's guard must not skip the whole cluster
for one node's faults.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import signal
import time
import warnings
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any, NamedTuple

import pytest

from asyncache import DecisionCache, cached_prediction
from asyncache.errors import StoreError

from ..servers import RedisCluster as Servers
from ..servers import RedisServer, send_command, server_binary, start_cluster
from ..support import GENEROUS_REDIS_TIMEOUTS, IN_CI, require_binary, until

try:
    from redis.asyncio.cluster import RedisCluster
    from redis.cluster import key_slot  # type: ignore[attr-defined]

    from asyncache.stores.redis import RedisStore
    from asyncache.stores.redis.driver import BACKGROUND_REFRESH, TOPOLOGY_REFRESH
    from asyncache.stores.redis.nodes import NODE_COOLDOWN, NODE_FAILURES
except ImportError:  # pragma: no cover - depends on the environment
    if IN_CI:
        raise
    pytest.skip("redis-py is not installed", allow_module_level=True)

# On redis-server and on Valkey (tests/conftest.py).
pytestmark = pytest.mark.engines

PREFIX = "faults:"
# Short enough that a stalled node's reads end soon, long enough that a healthy
# node's answer on a loaded machine never times out (at 0.5 s, both healthy
# primaries' gathered gets timed out once in CI); the engine's bound is longer,
# so that what a test sees is the store's own per-node accounting.
SOCKET_TIMEOUT = 2.0
# A hang guard for what a test waits on, never a timing assertion.
WAIT = 60.0


@pytest.fixture(autouse=True)
def _collect_what_old_clients_leak() -> Iterator[None]:
    """Collect, without its warnings, what an older cluster client leaks in a stall.

    redis-py before 8.2 replaces a stalled node's objects on a refresh and leaves
    their busy connections to the garbage collector, which warns (an error under
    this suite's ``filterwarnings``) in whichever later test it happens to run.
    """
    yield
    if not BACKGROUND_REFRESH:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ResourceWarning)
            gc.collect()


@pytest.fixture
def servers(redis_engine: str, tmp_path: Path) -> Iterator[Servers]:
    """Three cluster primaries of this test's own, which it may stop and continue.

    No stall here ends in a failover (those tests start clusters with replicas): a node
    is never marked failed, which would take the whole cluster down (CLUSTERDOWN) when a
    stall outlasts the default 5 s, as three 2 s timeouts do."""
    cluster = start_cluster(
        server_binary(redis_engine),
        require_binary("redis-cli"),
        tmp_path / "cluster",
        node_timeout_ms=600_000,
    )
    try:
        yield cluster
    finally:
        for node in cluster.nodes:
            if node.process is not None and node.process.poll() is None:
                os.kill(node.process.pid, signal.SIGCONT)
        cluster.stop()


@pytest.fixture
async def store(servers: Servers) -> AsyncIterator[RedisStore]:
    async with opened(servers, f"socket_timeout={SOCKET_TIMEOUT}&socket_connect_timeout=5") as it:
        yield it


@contextlib.asynccontextmanager
async def opened(servers: Servers, options: str, **kwargs: Any) -> AsyncIterator[RedisStore]:
    """A store on ``servers`` with the client ``options`` (a URL's query) of a test's own."""
    store = RedisStore.from_url(f"{servers.url}?{options}", prefix=PREFIX, **kwargs)
    try:
        yield store
    finally:
        await store.aclose()


def sent_to(client: RedisCluster, node: RedisServer) -> list[tuple[Any, ...]]:
    """The commands ``client`` sends ``node`` from now on (each attempt), as a list that grows."""
    sent: list[tuple[Any, ...]] = []
    send = client._execute_command

    async def counted(target: Any, *args: Any, **kwargs: Any) -> Any:
        if target.port == node.port:
            sent.append(args)
        return await send(target, *args, **kwargs)

    client._execute_command = counted  # type: ignore[method-assign]
    return sent


def stopped(node: RedisServer) -> _Stopped:
    return _Stopped(node)


class _Stopped:
    """SIGSTOP ``node`` inside the block, SIGCONT after."""

    def __init__(self, node: RedisServer) -> None:
        assert node.process is not None
        self.pid = node.process.pid

    def __enter__(self) -> None:
        os.kill(self.pid, signal.SIGSTOP)

    def __exit__(self, *exc_info: object) -> None:
        os.kill(self.pid, signal.SIGCONT)


async def split_by_node(
    store: RedisStore, keys: list[bytes], node: RedisServer
) -> tuple[list[bytes], list[bytes]]:
    """``keys`` on ``node`` and on the other primaries, by the client's own slot map."""
    client = store.client
    assert isinstance(client, RedisCluster)
    await client.initialize()
    on, off = [], []
    for k in keys:
        owner = client.nodes_manager.get_node_from_slot(key_slot(PREFIX.encode() + k))
        (on if owner.port == node.port else off).append(k)
    assert on and off
    return on, off


KEYS = [b"%016d" % n for n in range(310)]

ISOLATED = pytest.mark.skipif(
    not BACKGROUND_REFRESH,
    reason="a healthy node's commands outlast another node's stall from redis-py 8.2 on: "
    "older cluster clients refresh (5.x: reconnect every node) inside commands "
    "after a timeout or a lost connection (docs/stores.md)",
)
"""The tests of one node's fault leaving the other nodes' commands alone."""


@ISOLATED
async def test_gathered_gets_fail_only_for_the_stalled_node(
    servers: Servers, store: RedisStore
) -> None:
    await store.add_many([(k, b"v" + k, None) for k in KEYS])
    victim = servers.nodes[0]
    on, off = await split_by_node(store, KEYS, victim)
    with stopped(victim):
        results = await asyncio.gather(*(store.get(k) for k in KEYS), return_exceptions=True)
        many = await store.get_many(KEYS)
    got = dict(zip(KEYS, results, strict=True))
    healthy_hits = [k for k in off if not isinstance(got[k], BaseException)]
    assert len(healthy_hits) == len(off)  # every key on a running primary is a hit
    assert all(got[k].value == b"v" + k for k in off)  # type: ignore[union-attr]
    for k in on:
        error = got[k]
        assert isinstance(error, StoreError)
        assert error.shard == f"127.0.0.1:{victim.port}"
    # get_many likewise: the stalled node's keys are misses, the others hits.
    found = dict(zip(KEYS, many, strict=True))
    assert all(found[k] is not None for k in off)
    assert all(found[k] is None for k in on)
    assert store.stats()["node_misses"] == len(on)


def test_a_lease_key_hashes_to_its_decisions_slot() -> None:
    from asyncache.stores.redis.layout import lease_name

    for prefix in (b"faults:", b"app:v2:", b"tagged{team}:"):
        for n in range(2000):
            key = os.urandom(16) if n % 2 else b"%d" % n
            name = lease_name(prefix, key, cluster=True)
            assert name.startswith(prefix + b"lease:")
            assert key_slot(name) == key_slot(prefix + key)
    # One Redis server needs no tag: the name is as it always was.
    assert lease_name(b"p:", b"k", cluster=False) == b"p:lease:k"


@ISOLATED
async def test_a_healthy_nodes_get_never_waits_for_a_stalled_nodes_batch(
    servers: Servers,
) -> None:
    """Gets of one loop turn are gathered per node: the gets of a running primary's
    keys are answered while the stalled one's still wait for it (gathered into one
    batch for the whole cluster, they all waited for the slowest node).

    The timeouts are a hang guard's: the stalled node's gets end when it resumes,
    so the order is the only thing the test reads, whatever the machine's speed.
    """
    async with opened(servers, GENEROUS_REDIS_TIMEOUTS) as store:
        await store.add_many([(k, b"v" + k, None) for k in KEYS])
        victim = servers.nodes[0]
        on, off = await split_by_node(store, KEYS, victim)
        for _ in range(2):
            with stopped(victim):
                slow = [asyncio.ensure_future(store.get(k)) for k in on[:5]]
                fast = [asyncio.ensure_future(store.get(k)) for k in off[:20]]
                got = await asyncio.gather(*fast)
                assert [entry.value for entry in got if entry] == [b"v" + k for k in off[:20]]
                # Answered while the stalled node's gets (sent in the same loop turn) are
                # still out: they were never one batch.
                assert not any(task.done() for task in slow)
            # The stalled node's gets were waiting on it, and it answers them once it runs.
            held = await asyncio.gather(*slow)
            assert [entry.value for entry in held if entry] == [b"v" + k for k in on[:5]]


@ISOLATED
async def test_gathered_adds_fail_only_for_the_stalled_node(
    servers: Servers, store: RedisStore
) -> None:
    """Adds gathered in one loop turn go out as one pipeline per node: the stalled
    primary's adds fail (with its name), every other primary's are stored."""
    victim = servers.nodes[0]
    on, off = await split_by_node(store, KEYS, victim)
    with stopped(victim):
        results = await asyncio.gather(
            *(store.add(k, b"v" + k, None) for k in KEYS), return_exceptions=True
        )
    got = dict(zip(KEYS, results, strict=True))
    stored = [k for k in off if not isinstance(got[k], BaseException)]
    assert len(stored) == len(off)
    assert all(got[k].value == b"v" + k for k in off)  # type: ignore[union-attr]
    for k in on:
        error = got[k]
        assert isinstance(error, StoreError)
        assert error.shard == f"127.0.0.1:{victim.port}"
    # They were stored indeed (read back once the node runs again).
    found = await store.get_many(off)
    assert all(
        entry is not None and entry.value == b"v" + k for k, entry in zip(off, found, strict=True)
    )


async def _cool(store: RedisStore, key: bytes) -> None:
    """Fail ``key``'s (stopped) node until the store cools it."""
    for _ in range(NODE_FAILURES):
        with pytest.raises(StoreError):
            await store.get(key)
    assert store.stats()["nodes_cooling"] == 1


async def test_a_cooling_node_gets_one_probe_not_one_per_caller(
    servers: Servers, store: RedisStore
) -> None:
    victim = servers.nodes[1]
    on, _ = await split_by_node(store, KEYS, victim)
    client = store.client
    assert isinstance(client, RedisCluster)
    with stopped(victim):
        await _cool(store, on[0])
        sent: list[list[bytes]] = []
        mget = client.mget_nonatomic

        async def counted(names: Any) -> Any:
            sent.append(list(names))
            return await mget(names)

        client.mget_nonatomic = counted  # type: ignore[method-assign]
        await asyncio.sleep(NODE_COOLDOWN + 0.05)
        # Callers in separate loop turns while the probe (a socket timeout long) is out.
        callers = []
        for k in on[:12]:
            callers.append(asyncio.ensure_future(store.get(k)))
            await asyncio.sleep(0.02)
        results = await asyncio.gather(*callers, return_exceptions=True)
    assert all(isinstance(r, StoreError) for r in results)
    # One request reached the node after its cool-down: the probe; the others failed at once.
    assert len(sent) == 1, sent


async def test_a_cooling_nodes_lease_steps_fail_at_once(
    servers: Servers, store: RedisStore
) -> None:
    victim = servers.nodes[2]
    on, off = await split_by_node(store, KEYS, victim)
    assert await store.acquire_lease(b"warm", b"me", 1.0)  # the scripts loaded everywhere
    client = store.client
    assert isinstance(client, RedisCluster)
    with stopped(victim):
        await _cool(store, on[0])
        sent = sent_to(client, victim)
        for k in on[1:6]:
            with pytest.raises(StoreError) as caught:
                await store.acquire_lease(k, b"me", 5.0)
            assert caught.value.shard == f"127.0.0.1:{victim.port}"
        # Each failed without a round trip (which would wait out a socket timeout):
        # not one command reached the cooling node.
        assert sent == []
        # The client's own method again: with the counting one in place, redis-py 5.0.1 tore
        # down the next healthy command's connection (the floors job, 2 of 2 engines).
        del client._execute_command
        if not BACKGROUND_REFRESH:
            # Before redis-py 8.2 the refresh the cooling node asked for (a task of the
            # store's) replaces every node's objects, tearing down a command out on one at
            # that moment (docs/stores.md; the floors job, once at 2 s timeouts): the
            # healthy lease goes out once it has run.
            refresher = client._refresher  # type: ignore[attr-defined]
            if refresher is not None:
                await asyncio.wait([refresher], timeout=WAIT)
        # The other primaries' leases are taken as ever.
        assert await store.acquire_lease(off[0], b"me", 5.0)


async def test_a_stalled_node_fills_only_its_own_in_flight_slots(servers: Servers) -> None:
    """``max_in_flight`` bounds each node of a cluster on its own: the lease steps stuck
    on a stalled primary hold that node's slots, and a healthy primary's key is served
    while they are stuck (one gate for the whole store made it wait for a slot, then
    fail).

    The timeouts are a hang guard's: the stuck steps end when the node resumes, so
    the order is the only thing the test reads, whatever the machine's speed.
    """
    slots = 4
    async with opened(servers, GENEROUS_REDIS_TIMEOUTS, max_connections=slots) as store:
        victim = servers.nodes[0]
        on, off = await split_by_node(store, KEYS, victim)
        assert await store.acquire_lease(b"warm", b"me", 1.0)
        client = store.client
        assert isinstance(client, RedisCluster)
        sent = sent_to(client, victim)
        with stopped(victim):
            stuck = [asyncio.ensure_future(store.acquire_lease(k, b"me", 5.0)) for k in on[:8]]
            # Every slot the whole store has (max_connections) is now the stalled node's.
            await until(lambda: len(sent) == slots, "the stalled node's slots", within=WAIT)
            served = asyncio.ensure_future(_lease_and_add(store, off[0], off[1]))
            done, _ = await asyncio.wait(
                [served, *stuck], timeout=WAIT, return_when=asyncio.FIRST_COMPLETED
            )
            # The healthy primary's key was served, and nothing of the stalled node's ended.
            assert done == {served}
            assert served.result() is True
            assert len(sent) == slots  # the other 4 wait for the stalled node's slots
        # They were held, not failed: the node answers them once it runs.
        assert await asyncio.gather(*stuck) == [True] * 8


async def _lease_and_add(store: RedisStore, leased: bytes, added: bytes) -> bool:
    taken = await store.acquire_lease(leased, b"me", 5.0)
    await store.add(added, b"decided", None)
    return taken


@ISOLATED
async def test_a_topology_refresh_never_holds_a_healthy_nodes_command(
    servers: Servers, store: RedisStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A refresh asks the nodes one by one (in a random order), and one that asks a
    stalled node waits out its socket timeout. Run inside the next command, as redis-py
    does, it held a healthy node's lease step that long (about every other time); the
    store's cluster client runs it in a task of its own.

    Here the refresh is held until the test lets it go (as one that asked the stalled
    node first is, every time): the healthy node's lease steps must all be answered
    while it is held, which a refresh run inside a command never lets happen.
    """
    victim, other = servers.nodes[0], servers.nodes[1]
    _, off = await split_by_node(store, KEYS, victim)
    client = store.client
    assert isinstance(client, RedisCluster)
    assert await store.acquire_lease(b"warm", b"me", 1.0)
    refreshes: list[tuple[Any, ...]] = []
    let_go = asyncio.Event()
    manager = client.nodes_manager
    learn = type(manager).initialize

    async def held(self: Any, *args: Any, **kwargs: Any) -> Any:
        if self is manager:
            refreshes.append(args)
            await let_go.wait()  # as a refresh that asks the stalled node waits out its timeout
        return await learn(self, *args, **kwargs)

    # On the class: the nodes manager has slots, no attributes of an instance's own.
    monkeypatch.setattr(type(manager), "initialize", held)
    with stopped(victim):
        try:
            await asyncio.sleep(TOPOLOGY_REFRESH + 0.05)  # past the refresh interval
            for k in off[:6]:
                # What a failed command does: ask for a refresh, naming the node it failed on.
                client._request_refresh(last_failed_node_name=f"127.0.0.1:{other.port}")
                step = asyncio.ensure_future(store.acquire_lease(k, b"me", 5.0))
                await asyncio.wait([step], timeout=WAIT)
                assert step.done(), "a healthy node's lease step waited for the held refresh"
                assert step.result() is True
            # The refresh ran (the first step started it, in a task of its own) and was
            # held all along.
            assert len(refreshes) == 1
        finally:
            let_go.set()  # a step that waited for it ends, and the store closes


@ISOLATED
async def test_the_leases_of_a_healthy_primarys_keys_outlive_another_primarys_stall(
    servers: Servers, store: RedisStore
) -> None:
    """A key's lease lives on its decision's primary: while another primary is stopped,
    leases on the running primaries' keys are taken, waited on and released."""
    victim = servers.nodes[0]
    _, off = await split_by_node(store, KEYS, victim)
    healthy = off[:40]
    # The lease scripts are loaded on every primary at first use: before the stall.
    assert await store.acquire_lease(b"warm", b"me", 1.0)
    await store.release_lease(b"warm", b"me")
    with stopped(victim):
        taken = await asyncio.gather(
            *(store.acquire_lease(k, b"me", 5.0) for k in healthy), return_exceptions=True
        )
        assert taken == [True] * len(healthy)
        assert [await store.acquire_lease(k, b"other", 5.0) for k in healthy[:5]] == [False] * 5
        await store.add(healthy[0], b"decided", None)
        await store.release_lease(healthy[0], b"me")
        entry = await store.wait_for_entry(healthy[0], 1.0)
        assert entry is not None and entry.value == b"decided"


async def test_a_timed_out_command_is_not_retried(servers: Servers, store: RedisStore) -> None:
    victim = servers.nodes[1]
    # A key's lease lives on its decision's node: pick a key of the victim's.
    on, _ = await split_by_node(store, KEYS, victim)
    client = store.client
    assert isinstance(client, RedisCluster)
    attempts: list[str] = []
    send = client._execute_command

    async def counted(node: Any, *args: Any, **kwargs: Any) -> Any:
        attempts.append(node.name)
        return await send(node, *args, **kwargs)

    client._execute_command = counted  # type: ignore[method-assign]
    with stopped(victim), pytest.raises(StoreError, match="Timeout"):
        await store.acquire_lease(on[0], b"token", 30)
    # One attempt: a slow server stays slow (the driver's default was three).
    assert attempts == [f"127.0.0.1:{victim.port}"]


@ISOLATED
async def test_the_cache_keeps_hitting_the_healthy_primaries(
    servers: Servers, store: RedisStore
) -> None:
    cache = DecisionCache(store, store_timeout=5.0, failure_threshold=5)
    runs: list[int] = []

    @cached_prediction(cache)
    async def predict(n: int) -> int:
        runs.append(n)
        return n * 2

    numbers = list(range(310))
    assert await asyncio.gather(*(predict(n) for n in numbers)) == [n * 2 for n in numbers]
    assert len(runs) == 310
    stored_keys = [predict.key(n) for n in numbers]
    victim = servers.nodes[2]
    on, _ = await split_by_node(store, stored_keys, victim)
    with stopped(victim):
        for _round in range(3):
            runs.clear()
            answers = await asyncio.gather(*(predict(n) for n in numbers))
            assert answers == [n * 2 for n in numbers]
            # Only the keys on the stalled primary are computed again, every round:
            # its failures never make the guard skip the whole cluster.
            assert len(runs) == len(on)
    assert cache.stats()["errors"] >= len(on)


def _master_of(port: int, node_port: int) -> bool:
    """Whether the node on ``node_port`` is a master that is not failing, as ``port`` sees it."""
    nodes = send_command(port, "CLUSTER", "NODES").decode()
    for line in nodes.splitlines():
        fields = line.split()
        if fields[1].split("@")[0].endswith(f":{node_port}"):
            flags = fields[2]
            return "master" in flags and "fail" not in flags
    return False


class _Failover(NamedTuple):
    store: RedisStore
    victim: RedisServer
    replica: RedisServer
    on: list[bytes]
    off: list[bytes]


@contextlib.asynccontextmanager
async def _failover_cluster(
    engine: str,
    tmp_path: Path,
    options: str = f"socket_timeout={SOCKET_TIMEOUT}&socket_connect_timeout={SOCKET_TIMEOUT}",
) -> AsyncIterator[_Failover]:
    """3 primaries with a replica each, 60 keys stored and replicated: the primary to
    lose, its replica, and the keys on it and elsewhere. ``options``: the store's
    client's (a URL's query); short timeouts by default, for a stalled primary."""
    cluster = start_cluster(
        server_binary(engine),
        require_binary("redis-cli"),
        tmp_path / "cluster",
        replicas=1,
        # Without it Redis itself refuses every key (CLUSTERDOWN) from the moment the
        # lost primary is marked failed until its replica is promoted.
        extra_args=["--cluster-require-full-coverage", "no"],
    )
    store = RedisStore.from_url(f"{cluster.url}?{options}", prefix=PREFIX)
    try:
        keys = KEYS[:60]
        await store.add_many([(k, b"v" + k, None) for k in keys])
        client = store.client
        assert isinstance(client, RedisCluster)
        primaries = {node.port for node in client.get_primaries()}
        victim = next(node for node in cluster.nodes if node.port in primaries)
        on, off = await split_by_node(store, keys, victim)
        replica = next(
            node
            for node in cluster.nodes
            if node.port not in primaries and _replica_of(node, victim)
        )
        # The replica holds every key before its primary dies (replication is asynchronous).
        await _until_async(lambda: send_command(replica.port, "DBSIZE") == str(len(on)).encode())
        yield _Failover(store, victim, replica, on, off)
    finally:
        await store.aclose()
        cluster.stop()


@ISOLATED
async def test_a_failover_costs_only_the_lost_primarys_keys_and_is_followed(
    redis_engine: str, tmp_path: Path
) -> None:
    # A killed primary's port refuses connections at once: finding it lost needs no
    # short timeout, and generous ones keep a loaded machine's slow replies from the
    # healthy primaries from counting as their errors.
    async with _failover_cluster(redis_engine, tmp_path, GENEROUS_REDIS_TIMEOUTS) as (
        store,
        victim,
        replica,
        on,
        off,
    ):
        client = store.client
        assert isinstance(client, RedisCluster)
        victim.kill()
        healthy_errors: list[str] = []
        deadline = time.monotonic() + WAIT  # a hang guard, never a timing assertion
        while True:
            assert time.monotonic() < deadline, "the failover was never followed"
            got = await asyncio.gather(*(store.get(k) for k in on + off), return_exceptions=True)
            healthy_errors += [str(g) for g in got[len(on) :] if isinstance(g, BaseException)]
            assert all(g is not None for g in got[len(on) :])  # no healthy key missed
            if all(not isinstance(g, BaseException) and g is not None for g in got[: len(on)]):
                break
            await asyncio.sleep(0.05)
        # The other primaries' keys hit through the whole failover.
        assert healthy_errors == []
        # The lost primary's keys came back from its promoted replica: the client
        # learned the new topology (its slots) by itself. How soon after the promotion
        # is the next test's (the moment of a promotion here is Redis's).
        assert _master_of(replica.port, replica.port)
        assert all(g.value == b"v" + k for g, k in zip(got[: len(on)], on, strict=True))  # type: ignore[union-attr]
        assert _owners(client, on) == {replica.port}


async def test_a_promotion_is_followed_within_the_refresh_interval(
    redis_engine: str, tmp_path: Path
) -> None:
    """The client asks for a topology refresh at the lost primary's first errors and runs
    one at once (it still names the dead primary); the promotion comes right after. The
    next refresh, and so the promoted replica's first hits, follow within 200 ms
    (``TOPOLOGY_REFRESH``): redis-py's default interval made it a second.

    What the test reads is the behaviour: the client refreshes at the store's interval,
    not redis-py's, and follows the promotion by itself (its slot map names the
    promoted replica, which serves the keys). How soon, in seconds, is measured by
    ``benchmarks/stalled_failover.py`` (the same refreshes, after a stalled primary's
    promotion), never asserted on a shared machine's clock."""
    async with _failover_cluster(redis_engine, tmp_path) as (store, victim, replica, on, _):
        client = store.client
        assert isinstance(client, RedisCluster)
        if BACKGROUND_REFRESH:  # redis-py's own bounded-rate refresh, at the store's interval
            assert client.nodes_manager._topology_refresh_min_interval == TOPOLOGY_REFRESH
        victim.kill()
        # Errors ask for a refresh; the next round runs it (and finds the old topology).
        for _round in range(2):
            got = await asyncio.gather(*(store.get(k) for k in on), return_exceptions=True)
            assert all(isinstance(g, StoreError) for g in got)
        assert _owners(client, on) == {victim.port}
        send_command(replica.port, "CLUSTER", "FAILOVER", "TAKEOVER")
        await _until_async(lambda: _master_of(replica.port, replica.port))
        deadline = time.monotonic() + WAIT  # a hang guard, never a timing assertion
        while True:
            assert time.monotonic() < deadline, "the promotion was never followed"
            got = await asyncio.gather(*(store.get(k) for k in on), return_exceptions=True)
            if all(not isinstance(g, BaseException) and g is not None for g in got):
                break
            await asyncio.sleep(0.01)
        assert all(g.value == b"v" + k for g, k in zip(got, on, strict=True))  # type: ignore[union-attr]
        assert _owners(client, on) == {replica.port}


def _owners(client: RedisCluster, keys: list[bytes]) -> set[int]:
    """The ports of the nodes ``client``'s slot map names as ``keys``' primaries."""
    return {
        client.nodes_manager.get_node_from_slot(key_slot(PREFIX.encode() + k)).port for k in keys
    }


def _replica_of(node: RedisServer, primary: RedisServer) -> bool:
    info = send_command(node.port, "INFO", "replication").decode()
    return f"master_port:{primary.port}" in info


async def _until_async(condition: Callable[[], bool]) -> None:
    deadline = time.monotonic() + 60  # a hang guard
    while not condition():
        assert time.monotonic() < deadline, "the condition never held"
        await asyncio.sleep(0.05)


async def test_a_stalled_primarys_promotion_is_followed_while_it_is_still_stalled(
    redis_engine: str, tmp_path: Path
) -> None:
    """A primary that stalls (SIGSTOP, not killed) answers with timeouts: no MOVED, no
    refused connection, so nothing told the client to learn the topology again, and
    the stalled node's keys went unserved until it resumed, though its replica had
    been promoted (issue 33.2: hits back at 15.25 s of a 15 s stall, the promotion
    at 3.5-4 s). A node that times out makes the client ask the other nodes: its
    keys are served by the promoted replica while the old primary is still stopped.
    """
    async with _failover_cluster(redis_engine, tmp_path) as (store, victim, replica, on, off):
        client = store.client
        assert isinstance(client, RedisCluster)
        with stopped(victim):
            # The stalled node's keys fail (each a timeout, then at once while it cools).
            got = await asyncio.gather(*(store.get(k) for k in on), return_exceptions=True)
            assert all(isinstance(g, StoreError) for g in got)
            # Its replica is promoted (as the cluster does after cluster-node-timeout;
            # TAKEOVER, because the stalled primary cannot agree to anything).
            send_command(replica.port, "CLUSTER", "FAILOVER", "TAKEOVER")
            await _until_async(lambda: _master_of(replica.port, replica.port))
            deadline = time.monotonic() + 60  # a hang guard, never a timing assertion
            while True:
                assert time.monotonic() < deadline, "the promotion was never followed"
                got = await asyncio.gather(*(store.get(k) for k in on), return_exceptions=True)
                if all(not isinstance(g, BaseException) and g is not None for g in got):
                    break
                await asyncio.sleep(0.05)
            # Served by the promoted replica, the old primary still stopped.
            assert all(g.value == b"v" + k for g, k in zip(got, on, strict=True))  # type: ignore[union-attr]
            assert _owners(client, on) == {replica.port}
            # The other primaries' keys were never lost.
            assert all(v is not None for v in await store.get_many(off))
