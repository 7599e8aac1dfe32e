"""Filling and reading stores from a test's setup, whatever the store."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import parse_qs, urlsplit

from asyncache.stores import open_store

if TYPE_CHECKING:
    from redis.asyncio import Redis


def fill(url: str, entries: Sequence[tuple[bytes, bytes, float | None]]) -> None:
    """Add ``(key, value, expires_at)`` entries to the store at ``url``, one ``add`` each.

    Sync, for fixtures of tests that then run a command on the store (the CLI).
    """

    async def adding() -> None:
        store = open_store(url)
        try:
            for key, value, expires_at in entries:
                await store.add(key, value, expires_at)
        finally:
            await store.aclose()

    asyncio.run(adding())


@contextlib.contextmanager
def sqlite_file(path: str | Path) -> Iterator[sqlite3.Connection]:
    """A plain ``sqlite3`` connection to ``path``: its statements committed at the end
    (rolled back on an error), and the connection closed.

    ``with sqlite3.connect(path)`` alone commits but never closes: the connection is
    closed when it is collected, and Python 3.13 warns of each one (``ResourceWarning:
    unclosed database``), which fails whichever test is running then.
    """
    with contextlib.closing(sqlite3.connect(path)) as db, db:
        yield db


async def command_calls(*clients: Redis) -> dict[str, int]:
    """Calls per command since the last ``CONFIG RESETSTAT``, summed over ``clients``' servers."""
    totals: dict[str, int] = {}
    for client in clients:
        for name, stat in (await client.info("commandstats")).items():
            command = name.removeprefix("cmdstat_")
            totals[command] = totals.get(command, 0) + stat["calls"]
    return totals


async def live_leases(url: str, prefix: str) -> int:
    """Lease keys under ``prefix`` that the Redis at ``url`` keeps with a time left."""
    from redis.asyncio import Redis

    client = Redis.from_url(url)
    try:
        live = 0
        async for name in client.scan_iter(match=f"{prefix}lease:*", count=1000):
            if await client.pttl(name) > 0:
                live += 1
        return live
    finally:
        await client.aclose()


async def lease_seconds_left(url: str) -> float:
    """The most time a lease in the store at ``url`` has left, as the store keeps it
    (0 without one): a SQLite file's lease rows, or a Redis ``prefix``'s lease keys
    (``prefix`` in the URL's query, as the tests give it)."""
    parts = urlsplit(url)
    if parts.scheme == "sqlite":
        from asyncache.stores.sqlite.url import parse_url

        with sqlite_file(parse_url(url)[0]) as db:
            row = db.execute("SELECT max(expires_at) FROM asyncache_leases").fetchone()
        return max((row[0] or 0.0) - time.time(), 0.0)
    from redis.asyncio import Redis

    prefix = parse_qs(parts.query)["prefix"][0]
    client = Redis.from_url(parts._replace(query="").geturl())
    try:
        left = 0
        async for name in client.scan_iter(match=f"{prefix}lease:*", count=1000):
            left = max(left, await client.pttl(name))
        return left / 1000
    finally:
        await client.aclose()
