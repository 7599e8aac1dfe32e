"""Store faults as issue 22's attacks ran them: a stalled cluster primary, a killed lease owner.

Run: ``.venv/bin/python benchmarks/faults.py`` (``--json PATH`` writes the table).

1. A stalled primary. A private Redis Cluster of three primaries; 310 keys
   stored, 10 of them on the primary that is then stopped with ``SIGSTOP``
   (``socket_timeout=0.5``). Then: 416 concurrent gets through the store for
   keys on the running primaries, gathered with 10 for keys on the stopped one
   (how many of the 416 failed), three rounds of 310
   concurrent calls through the cache (model runs per round: the 10 keys on
   the stopped primary are the least possible), and one lone store call to
   the stopped primary (seconds: one ``socket_timeout``, not three).
2. A killed lease owner. A second process (``tests/engine/lease_worker.py``) takes
   the lease on a key and runs a 30 s model; a caller here waits on it. After
   five lease ttls the owner is killed with ``kill -9``: seconds from the kill
   to the caller's answer (the lease's default ttl is 1 s), on SQLite and on
   Redis, and whether the live owner kept its lease until then.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import ROOT, Row, passes, render, start_redis, start_redis_cluster, write_rows_json

from asyncache import DecisionCache, cached_prediction, open_store
from asyncache.errors import StoreError

NOTES = [
    "A stalled primary: a private 3-primary Redis Cluster, one primary stopped with SIGSTOP, "
    "socket_timeout=0.5; the cache's store_timeout is its default (1 s).",
    "Before (this script on the commit before issue 22's fixes, e8255c5): 415 of the 416 "
    "gets on running primaries failed; 310 model runs in each of the three rounds; a lone "
    "get took 1.7 s and a lone acquire_lease 1.78 s (three socket timeouts).",
    "A killed lease owner: a 30 s model in a second process, killed after 5 lease ttls. "
    "Before: the lease lived its whole ttl (10 s then) unrenewed, so the waiter took the "
    "live owner's lease over after 10 s and ran the model a second time (kept: 0), and a "
    "waiter of a killed owner waited up to 10 s.",
]


async def stalled_primary(workdir: Path) -> list[Row]:
    from redis.cluster import key_slot  # type: ignore[attr-defined]

    from asyncache.stores.redis import RedisStore

    cluster = start_redis_cluster(workdir)
    if cluster is None:
        return [Row("stalled primary", None, "", "needs redis-server and redis-cli", "skipped")]
    victim = cluster.nodes[0]
    assert victim.process is not None
    store = RedisStore.from_url(f"{cluster.url}?socket_timeout=0.5", prefix="attack:")
    cache = DecisionCache(store)
    runs: list[int] = []

    @cached_prediction(cache, namespace="attack")
    async def predict(n: int) -> int:
        runs.append(n)
        return n

    try:
        client = store.client
        await client.initialize()  # type: ignore[union-attr]
        owners = client.nodes_manager  # type: ignore[union-attr]

        def on_victim(name: bytes) -> bool:
            return bool(owners.get_node_from_slot(key_slot(b"attack:" + name)).port == victim.port)

        chosen: list[int] = []
        on = 0
        for n in range(100_000):
            if len(chosen) == 310:
                break
            hit_victim = on_victim(predict.key(n))
            if hit_victim and on < 10:
                on += 1
                chosen.append(n)
            elif not hit_victim and len(chosen) - on < 300:
                chosen.append(n)
        await asyncio.gather(*(predict(n) for n in chosen))
        candidates = [b"h%06d" % n for n in range(5000)]
        healthy = [k for k in candidates if not on_victim(k)][:416]
        stalled = [k for k in candidates if on_victim(k)][:10]
        await store.add_many([(k, b"v", None) for k in healthy + stalled])
        # A store of its own for the lone calls, so that the other rounds' failures
        # (which cool the stopped node: its keys then fail at once) do not count.
        lone_store = RedisStore.from_url(f"{cluster.url}?socket_timeout=0.5", prefix="attack:")
        await lone_store.get(healthy[0])
        os.kill(victim.process.pid, signal.SIGSTOP)
        try:
            # Gathered with gets for 10 keys on the stopped primary, as callers' gets are.
            got = await asyncio.gather(
                *(store.get(k) for k in healthy + stalled), return_exceptions=True
            )
            failed = sum(isinstance(g, BaseException) for g in got[: len(healthy)])
            per_round = []
            for _ in range(3):
                runs.clear()
                await asyncio.gather(*(predict(n) for n in chosen))
                per_round.append(len(runs))
            lone_key = next(k for k in (b"l%06d" % n for n in range(5000)) if on_victim(k))
            lone_lease = next(
                k for k in (b"m%06d" % n for n in range(5000)) if on_victim(b"lease:" + k)
            )
            started = time.monotonic()
            try:
                await lone_store.get(lone_key)
            except StoreError:
                pass
            lone = time.monotonic() - started
            started = time.monotonic()
            try:
                await lone_store.acquire_lease(lone_lease, b"token", 10)
            except StoreError:
                pass
            lone_command = time.monotonic() - started
        finally:
            os.kill(victim.process.pid, signal.SIGCONT)
            await lone_store.aclose()
    finally:
        await cache.aclose()
        await store.aclose()
        cluster.stop()
    return [
        Row(
            "gets on running primaries that failed (of 416)",
            failed,
            "gets",
            "0",
            passes(failed == 0),
        ),
        *(
            Row(
                f"model runs, round {i + 1} (310 keys, 10 on the stopped primary)",
                count,
                "runs",
                "10",
                passes(count == 10),
            )
            for i, count in enumerate(per_round)
        ),
        Row(
            "a lone get to the stopped primary",
            lone,
            "s",
            "one socket_timeout (0.5 s)",
            passes(lone < 1.0),
        ),
        Row(
            "a lone command (acquire_lease) to the stopped primary",
            lone_command,
            "s",
            "one socket_timeout (0.5 s)",
            passes(lone_command < 1.0),
        ),
    ]


def _spawn(workdir: Path, store: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.engine.lease_worker",
            "--store",
            store,
            "--runs",
            str(workdir / "runs.log"),
            "--ready",
            str(workdir / "ready"),
            "--go",
            str(workdir / "go"),
            "--out",
            str(workdir / "owner.json"),
            "--signals",
            str(workdir),
            "--keys",
            "1",
            "--per-key",
            "1",
            "--compute",
            "30",
        ],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        text=True,
    )


async def _until_exists(path: Path) -> None:
    deadline = time.monotonic() + 120
    while not await asyncio.to_thread(path.exists):
        if time.monotonic() > deadline:
            raise SystemExit(f"{path} never appeared")
        await asyncio.sleep(0.01)


async def killed_owner(workdir: Path, name: str, url: str) -> list[Row]:
    await asyncio.to_thread(workdir.mkdir, parents=True, exist_ok=True)
    owner = _spawn(workdir, url)
    try:
        await _until_exists(workdir / "ready")
        await asyncio.to_thread((workdir / "go").touch)
        await _until_exists(workdir / "runs.log")  # the owner's 30 s model runs
        async with DecisionCache(
            open_store(url), namespace="fleet", leases=True, store_timeout=30
        ) as cache:

            @cached_prediction(cache, namespace="predict")
            async def predict(key: int) -> int:
                return key

            waiter = asyncio.create_task(predict(0))
            await asyncio.sleep(5 * cache.lease_ttl)
            kept = not waiter.done() and cache.stats()["lease_takeovers"] == 0
            os.kill(owner.pid, signal.SIGKILL)
            killed = time.monotonic()
            await waiter
            answered = time.monotonic() - killed
            await cache.store.aclose()
    finally:
        if owner.poll() is None:
            owner.kill()
        owner.wait()
    return [
        Row(
            f"{name}: the live owner kept its lease for 5 lease ttls",
            float(kept),
            "yes=1",
            "1",
            passes(kept),
        ),
        Row(
            f"{name}: a waiter answered after the owner's kill -9",
            answered,
            "s",
            "< 2 s",
            passes(answered < 2.0),
        ),
    ]


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--json", help="write the table as JSON here")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        rows = await stalled_primary(workdir)
        rows += await killed_owner(
            workdir / "sqlite", "SQLite", f"sqlite:///{workdir / 'leases.db'}?busy_timeout=30"
        )
        server = start_redis(workdir)
        if server is not None:
            try:
                rows += await killed_owner(
                    workdir / "redis", "Redis", f"{server.url}?prefix=attack:"
                )
            finally:
                server.stop()
    print(render(rows))
    if args.json:
        write_rows_json(
            Path(args.json),
            title="Faults: a stalled cluster primary, a killed lease owner",
            command="python benchmarks/faults.py",
            rows=rows,
            notes=NOTES,
        )


if __name__ == "__main__":
    asyncio.run(main())
