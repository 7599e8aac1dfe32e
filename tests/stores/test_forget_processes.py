"""``cache.forget`` across processes: every replica stops serving what was forgotten.

Over SQLite files, a redis-server and a 3-primary Redis Cluster, bare and with a
memory tier in front (``tiered-...``): a child process reads decisions through
its own cache (copying them into its tier), the parent forgets a tag or a
scope, and the child must compute the forgotten decisions again (its tier
dropped them on the store's announcement) while the others stay hits.

The concurrent-writes test: four processes add tagged decisions while the
parent forgets the tag; once the forget has returned and every call that began
before it has returned, none of those calls' decisions is readable.

Waits poll with a bounded number of looks; nothing asserts on wall time (the
time a tier took is printed, for the record). Run as ``python -m
tests.stores.test_forget_processes ROLE URL PREFIX ...`` this module is a child.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from asyncache import DecisionCache, cached_prediction
from asyncache.stores import DecisionStore, MemoryStore, TieredStore

from ..support import GENEROUS_REDIS_TIMEOUTS, require

ROOT = Path(__file__).resolve().parents[2]
NAMESPACE = "forget-test"
WRITERS = 4
KINDS = ["sqlite", "redis", "redis-cluster", "tiered-sqlite", "tiered-redis", "tiered-cluster"]


def open_store(kind: str, url: str, prefix: str) -> DecisionStore:
    """One process's store of ``kind`` on ``url`` (a tier of its own in front when tiered)."""
    if url.startswith("sqlite:"):
        from asyncache.stores.sqlite import SQLiteStore

        shared: DecisionStore = SQLiteStore(SQLiteStore.from_url(url).path, busy_timeout=30.0)
    else:
        from asyncache.stores.redis import RedisStore

        shared = RedisStore.from_url(f"{url}?{GENEROUS_REDIS_TIMEOUTS}", prefix=prefix)
    if kind.startswith("tiered"):
        return TieredStore(MemoryStore(), shared, l1_ttl=3600.0)
    return shared


def answering(cache: DecisionCache, computed: list[str]) -> Any:
    """The prediction every process shares: tagged by document (and all ``corpus``),
    scoped by tenant."""

    @cached_prediction(
        cache,
        namespace="answer",
        scope=lambda doc, tenant: tenant,
        tags=lambda doc, tenant: [f"doc:{doc}", "corpus"],
    )
    async def answer(doc: int, tenant: str) -> str:
        computed.append(f"{tenant}/{doc}")
        return f"answer about doc {doc} for {tenant}"

    return answer


# -- the children ----------------------------------------------------------------


async def reader(kind: str, url: str, prefix: str) -> None:
    """Answers ``doc tenant`` lines on stdin: ``hit`` or ``computed`` on stdout."""
    computed: list[str] = []
    cache = DecisionCache(open_store(kind, url, prefix), namespace=NAMESPACE, ttl=3600)
    answer = answering(cache, computed)
    loop = asyncio.get_running_loop()
    try:
        while True:
            line = await loop.run_in_executor(None, sys.stdin.readline)
            if not line.strip():
                return
            doc, tenant = line.split()
            before = len(computed)
            await answer(int(doc), tenant)
            sys.stdout.write("computed\n" if len(computed) > before else "hit\n")
            sys.stdout.flush()
    finally:
        await cache.aclose()


async def writer(kind: str, url: str, prefix: str, index: int, barrier: Path) -> None:
    """Adds tagged decisions until told to stop; prints each call's start, end and key."""
    cache = DecisionCache(open_store(kind, url, prefix), namespace=NAMESPACE, ttl=3600)
    computed: list[str] = []
    answer = answering(cache, computed)
    calls = []
    try:
        await answer(-1 - index, f"w{index}")  # connected (and the tables made) before the start
        (barrier / f"ready-{index}").touch()
        stop = barrier / "stop"
        n = 0
        while not stop.exists():
            doc = index * 1_000_000 + n
            began = time.time()
            await answer(doc, "acme")
            calls.append([doc, began, time.time()])
            n += 1
            await asyncio.sleep(0.001 * (n % 3))  # vary the spacing against the forget
    finally:
        await cache.aclose()
    json.dump(calls, sys.stdout)


# -- the parent's side --------------------------------------------------------------


def url_of(kind: str, request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if kind.endswith("sqlite"):
        return f"sqlite:///{tmp_path}/shared.db"
    try:
        import asyncache.stores.redis  # noqa: F401
    except ImportError as exc:
        require(False, f"RedisStore is not available: {exc}")
    fixture = "redis_cluster_url" if kind.endswith("cluster") else "redis_url"
    return str(request.getfixturevalue(fixture))


class Child:
    """A reader process, asked one call at a time."""

    def __init__(self, kind: str, url: str, prefix: str) -> None:
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.stores.test_forget_processes",
                "reader",
                kind,
                url,
                prefix,
            ],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    async def call(self, doc: int, tenant: str) -> str:
        return await asyncio.to_thread(self._call, doc, tenant)

    def _call(self, doc: int, tenant: str) -> str:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(f"{doc} {tenant}\n")
        self.process.stdin.flush()
        said = self.process.stdout.readline().strip()
        if not said:
            _, err = self.process.communicate(timeout=30)
            pytest.fail(f"the reader died: {err}")
        return said

    def close(self) -> None:
        if self.process.poll() is None:
            assert self.process.stdin is not None
            self.process.stdin.close()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        for stream in (self.process.stdout, self.process.stderr):
            if stream is not None:
                stream.close()


@pytest.fixture
async def shared(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[tuple[str, str, str, DecisionCache, list[str]]]:
    kind: str = request.param
    url = url_of(kind, request, tmp_path)
    prefix = f"asyncache-forget:{uuid.uuid4().hex}:"
    computed: list[str] = []
    cache = DecisionCache(open_store(kind, url, prefix), namespace=NAMESPACE, ttl=3600)
    try:
        yield kind, url, prefix, cache, computed
    finally:
        if not url.startswith("sqlite:"):
            await cache.store.clear()
        await cache.aclose()


def start_writers(kind: str, url: str, prefix: str, barrier: Path) -> list[subprocess.Popen[bytes]]:
    command = [sys.executable, "-m", "tests.stores.test_forget_processes", "writer", kind, url]
    return [
        subprocess.Popen(
            [*command, prefix, str(index), str(barrier)],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for index in range(WRITERS)
    ]


async def until_computed(child: Child, doc: int, tenant: str, looks: int = 500) -> int:
    """Ask until the child computes ``doc`` again; how many looks it took."""
    for look in range(1, looks + 1):
        if await child.call(doc, tenant) == "computed":
            return look
        await asyncio.sleep(0.01)
    pytest.fail(f"after {looks} looks, the child still served doc {doc} for {tenant}")


@pytest.mark.parametrize("shared", KINDS, indirect=True)
async def test_no_process_serves_a_forgotten_tag_and_the_rest_stay_hits(
    shared: tuple[str, str, str, DecisionCache, list[str]],
) -> None:
    kind, url, prefix, cache, computed = shared
    answer = answering(cache, computed)
    for doc in (42, 7):
        for tenant in ("acme", "globex"):
            await answer(doc, tenant)
    child = Child(kind, url, prefix)
    try:
        for doc in (42, 7):
            for tenant in ("acme", "globex"):
                assert await child.call(doc, tenant) == "hit"  # copied into its tier too
        began = time.perf_counter()
        assert await cache.forget(tags=["doc:42"]) == 2
        looks = await until_computed(child, 42, "acme")
        print(
            f"{kind}: the child computed doc:42 again after {looks} look(s), "
            f"{(time.perf_counter() - began) * 1000:.1f} ms after the forget began"
        )
        assert await child.call(42, "globex") == "computed"
        assert await child.call(7, "acme") == "hit"
        assert await child.call(7, "globex") == "hit"
        assert cache.stats()["forgotten"] == 2
    finally:
        child.close()


@pytest.mark.parametrize("shared", KINDS, indirect=True)
async def test_forget_a_scope_keeps_the_other_tenants(
    shared: tuple[str, str, str, DecisionCache, list[str]],
) -> None:
    kind, url, prefix, cache, computed = shared
    answer = answering(cache, computed)
    for doc in (1, 2, 3):
        for tenant in ("acme", "globex"):
            await answer(doc, tenant)
    child = Child(kind, url, prefix)
    try:
        assert await child.call(1, "acme") == "hit"
        assert await child.call(1, "globex") == "hit"
        assert await cache.forget(scope="acme") == 3
        await until_computed(child, 1, "acme")
        for doc in (2, 3):
            assert await child.call(doc, "acme") == "computed"
        for doc in (1, 2, 3):
            assert await child.call(doc, "globex") == "hit"
    finally:
        child.close()


@pytest.mark.parametrize(
    "shared", ["sqlite", "redis", "redis-cluster", "tiered-redis"], indirect=True
)
async def test_concurrent_writers_leave_nothing_readable_of_what_began_before(
    shared: tuple[str, str, str, DecisionCache, list[str]], tmp_path: Path
) -> None:
    kind, url, prefix, cache, computed = shared
    answer = answering(cache, computed)
    barrier = tmp_path / "barrier"
    barrier.mkdir()
    writers = start_writers(kind, url, prefix, barrier)
    try:
        for _ in range(12_000):
            if len(list(barrier.glob("ready-*"))) == WRITERS:
                break
            for process in writers:
                if process.poll() is not None:
                    pytest.fail(f"a writer exited: {process.communicate()[1].decode()}")
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.3)  # the writers are adding
        dropped = await cache.forget(tags=["corpus"])
        returned = time.time()
        (barrier / "stop").touch()
        calls: list[list[float]] = []
        for process in writers:
            out, err = await asyncio.to_thread(process.communicate, timeout=300)
            assert process.returncode == 0, err.decode()
            calls.extend(json.loads(out))
    finally:
        for process in writers:
            if process.poll() is None:
                process.kill()
                process.communicate()
    before = [int(doc) for doc, began, _ in calls if began < returned]
    assert before, "no call began before the forget returned"
    reading = DecisionCache(open_store(kind, url, prefix), namespace=NAMESPACE, ttl=3600)
    try:
        keys = [answer.key(doc, "acme") for doc in before]
        readable = [e for e in await reading.store.get_many(keys) if e is not None]
    finally:
        await reading.aclose()
    after = len(calls) - len(before)
    print(
        f"{kind}: {len(calls)} calls, {len(before)} began before the forget returned "
        f"({dropped} dropped), {after} after; readable of those before: {len(readable)}"
    )
    assert readable == []


async def test_memory_store_forgets_in_process() -> None:
    """A MemoryStore is one process's: its callers stop being served at once."""
    computed: list[str] = []
    cache = DecisionCache(MemoryStore(), namespace=NAMESPACE)
    answer = answering(cache, computed)
    for doc in (42, 7):
        for tenant in ("acme", "globex"):
            await answer(doc, tenant)
    assert await cache.forget(tags=["doc:42"]) == 2
    assert await cache.forget(scope="globex") == 1
    computed.clear()
    for doc in (42, 7):
        for tenant in ("acme", "globex"):
            await answer(doc, tenant)
    assert sorted(computed) == ["acme/42", "globex/42", "globex/7"]


if __name__ == "__main__":
    role, child_kind, child_url, child_prefix = sys.argv[1:5]
    if role == "reader":
        asyncio.run(reader(child_kind, child_url, child_prefix))
    else:
        asyncio.run(
            writer(child_kind, child_url, child_prefix, int(sys.argv[5]), Path(sys.argv[6]))
        )
