"""RedisStore on real redis-server processes: URLs, layout, isolation, cluster, leases, faults.

The behaviour every store shares is in ``test_contract.py``; this module tests
what is Redis's own. Each test works under a prefix of its own (``redis_prefix``)
on the session's servers, or on a server of its own (``redis_server``) when it
kills it, counts its commands or pauses it.
"""

from __future__ import annotations

import asyncio
import importlib
import math
import ssl
import struct
import sys
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest

from asyncache import DecisionCache, cached_prediction
from asyncache.errors import ConfigurationError, StoreError
from asyncache.stores import Entry, LeaseStore, open_store

from ..servers import RedisServer
from ..support import IN_CI, key, until
from ..support.stores import command_calls

try:
    from redis.asyncio import Redis
    from redis.asyncio.cluster import RedisCluster
    from redis.asyncio.connection import (
        ConnectionPool,
        SSLConnection,
        UnixDomainSocketConnection,
    )
    from redis.cluster import key_slot  # type: ignore[attr-defined]

    from asyncache.stores.redis import RedisStore
    from asyncache.stores.redis.layout import MAX_EXPIRES_AT
except ImportError:  # pragma: no cover - depends on the environment
    if IN_CI:
        raise
    pytest.skip("redis-py is not installed", allow_module_level=True)

HOUR = 3600.0
HEADER = struct.Struct(">Bd")


def stored_bytes(value: bytes, expires_at: float | None) -> bytes:
    """What RedisStore writes: its 9-byte header, then the value."""
    if expires_at is None:
        return HEADER.pack(0xA0, 0.0) + value
    return HEADER.pack(0xA1, expires_at) + value


@pytest.fixture
async def store(redis_url: str, redis_prefix: str) -> AsyncIterator[RedisStore]:
    opened = RedisStore.from_url(redis_url, prefix=redis_prefix)
    try:
        yield opened
    finally:
        sweeper = RedisStore.from_url(redis_url, prefix=redis_prefix)
        await sweeper.clear()
        await sweeper.aclose()
        await opened.aclose()


@pytest.fixture
async def raw(redis_url: str) -> AsyncIterator[Redis]:
    """A plain client on the same server, to look behind the store's back."""
    client = Redis.from_url(redis_url)
    try:
        yield client
    finally:
        await client.aclose()


def pool_of(store: RedisStore) -> ConnectionPool:
    assert isinstance(store.client, Redis)
    pool: ConnectionPool = store.client.connection_pool
    return pool


async def pexpiretime(client: Redis, name: bytes) -> int:
    """When Redis itself will drop ``name`` (Unix ms)."""
    when: int = await client.execute_command("PEXPIRETIME", name)  # type: ignore[no-untyped-call]
    return when


# -- URLs and options (no server needed: clients connect lazily) -------------


class TestFromUrl:
    async def test_host_port_db_and_query_options(self) -> None:
        store = RedisStore.from_url(
            "redis://127.0.0.1:7001/3?prefix=app:&socket_timeout=0.5&max_connections=7"
            "&socket_connect_timeout=0.25&retries=4&client_name=worker"
        )
        try:
            assert isinstance(store.client, Redis)
            kwargs = pool_of(store).connection_kwargs
            assert (kwargs["host"], kwargs["port"], kwargs["db"]) == ("127.0.0.1", 7001, 3)
            assert kwargs["socket_timeout"] == 0.5
            assert kwargs["socket_connect_timeout"] == 0.25
            assert kwargs["client_name"] == "worker"
            retry = kwargs["retry"]
            # get_retries() is redis-py 5.1's; 5.0.1 keeps the count in _retries.
            retries = retry.get_retries() if hasattr(retry, "get_retries") else retry._retries
            assert retries == 4
            assert store.prefix == b"app:"
            # max_connections commands at once, plus the lease listener's connection
            # and the one lone gets keep.
            assert store.max_in_flight == 7
            assert pool_of(store).max_connections == 9
        finally:
            await store.aclose()

    async def test_keyword_arguments_win_over_the_query(self) -> None:
        store = RedisStore.from_url(
            "redis://localhost?prefix=url:&socket_timeout=3",
            prefix="kw:",
            socket_timeout=0.1,
            pool_timeout=0.2,
        )
        try:
            assert store.prefix == b"kw:"
            assert pool_of(store).connection_kwargs["socket_timeout"] == 0.1
            assert store.pool_timeout == 0.2
        finally:
            await store.aclose()

    async def test_defaults(self) -> None:
        store = RedisStore.from_url("redis://")
        try:
            kwargs = pool_of(store).connection_kwargs
            assert (kwargs["host"], kwargs["port"], kwargs["db"]) == ("localhost", 6379, 0)
            assert kwargs["decode_responses"] is False
            assert store.prefix == b"asyncache:"
        finally:
            await store.aclose()

    async def test_only_stores_from_urls_enforce_their_own_timeouts(self) -> None:
        # None means "the default" (2 s): a URL cannot leave a store without a socket timeout.
        store = RedisStore.from_url("redis://", socket_timeout=None)
        client = Redis()
        own = RedisStore(client)
        try:
            assert pool_of(store).connection_kwargs["socket_timeout"] == 2.0
            assert store.pool_timeout == 2.0
            # Socket, connect and pool timeouts with retries add up to more than a
            # cache should wait: the engine keeps timing every call itself.
            assert store.enforces_timeouts is False
            assert own.enforces_timeouts is False
        finally:
            await store.aclose()
            await own.aclose()
            await client.aclose()

    async def test_credentials_are_percent_decoded(self) -> None:
        store = RedisStore.from_url("redis://al%40ice:p%3Ass@host:6380")
        try:
            kwargs = pool_of(store).connection_kwargs
            assert (kwargs["username"], kwargs["password"]) == ("al@ice", "p:ss")
        finally:
            await store.aclose()

    async def test_unix_socket(self) -> None:
        store = RedisStore.from_url("unix:///run/redis/redis.sock?db=2&prefix=u:")
        try:
            pool = pool_of(store)
            assert pool.connection_class is UnixDomainSocketConnection
            assert pool.connection_kwargs["path"] == "/run/redis/redis.sock"
            assert pool.connection_kwargs["db"] == 2
        finally:
            await store.aclose()

    async def test_rediss_builds_an_ssl_connection(self) -> None:
        store = RedisStore.from_url(
            "rediss://cache.internal:6380?ssl_cert_reqs=none&ssl_check_hostname=false"
        )
        try:
            pool = pool_of(store)
            assert pool.connection_class is SSLConnection
            connection = pool.make_connection()  # type: ignore[no-untyped-call]
            assert isinstance(connection, SSLConnection)
            context = connection.ssl_context.get()
            assert isinstance(context, ssl.SSLContext)
            assert context.verify_mode == ssl.CERT_NONE
            assert context.check_hostname is False
        finally:
            await store.aclose()

    async def test_rediss_verifies_certificates_by_default(self) -> None:
        store = RedisStore.from_url("rediss://cache.internal:6380")
        try:
            connection = pool_of(store).make_connection()  # type: ignore[no-untyped-call]
            assert isinstance(connection, SSLConnection)
            assert connection.ssl_context.get().verify_mode == ssl.CERT_REQUIRED
        finally:
            await store.aclose()

    async def test_cluster_url_names_every_node(self) -> None:
        store = RedisStore.from_url(
            "redis+cluster://10.0.0.1:7000, 10.0.0.2:7001,[::1]:7002?prefix=c:&max_connections=5"
        )
        try:
            assert isinstance(store.client, RedisCluster)
            assert store.cluster
            nodes = {
                (node.host, node.port) for node in store.client.nodes_manager.startup_nodes.values()
            }
            assert nodes == {("10.0.0.1", 7000), ("10.0.0.2", 7001), ("::1", 7002)}
            assert store.max_in_flight == 5
        finally:
            await store.aclose()

    async def test_rediss_cluster_uses_tls_on_every_node(self) -> None:
        store = RedisStore.from_url("rediss+cluster://a:7000,b:7001?ssl_cert_reqs=none")
        try:
            for node in store.client.nodes_manager.startup_nodes.values():  # type: ignore[union-attr]
                assert node.connection_class is SSLConnection
        finally:
            await store.aclose()

    @pytest.mark.parametrize(
        ("url", "message"),
        [
            ("memcached://localhost", "not a Redis URL"),
            ("localhost:6379", "not a Redis URL"),
            ("redis://localhost?colour=blue", "unknown RedisStore option"),
            ("redis://localhost?socket_timeout=soon", "socket_timeout"),
            ("redis://localhost?socket_timeout=-1", "socket_timeout"),
            ("redis://localhost?max_connections=0", "max_connections"),
            ("redis://localhost?max_connections=2.5", "max_connections"),
            ("redis://localhost?retries=-1", "retries"),
            ("redis://localhost?prefix=", "prefix"),
            ("redis://localhost?prefix=a&prefix=b", "twice"),
            ("redis://localhost?ssl_cert_reqs=none", "rediss"),
            ("rediss://localhost?ssl_cert_reqs=maybe", "ssl_cert_reqs"),
            ("redis://localhost/zero", "database number"),
            ("redis://localhost:port", "bad port"),
            ("redis://localhost:99999", "bad port"),
            ("redis://a:7000,b:7001", "several hosts"),
            ("redis+cluster://a:7000/2", "database 0"),
            ("redis+cluster://a:7000,:7001", "host is missing"),
            ("unix://", "unix:///path"),
        ],
    )
    def test_bad_urls_are_configuration_errors(self, url: str, message: str) -> None:
        with pytest.raises(ConfigurationError, match=message):
            RedisStore.from_url(url)

    def test_bad_keyword_option(self) -> None:
        with pytest.raises(ConfigurationError, match="unknown RedisStore option"):
            RedisStore.from_url("redis://localhost", sockettimeout=1)
        with pytest.raises(ConfigurationError, match="max_connections"):
            RedisStore.from_url("redis://localhost", max_connections=-3)

    def test_errors_do_not_show_the_password(self) -> None:
        with pytest.raises(ConfigurationError) as raised:
            RedisStore.from_url("redis://user:hunter2@localhost?colour=blue&colour=red")
        assert "hunter2" not in str(raised.value)

    async def test_open_store_dispatches_every_redis_scheme(self) -> None:
        for url in (
            "redis://localhost",
            "rediss://localhost",
            "unix:///tmp/redis.sock",
            "redis+cluster://localhost:7000",
            "rediss+cluster://localhost:7000",
        ):
            store = open_store(url)
            assert isinstance(store, RedisStore), url
            assert isinstance(store, LeaseStore)
            await store.aclose()

    async def test_rejects_a_decoding_client_and_an_empty_prefix(self) -> None:
        client = Redis(decode_responses=True)
        with pytest.raises(ConfigurationError, match="decode_responses"):
            RedisStore(client)
        with pytest.raises(ConfigurationError, match="empty"):
            RedisStore(Redis(), prefix="")
        await client.aclose()

    def test_import_without_redis_py_names_the_extra(self, monkeypatch: pytest.MonkeyPatch) -> None:
        for name in [n for n in sys.modules if n.startswith("asyncache.stores.redis")]:
            monkeypatch.delitem(sys.modules, name)
        for name in [n for n in sys.modules if n == "redis" or n.startswith("redis.")]:
            monkeypatch.setitem(sys.modules, name, None)
        with pytest.raises(ImportError, match=r"pip install 'asyncache-ml\[redis\]'"):
            importlib.import_module("asyncache.stores.redis")


# -- layout and round trips ---------------------------------------------------


class TestLayout:
    async def test_value_is_the_header_then_the_bytes(
        self, store: RedisStore, raw: Redis, redis_prefix: str
    ) -> None:
        expires_at = time.time() + HOUR
        await store.add(key(1), b"decision", expires_at)
        await store.add(key(2), b"forever", None)
        name = redis_prefix.encode() + key(1)
        assert await raw.get(name) == stored_bytes(b"decision", expires_at)
        assert await raw.get(redis_prefix.encode() + key(2)) == stored_bytes(b"forever", None)
        # Redis expires the key itself at the same instant (rounded up to the ms).
        assert await pexpiretime(raw, name) == math.ceil(expires_at * 1000)
        assert await raw.ttl(redis_prefix.encode() + key(2)) == -1
        assert await store.get(key(1)) == Entry(b"decision", expires_at)

    async def test_hit_add_and_batch_are_one_command_each(
        self, redis_server: RedisServer, redis_prefix: str
    ) -> None:
        store = RedisStore.from_url(redis_server.url, prefix=redis_prefix)
        counter = Redis.from_url(redis_server.url)
        try:
            # Connects (the handshake is not what is measured): the pool's connection
            # and the one lone gets keep.
            await store.get(key(0))
            await store.add(key(0), b"zero", time.time() + HOUR)
            await counter.config_resetstat()
            await store.add(key(1), b"one", time.time() + HOUR)
            await store.add(key(1), b"loser", time.time() + HOUR)
            await store.get(key(1))
            await store.get_many([key(1), key(2), key(3)])
            calls = await command_calls(counter)
            calls.pop("config|resetstat", None)
            calls.pop("info", None)
            assert calls == {"set": 2, "get": 1, "mget": 1}
        finally:
            await store.aclose()
            await counter.aclose()

    async def test_renew_moves_both_expiries(
        self, store: RedisStore, raw: Redis, redis_prefix: str
    ) -> None:
        name = redis_prefix.encode() + key(1)
        await store.add(key(1), b"v", time.time() + 60)
        later = time.time() + HOUR
        assert await store.renew(key(1), later)
        assert await store.get(key(1)) == Entry(b"v", later)
        assert await pexpiretime(raw, name) == math.ceil(later * 1000)
        assert await store.renew(key(1), None)
        assert await store.get(key(1)) == Entry(b"v", None)
        assert await raw.ttl(name) == -1
        assert not await store.renew(key(2), later)
        assert await raw.exists(redis_prefix.encode() + key(2)) == 0

    async def test_renew_leaves_a_foreign_value_alone(
        self, store: RedisStore, raw: Redis, redis_prefix: str
    ) -> None:
        name = redis_prefix.encode() + key(1)
        await raw.set(name, b"not ours")
        assert not await store.renew(key(1), time.time() + HOUR)
        assert await raw.get(name) == b"not ours"

    async def test_a_foreign_value_is_handed_over_whole(
        self, store: RedisStore, raw: Redis, redis_prefix: str
    ) -> None:
        # The engine's decoder rejects it, counts it as corrupt and deletes it.
        await raw.set(redis_prefix.encode() + key(1), b"garbage")
        assert await store.get(key(1)) == Entry(b"garbage", None)
        await store.delete(key(1))
        assert await store.get(key(1)) is None

    async def test_expired_by_our_clock_is_a_miss_and_is_replaced(
        self, store: RedisStore, raw: Redis, redis_prefix: str
    ) -> None:
        # Redis still holds an entry whose header says it expired (its clock runs behind).
        name = redis_prefix.encode() + key(1)
        await raw.set(name, stored_bytes(b"stale", time.time() - 5), px=60_000)
        assert await store.get(key(1)) is None
        assert await store.get_many([key(1)]) == [None]
        expires_at = time.time() + HOUR
        assert await store.add(key(1), b"fresh", expires_at) == Entry(b"fresh", expires_at)
        assert await raw.get(name) == stored_bytes(b"fresh", expires_at)
        assert store.stats()["stale_replaced"] == 1

    async def test_adding_an_expired_entry_stores_nothing(
        self, store: RedisStore, raw: Redis, redis_prefix: str
    ) -> None:
        past = time.time() - 1
        assert await store.add(key(1), b"late", past) == Entry(b"late", past)
        assert await raw.exists(redis_prefix.encode() + key(1)) == 0
        await store.add(key(2), b"live", None)
        assert await store.add(key(2), b"late", past) == Entry(b"live", None)

    @pytest.mark.parametrize("far", [math.inf, 1e300, 1e17])
    async def test_infinite_and_huge_expiries_are_no_expiry_or_clamped(
        self, store: RedisStore, raw: Redis, redis_prefix: str, far: float
    ) -> None:
        # inf is no expiry; past Redis's range (2**63 ms), an expiry is clamped.
        kept = None if far == math.inf else MAX_EXPIRES_AT
        names = [redis_prefix.encode() + key(n) for n in range(4)]
        assert await store.add(key(0), b"one", far) == Entry(b"one", kept)
        assert await store.add(key(0), b"loser", far) == Entry(b"one", kept)
        assert await store.add_many([(key(1), b"two", far), (key(2), b"three", far)]) == [
            Entry(b"two", kept),
            Entry(b"three", kept),
        ]
        assert await store.get_many([key(0), key(1), key(2)]) == [
            Entry(b"one", kept),
            Entry(b"two", kept),
            Entry(b"three", kept),
        ]
        await store.add(key(3), b"renewed", time.time() + 60)
        assert await store.renew(key(3), far)
        assert await store.get(key(3)) == Entry(b"renewed", kept)
        for name in names:
            if kept is None:
                assert await raw.pttl(name) == -1
            else:
                assert await pexpiretime(raw, name) == math.ceil(MAX_EXPIRES_AT * 1000)
        assert await raw.get(names[0]) == stored_bytes(b"one", kept)

    async def test_add_many_is_one_pipeline_and_first_wins_within_it(
        self, store: RedisStore
    ) -> None:
        expires_at = time.time() + HOUR
        await store.add(key(1), b"existing", None)
        winners = await store.add_many(
            [
                (key(1), b"new", expires_at),
                (key(2), b"first", expires_at),
                (key(2), b"second", None),
                (key(3), b"expired", time.time() - 1),
            ]
        )
        assert [entry.value for entry in winners] == [b"existing", b"first", b"first", b"expired"]
        assert await store.get_many([key(3), key(2), key(9), key(1)]) == [
            None,
            Entry(b"first", expires_at),
            None,
            Entry(b"existing", None),
        ]
        assert store.stats()["conflicts"] == 2

    async def test_aclose_is_idempotent_and_closes_only_an_owned_client(
        self, redis_url: str, redis_prefix: str
    ) -> None:
        owned = RedisStore.from_url(redis_url, prefix=redis_prefix)
        await owned.get(key(1))
        await owned.aclose()
        await owned.aclose()
        client = Redis.from_url(redis_url)
        lent = RedisStore(client, prefix=redis_prefix)
        await lent.get(key(1))
        await lent.aclose()
        await lent.aclose()
        assert await client.ping()
        await client.aclose()


# -- isolation ----------------------------------------------------------------


class TestPrefixIsolation:
    async def test_clear_and_count_touch_only_their_prefix(
        self, redis_url: str, redis_prefix: str, raw: Redis
    ) -> None:
        # "a*" and "a?[" would match the neighbour's keys as unescaped globs.
        mine = RedisStore.from_url(redis_url, prefix=redis_prefix + "a*?[")
        theirs = RedisStore.from_url(redis_url, prefix=redis_prefix + "ab")
        unrelated = (redis_prefix + "unrelated").encode()
        bare = b"no-prefix-" + redis_prefix.encode()
        try:
            await raw.set(unrelated, b"x")
            await raw.set(bare, b"y")
            await mine.add_many([(key(n), b"m", None) for n in range(30)])
            await theirs.add_many([(key(n), b"t", None) for n in range(7)])
            assert await mine.acquire_lease(key(1), b"token", 30)
            assert await mine.count() == 30  # the lease is not an entry
            assert await theirs.count() == 7
            await mine.clear()
            assert await mine.count() == 0
            assert await raw.exists((redis_prefix + "a*?[lease:").encode() + key(1)) == 0
            assert await theirs.count() == 7
            assert await theirs.get(key(3)) == Entry(b"t", None)
            assert await raw.get(unrelated) == b"x"
            assert await raw.get(bare) == b"y"
        finally:
            await theirs.clear()
            await raw.delete(unrelated, bare)
            await mine.aclose()
            await theirs.aclose()


# -- connections, timeouts, errors --------------------------------------------


class TestConnections:
    async def test_commands_in_flight_are_bounded(
        self, redis_server: RedisServer, redis_prefix: str
    ) -> None:
        store = RedisStore.from_url(
            redis_server.url, prefix=redis_prefix, max_connections=2, client_name="bounded"
        )
        inspector = Redis.from_url(redis_server.url)
        peak = 0

        async def one(n: int) -> Entry | None:
            nonlocal peak
            peak = max(peak, store.stats()["in_flight"])
            return await store.get(key(n % 5))

        try:
            await store.add_many([(key(n), b"v%d" % n, None) for n in range(5)])
            results = await asyncio.gather(*(one(n) for n in range(200)))
            assert [entry.value for entry in results if entry] == [
                b"v%d" % (n % 5) for n in range(200)
            ]
            assert peak <= 2
            clients = await inspector.client_list()
            assert sum(client["name"] == "bounded" for client in clients) in (1, 2)
        finally:
            await store.aclose()
            await inspector.aclose()

    async def test_waiting_for_a_connection_is_bounded_by_pool_timeout(
        self, redis_server: RedisServer, redis_prefix: str
    ) -> None:
        store = RedisStore.from_url(
            redis_server.url,
            prefix=redis_prefix,
            max_connections=1,
            pool_timeout=0.05,
            socket_timeout=10,
        )
        admin = Redis.from_url(redis_server.url)
        try:
            await store.add(key(1), b"v", None)
            # The server holds every client's commands (the admin's too) for a second.
            await admin.client_pause(1000)
            stuck = asyncio.create_task(store.get(key(1)))
            await until(lambda: store.stats()["in_flight"] > 0, "the first get to take the slot")
            with pytest.raises(StoreError, match="no connection came free"):
                await store.get(key(1))
            assert await stuck == Entry(b"v", None)
            assert store.stats()["in_flight"] == 0
        finally:
            await store.aclose()
            await admin.aclose()

    async def test_a_cancelled_waiter_never_keeps_a_slot(self) -> None:
        from asyncache.stores.redis.gate import Gate

        gate = Gate(1, None)
        assert gate.enter_now()
        cancelled_while_waiting = asyncio.create_task(gate.wait())
        handed_then_cancelled = asyncio.create_task(gate.wait())
        served = asyncio.create_task(gate.wait())
        await asyncio.sleep(0)
        cancelled_while_waiting.cancel()
        gate.leave()  # skips the cancelled waiter, hands the slot to the next
        handed_then_cancelled.cancel()  # before it could use the slot it was handed
        await asyncio.gather(cancelled_while_waiting, handed_then_cancelled, return_exceptions=True)
        async with asyncio.timeout(5):
            await served  # the slot went on to the last waiter
        assert gate.busy == 1
        gate.leave()
        assert gate.busy == 0
        assert gate.enter_now()

    async def test_a_dead_server_is_a_store_error(
        self, redis_server: RedisServer, redis_prefix: str
    ) -> None:
        store = RedisStore.from_url(
            redis_server.url, prefix=redis_prefix, socket_connect_timeout=0.5, retries=1
        )
        try:
            await store.add(key(1), b"v", None)
            redis_server.kill()
            for call in (
                store.get(key(1)),
                store.get_many([key(1)]),
                store.add(key(2), b"v", None),
                store.renew(key(1), None),
                store.count(),
            ):
                with pytest.raises(StoreError, match="redis: ConnectionError"):
                    await call
            assert store.stats()["in_flight"] == 0
            redis_server.restart()
            assert await store.get(key(1)) is None  # nothing persists: --save ""
            assert (await store.add(key(1), b"again", None)).value == b"again"
        finally:
            await store.aclose()


# -- Redis Cluster -------------------------------------------------------------


@pytest.fixture
async def cluster_store(redis_cluster_url: str, redis_prefix: str) -> AsyncIterator[RedisStore]:
    opened = RedisStore.from_url(redis_cluster_url, prefix=redis_prefix)
    try:
        yield opened
    finally:
        await opened.clear()
        await opened.aclose()


class TestCluster:
    async def test_get_many_spans_slots_and_nodes(
        self, cluster_store: RedisStore, redis_prefix: str
    ) -> None:
        keys = [key(n) for n in range(40)]
        slots = {key_slot(redis_prefix.encode() + k) for k in keys}
        client = cluster_store.client
        assert isinstance(client, RedisCluster)
        await client.initialize()
        owners = {client.nodes_manager.get_node_from_slot(slot).name for slot in slots}
        assert len(owners) == 3  # the keys live on every master
        expires_at = time.time() + HOUR
        await cluster_store.add_many([(k, k[-1:] * 3, expires_at) for k in keys[::2]])
        for node in client.get_primaries():
            await client.config_resetstat(target_nodes=node)
        got = await cluster_store.get_many(keys)
        assert got == [
            Entry(k[-1:] * 3, expires_at) if n % 2 == 0 else None for n, k in enumerate(keys)
        ]
        # One MGET per hash slot, each on the node that owns it.
        mgets = 0
        for node in client.get_primaries():
            info = await client.info("commandstats", target_nodes=node)
            stats: dict[str, Any] = next(iter(info.values())) if node.name in info else info
            mgets += stats.get("cmdstat_mget", {}).get("calls", 0)
        assert mgets == len(slots)

    async def test_count_and_clear_cover_every_primary_and_only_the_prefix(
        self, redis_cluster_url: str, cluster_store: RedisStore, redis_prefix: str
    ) -> None:
        # A sibling prefix: one that starts with another's would be inside it.
        other = RedisStore.from_url(redis_cluster_url, prefix=redis_prefix[:-1] + "-other:")
        try:
            await cluster_store.add_many([(key(n), b"v", None) for n in range(50)])
            await other.add_many([(key(n), b"o", None) for n in range(5)])
            assert await cluster_store.count() == 50
            await cluster_store.clear()
            assert await cluster_store.count() == 0
            assert await cluster_store.get_many([key(n) for n in range(50)]) == [None] * 50
            assert await other.count() == 5
        finally:
            await other.clear()
            await other.aclose()

    async def test_add_renew_and_leases_on_a_cluster(self, cluster_store: RedisStore) -> None:
        expires_at = time.time() + HOUR
        assert await cluster_store.add(key(1), b"a", expires_at) == Entry(b"a", expires_at)
        assert await cluster_store.add(key(1), b"b", None) == Entry(b"a", expires_at)
        assert await cluster_store.renew(key(1), None)
        assert await cluster_store.get(key(1)) == Entry(b"a", None)
        assert await cluster_store.acquire_lease(key(2), b"t", 30)
        waiter = asyncio.create_task(cluster_store.wait_for_entry(key(2), 30))
        await asyncio.sleep(0)
        await cluster_store.add(key(2), b"leased", None)
        await cluster_store.release_lease(key(2), b"t")
        assert await waiter == Entry(b"leased", None)


# -- describe -----------------------------------------------------------------


async def _fill(store: RedisStore, now: float) -> None:
    """Three entries (one without expiry) and one lease."""
    await store.add_many(
        [
            (key(1), b"x" * 100, now + HOUR),
            (key(2), b"x" * 100, now + 2 * HOUR),
            (key(3), b"x" * 10, None),
        ]
    )
    assert await store.acquire_lease(key(9), b"token", 60)


def _assert_filled(facts: dict[str, Any], now: float) -> None:
    assert (facts["entries"], facts["live"], facts["expired"]) == (3, 3, 0)
    assert facts["without_expiry"] == 1
    assert facts["stored_bytes"] == 210 + 3 * HEADER.size  # the values and their headers
    assert facts["leases"] == 1
    assert now + HOUR - 1 < facts["next_expiry"] <= now + HOUR + 1
    assert now + 2 * HOUR - 1 < facts["last_expiry"] <= now + 2 * HOUR + 1


class TestDescribe:
    async def test_describe_counts_only_its_prefix(
        self, store: RedisStore, redis_url: str, redis_prefix: str
    ) -> None:
        now = time.time()
        await _fill(store, now)
        # A neighbour whose prefix does not start with ours (prefixes must not nest).
        neighbour = RedisStore.from_url(redis_url, prefix=redis_prefix.rstrip(":") + "-n:")
        try:
            await neighbour.add(key(1), b"theirs", None)
            facts = await store.describe()
        finally:
            await neighbour.clear()
            await neighbour.aclose()
        _assert_filled(facts, now)
        assert (facts["kind"], facts["prefix"]) == ("redis", redis_prefix)
        assert facts["max_in_flight"] == store.max_in_flight == 64

    async def test_describe_an_empty_prefix(self, store: RedisStore) -> None:
        facts = await store.describe()
        assert (facts["entries"], facts["stored_bytes"], facts["leases"]) == (0, 0, 0)
        assert facts["next_expiry"] is None and facts["last_expiry"] is None

    async def test_describe_a_cluster(self, cluster_store: RedisStore) -> None:
        now = time.time()
        await _fill(cluster_store, now)
        facts = await cluster_store.describe()
        _assert_filled(facts, now)
        assert facts["kind"] == "cluster"


# -- leases -------------------------------------------------------------------


class TestLeases:
    async def test_a_lease_is_exclusive_and_released_only_by_its_holder(
        self, store: RedisStore, raw: Redis, redis_prefix: str
    ) -> None:
        name = (redis_prefix + "lease:").encode() + key(1)
        assert await store.acquire_lease(key(1), b"one", 5)
        assert not await store.acquire_lease(key(1), b"two", 5)
        assert 0 < await raw.pttl(name) <= 5000
        await store.release_lease(key(1), b"two")
        assert await raw.get(name) == b"5000:one"  # the ttl it was taken for, then the token
        await store.release_lease(key(1), b"one")
        assert await raw.exists(name) == 0
        assert await store.acquire_lease(key(1), b"two", 5)

    async def test_a_waiter_is_woken_by_the_release(
        self, redis_url: str, redis_prefix: str, store: RedisStore
    ) -> None:
        # The holder is another store, as another process would be.
        holder = RedisStore.from_url(redis_url, prefix=redis_prefix)
        try:
            assert await holder.acquire_lease(key(1), b"token", 30)
            waiter = asyncio.create_task(store.wait_for_entry(key(1), 30))
            await until(lambda: store.stats()["lease_waiters"] > 0, "the waiter")
            await holder.add(key(1), b"decided", None)
            await holder.release_lease(key(1), b"token")
            assert await waiter == Entry(b"decided", None)
        finally:
            await holder.aclose()

    async def test_the_release_message_reaches_the_waiter(
        self, store: RedisStore, raw: Redis, redis_prefix: str
    ) -> None:
        assert await store.acquire_lease(key(1), b"token", 30)
        waiter = asyncio.create_task(store.wait_for_entry(key(1), 30))
        # Wait for the listener's subscription, so the release cannot precede it.
        channel = (redis_prefix + "lease:released").encode()

        async def subscribed() -> bool:
            return bool((await raw.pubsub_numsub(channel))[0][1])

        await until(subscribed, "the listener's subscription")
        await store.release_lease(key(1), b"token")
        assert await waiter is None  # released without a decision: the caller computes
        assert store.stats()["lease_notifications"] == 1

    async def test_the_listener_subscribes_again_after_a_restart(
        self, redis_server: RedisServer, redis_prefix: str
    ) -> None:
        store = RedisStore.from_url(redis_server.url, prefix=redis_prefix)
        channel = (redis_prefix + "lease:released").encode()

        async def subscribed() -> bool:
            admin = Redis.from_url(redis_server.url)
            try:
                return bool((await admin.pubsub_numsub(channel))[0][1])
            finally:
                await admin.aclose()

        try:
            assert await store.acquire_lease(key(1), b"token", 30)
            assert await store.wait_for_entry(key(1), 0.01) is None  # starts the listener
            await until(subscribed, "the first subscription")
            redis_server.restart()
            await until(subscribed, "the subscription on the restarted server")
            assert await store.acquire_lease(key(1), b"token", 30)
            waiter = asyncio.create_task(store.wait_for_entry(key(1), 30))
            await until(lambda: store.stats()["lease_waiters"] > 0, "the waiter")
            # An announcement while the lease is still held and nothing is stored: only
            # the restarted subscription can count it, and the waiter's polls, which
            # find the lease held, cannot end its wait first.
            admin = Redis.from_url(redis_server.url)
            try:
                await admin.publish(channel, key(1))
            finally:
                await admin.aclose()
            await until(lambda: store.stats()["lease_notifications"] >= 1, "the announcement")
            assert not waiter.done()
            # The real release ends the wait, by the message or by a poll: either is right.
            await store.add(key(1), b"after", None)
            await store.release_lease(key(1), b"token")
            assert await waiter == Entry(b"after", None)
        finally:
            await store.aclose()

    @pytest.mark.parametrize(
        "planted",
        [(b"a token", None), (b"3000:a token", None), (b"3000:a token", 60_000)],
        ids=["no ttl, no expiry", "no expiry", "an expiry past its ttl"],
    )
    async def test_a_lease_key_outliving_its_own_ttl_is_dead(
        self,
        store: RedisStore,
        raw: Redis,
        redis_prefix: str,
        planted: tuple[bytes, int | None],
    ) -> None:
        # What `asyncache import` once wrote for a line keyed b"lease:" + K, or anything else.
        name = (redis_prefix + "lease:").encode() + key(1)
        value, px = planted
        await raw.set(name, value, px=px)
        assert await store.wait_for_entry(key(1), 30) is None  # no live lease: do not wait
        cache = DecisionCache(store, leases=True, lease_ttl=3, coalesce_timeout=5)
        calls = 0

        @cached_prediction(cache)
        async def decide(x: int) -> int:
            nonlocal calls
            calls += 1
            return x * 2

        cache_key = decide.key(1)
        await raw.set((redis_prefix + "lease:").encode() + cache_key, value, px=px)
        assert await decide(1) == 2
        assert calls == 1
        stats = cache.stats()
        # Taken over at once: no wait on it, so no coalesce_timeout ended one.
        assert (stats["lease_waits"], stats["coalesce_timeouts"]) == (0, 0), stats
        assert await raw.exists((redis_prefix + "lease:").encode() + cache_key) == 0  # released
        # A lease taken by acquire_lease is still honoured.
        assert await store.acquire_lease(key(3), b"held", 30)
        assert not await store.acquire_lease(key(3), b"other", 30)

    async def test_no_lease_and_no_entry_returns_at_once(self, store: RedisStore) -> None:
        assert await store.wait_for_entry(key(1), 30) is None
        await store.add(key(1), b"there", None)
        assert await store.wait_for_entry(key(1), 30) == Entry(b"there", None)

    async def test_a_held_lease_without_a_decision_times_out(self, store: RedisStore) -> None:
        assert await store.acquire_lease(key(1), b"token", 30)
        assert await store.wait_for_entry(key(1), 0.05) is None
        assert not await store.acquire_lease(key(1), b"other", 30)
        assert store.stats()["lease_waiters"] == 0

    async def test_an_expired_lease_ends_the_wait(self, store: RedisStore) -> None:
        assert await store.acquire_lease(key(1), b"token", 0.05)  # its holder died
        assert await store.wait_for_entry(key(1), 30) is None
        assert await store.acquire_lease(key(1), b"next", 30)

    async def test_leases_make_one_computation_across_caches(
        self, redis_url: str, redis_prefix: str
    ) -> None:
        # Two caches with stores of their own stand for two replicas.
        calls = 0
        started = asyncio.Event()
        release = asyncio.Event()

        async def slow_model(x: int) -> dict[str, int]:
            nonlocal calls
            calls += 1
            started.set()
            await release.wait()
            return {"label": x * 2}

        caches = [
            DecisionCache(RedisStore.from_url(redis_url, prefix=redis_prefix), leases=True)
            for _ in range(2)
        ]
        try:
            predicts = [cached_prediction(c, namespace="lease-test")(slow_model) for c in caches]
            first = asyncio.create_task(predicts[0](21))
            await started.wait()
            second = asyncio.create_task(predicts[1](21))
            await until(lambda: caches[1].stats()["lease_waits"] > 0, "the second replica to wait")
            release.set()
            assert await first == await second == {"label": 42}
            assert calls == 1
        finally:
            for cache in caches:
                await cache.aclose()


# -- through the engine: faults, secrets, corruption ---------------------------


async def _doubled(x: int) -> dict[str, int]:
    await asyncio.sleep(0)
    return {"label": x * 2, "x": x}


class TestThroughTheEngine:
    async def test_killing_redis_mid_load_never_fails_a_prediction(
        self, redis_server: RedisServer, redis_prefix: str
    ) -> None:
        store = RedisStore.from_url(
            redis_server.url,
            prefix=redis_prefix,
            socket_timeout=0.5,
            socket_connect_timeout=0.5,
            retries=1,
        )
        cache = DecisionCache(store, failure_threshold=3, failure_cooldown=0.05)
        calls = 0

        @cached_prediction(cache, namespace="fault")
        async def predict(x: int) -> dict[str, int]:
            nonlocal calls
            calls += 1
            return await _doubled(x)

        done = 0
        wrong: list[tuple[int, Any]] = []
        stop = asyncio.Event()

        async def client(offset: int) -> None:
            nonlocal done
            n = offset
            while not stop.is_set():
                x = n % 25
                result = await predict(x)
                if result != {"label": x * 2, "x": x}:
                    wrong.append((x, result))
                done += 1
                n += 7
                await asyncio.sleep(0)

        workers = [asyncio.create_task(client(offset)) for offset in range(8)]
        try:
            await until(lambda: cache.stats()["hits"] > 200, "warm hits")
            await asyncio.to_thread(redis_server.kill)
            calls_at_kill = done
            await until(
                lambda: cache.stats()["errors"] > 0 and done > calls_at_kill + 200, "errors"
            )
            await asyncio.to_thread(redis_server.start)
            hits_at_restart = store.stats()["hits"]
            await until(lambda: store.stats()["hits"] > hits_at_restart + 100, "hits again")
        finally:
            stop.set()
            outcomes = await asyncio.gather(*workers, return_exceptions=True)
            await cache.aclose()
        assert outcomes == [None] * len(workers)  # no exception reached a caller
        assert wrong == []
        stats = cache.stats()
        assert stats["errors"] > 0
        assert stats["hits"] > 0
        assert calls < done  # the cache answered most of them, before and after the outage

    async def test_a_ttl_past_redis_range_is_stored_and_never_cools_the_store(
        self, redis_url: str, redis_prefix: str
    ) -> None:
        cache = DecisionCache(
            RedisStore.from_url(redis_url, prefix=redis_prefix), ttl=1e300, failure_threshold=3
        )
        calls = 0

        @cached_prediction(cache, namespace="far")
        async def predict(x: int) -> dict[str, int]:
            nonlocal calls
            calls += 1
            return await _doubled(x)

        try:
            for x in range(12):
                assert await predict(x) == {"label": x * 2, "x": x}
            for x in range(12):
                assert await predict(x) == {"label": x * 2, "x": x}
            assert calls == 12
            stats = cache.stats()
            assert (stats["errors"], stats["hits"]) == (0, 12)
        finally:
            await cache.aclose()

    async def test_with_a_secret_an_unsigned_value_is_a_miss(
        self, redis_url: str, redis_prefix: str
    ) -> None:
        plain = DecisionCache(RedisStore.from_url(redis_url, prefix=redis_prefix))
        signed = DecisionCache(RedisStore.from_url(redis_url, prefix=redis_prefix), secret="s3cret")
        calls = {"plain": 0, "signed": 0}

        def model(which: str) -> Any:
            async def predict(x: int) -> dict[str, int]:
                calls[which] += 1
                return await _doubled(x)

            return predict

        try:
            predict_plain = cached_prediction(plain, namespace="secret")(model("plain"))
            predict_signed = cached_prediction(signed, namespace="secret")(model("signed"))
            assert predict_plain.key(3) == predict_signed.key(3)
            assert await predict_plain(3) == {"label": 6, "x": 3}
            assert await predict_signed(3) == {"label": 6, "x": 3}
            assert calls == {"plain": 1, "signed": 1}
            assert signed.stats()["corrupt"] == 1
            assert await predict_signed(3) == {"label": 6, "x": 3}  # now stored signed: a hit
            assert calls["signed"] == 1
            assert signed.stats()["hits"] == 1
        finally:
            await plain.aclose()
            await signed.aclose()

    @pytest.mark.parametrize("keep_header", [False, True])
    async def test_bytes_overwritten_in_redis_are_a_counted_deleted_miss(
        self, redis_url: str, redis_prefix: str, raw: Redis, keep_header: bool
    ) -> None:
        cache = DecisionCache(RedisStore.from_url(redis_url, prefix=redis_prefix))
        calls = 0

        @cached_prediction(cache, namespace="corrupt")
        async def predict(x: int) -> dict[str, int]:
            nonlocal calls
            calls += 1
            return await _doubled(x)

        try:
            assert await predict(5) == {"label": 10, "x": 5}
            name = redis_prefix.encode() + predict.key(5)
            good = await raw.get(name)
            assert isinstance(good, bytes)
            garbage = (good[:9] if keep_header else b"") + b"\x13not an envelope"
            await raw.set(name, garbage)
            assert await predict(5) == {"label": 10, "x": 5}
            assert calls == 2
            assert cache.stats()["corrupt"] == 1
            # The corrupt entry was deleted, so the recomputed decision took its place.
            assert await raw.get(name) not in (None, garbage)
            assert await predict(5) == {"label": 10, "x": 5}
            assert calls == 2
        finally:
            await cache.aclose()
            await RedisStore(raw, prefix=redis_prefix).clear()


@pytest.mark.parametrize("error", [AttributeError, TypeError])
async def test_a_connection_torn_down_inside_the_driver_is_a_store_error(
    store: RedisStore, monkeypatch: pytest.MonkeyPatch, error: type[Exception]
) -> None:
    """redis-py raises AttributeError or TypeError from inside itself when a connection is
    torn down under a command (a cluster client's topology refresh under load): a failed
    call (``StoreError``) for the store, a miss for the cache, never the driver's crash."""
    await store.add(key(1), b"kept", None)
    assert (await store.get(key(1))) == Entry(b"kept", None)

    def torn_down(self: object, command: object) -> None:
        raise error("'NoneType' object has no attribute 'writelines'")

    from redis.asyncio.connection import AbstractConnection

    # The one fault that cannot be made on purpose: the driver's connection state mid-race.
    monkeypatch.setattr(AbstractConnection, "_send_packed_command", torn_down)
    with pytest.raises(StoreError, match="writelines"):
        await store.get(key(1))
    with pytest.raises(StoreError, match="writelines"):
        await store.add(key(2), b"new", None)
    gets = await asyncio.gather(*(store.get(key(n)) for n in range(8)), return_exceptions=True)
    assert all(isinstance(result, StoreError) for result in gets), gets

    cache = DecisionCache(store, fingerprint="torn", store_timeout=5.0)
    runs = 0

    @cached_prediction(cache)
    async def predict(text: str) -> str:
        nonlocal runs
        runs += 1
        return text.upper()

    assert await predict("still answers") == "STILL ANSWERS"
    assert runs == 1
    assert cache.stats()["errors"] >= 1
