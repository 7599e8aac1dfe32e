"""``asyncache stats``: what a store holds, and the counters a live process serves.

Split from ``asyncache.cli``, which imports it when the command runs: the store
inspection (read-only SQL on the file, a SCAN of Redis) and the tables are this
command's alone.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sqlite3
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .cli import _USAGE, CliError, _rich, _with_store

__all__ = ["stats"]


def _size(count: float | None) -> str:
    if count is None:
        return "n/a"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if count < 1024 or unit == "GiB":
            return f"{count:,.0f} {unit}" if unit == "B" else f"{count:,.1f} {unit}"
        count /= 1024
    raise AssertionError("unreachable")


def _when(timestamp: float | None, now: float) -> str:
    if timestamp is None:
        return "n/a"
    delta = timestamp - now
    ago = delta < 0
    seconds = abs(delta)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            text = f"{seconds / size:.1f}{unit}"
            break
    else:
        text = f"{seconds:.0f}s"
    return f"{text} ago" if ago else f"in {text}"


def _flatten(data: Any, prefix: str = "") -> dict[str, Any]:
    if not isinstance(data, dict):
        return {prefix or "value": data}
    flat: dict[str, Any] = {}
    for name, value in data.items():
        path = f"{prefix}.{name}" if prefix else str(name)
        if isinstance(value, dict):
            flat.update(_flatten(value, path))
        else:
            flat[path] = value
    return flat


async def _inspect(store: Any) -> dict[str, Any]:
    """What is in a store: entries, bytes and expiries, as far as its kind allows."""
    inner = getattr(store, "l2", None)
    if inner is not None:  # a tier: the shared L2 is what outlives this process
        return await _inspect(inner)
    kind = type(store).__name__
    if kind == "SQLiteStore":
        return await asyncio.to_thread(_inspect_sqlite, str(store.path))
    if kind == "RedisStore":
        return await _inspect_redis(store)
    return {"entries": await store.count()}


def _inspect_sqlite(path: str) -> dict[str, Any]:
    # Read-only and outside the store: inspecting must not create, migrate or lock the file.
    now = time.time()
    uri = Path(path).resolve().as_uri() + "?mode=ro"
    with sqlite3.connect(uri, uri=True, timeout=5.0) as db:
        tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master")}
        if "asyncache_entries" not in tables:
            raise CliError(f"{path} is not an asyncache SQLite store")
        row = db.execute(
            "SELECT count(*), coalesce(sum(length(value)), 0),"
            " count(*) FILTER (WHERE expires_at <= ?1),"
            " count(*) FILTER (WHERE expires_at IS NULL),"
            " min(expires_at) FILTER (WHERE expires_at > ?1),"
            " max(expires_at) FILTER (WHERE expires_at > ?1)"
            " FROM asyncache_entries",
            (now,),
        ).fetchone()
        leases = 0
        if "asyncache_leases" in tables:
            leases = db.execute(
                "SELECT count(*) FROM asyncache_leases WHERE expires_at > ?1", (now,)
            ).fetchone()[0]
    files = sum(os.path.getsize(name) for name in (path, path + "-wal") if os.path.exists(name))
    entries, stored_bytes, expired, forever, first, last = row
    return {
        "entries": entries,
        "live": entries - expired,
        "expired": expired,
        "without_expiry": forever,
        "stored_bytes": stored_bytes,
        "file_bytes": files,
        "next_expiry": first,
        "last_expiry": last,
        "leases": leases,
    }


async def _inspect_redis(store: Any) -> dict[str, Any]:
    # Redis drops expired keys itself: every key found is live. One SCAN, pipelined lookups.
    # The store's own escaping: what is counted here is exactly what the store owns.
    from .adapters.redis import _glob_escape

    lease_prefix = store.prefix + b"lease:"
    now = time.time()
    entries = leases = forever = stored_bytes = 0
    first: float | None = None
    last: float | None = None
    names: list[bytes] = []

    async def measure() -> None:
        nonlocal forever, stored_bytes, first, last
        pipe = store.client.pipeline(transaction=False)
        for name in names:
            pipe.strlen(name)
            pipe.pttl(name)
        replies = await pipe.execute()
        for length, ttl_ms in zip(replies[::2], replies[1::2], strict=True):
            stored_bytes += length
            if ttl_ms < 0:
                forever += 1
                continue
            expires = now + ttl_ms / 1000
            first = expires if first is None else min(first, expires)
            last = expires if last is None else max(last, expires)
        names.clear()

    async for name in store.client.scan_iter(match=_glob_escape(store.prefix) + b"*", count=1000):
        if name.startswith(lease_prefix):
            leases += 1
            continue
        entries += 1
        names.append(name)
        if len(names) >= 500:
            await measure()
    if names:
        await measure()
    return {
        "entries": entries,
        "live": entries,
        "expired": 0,
        "without_expiry": forever,
        "stored_bytes": stored_bytes,
        "next_expiry": first,
        "last_expiry": last,
        "leases": leases,
    }


def _fetch_live(url: str) -> dict[str, Any]:
    """The counters a live process serves as JSON (the middleware's stats endpoint)."""
    if not url.startswith(("http://", "https://")):
        raise CliError(f"--live needs an http:// or https:// URL, not {url!r}", _USAGE)
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            body = response.read()
    except urllib.error.HTTPError as exc:
        raise CliError(f"{url} answered {exc.code} {exc.reason}") from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise CliError(f"cannot reach {url}: {reason}") from None
    try:
        data = json.loads(body)
    except ValueError:
        raise CliError(f"{url} did not answer JSON") from None
    if not isinstance(data, dict):
        raise CliError(f"{url} did not answer a JSON object")
    return data


def stats(args: argparse.Namespace) -> int:
    """Run ``asyncache stats``; returns the exit status."""
    if args.url is None and args.live is None:
        raise CliError("stats needs a store URL, --live HTTP_URL, or both", _USAGE)
    report: dict[str, Any] = {}
    if args.url is not None:
        report["store"] = asyncio.run(_store_report(args.url))
    if args.live is not None:
        report["live"] = _flatten(_fetch_live(args.live))
    if args.json:
        print(json.dumps(report, indent=2, sort_keys=True))
        return 0
    rich = _rich()
    console = rich.console.Console()
    now = time.time()
    if "store" in report:
        info = report["store"]
        table = rich.table.Table(title=args.url, show_header=False, title_justify="left")
        table.add_column("", style="bold")
        table.add_column("", justify="right")
        rows: list[tuple[str, Callable[[Any], str], str]] = [
            ("entries", "{:,}".format, "entries"),
            ("live", "{:,}".format, "  live"),
            ("expired", "{:,}".format, "  expired (prune drops them)"),
            ("without_expiry", "{:,}".format, "  without expiry"),
            ("stored_bytes", _size, "bytes stored"),
            ("file_bytes", _size, "bytes (file + WAL)"),
            ("next_expiry", lambda t: _when(t, now), "next expiry"),
            ("last_expiry", lambda t: _when(t, now), "last expiry"),
            ("leases", "{:,}".format, "leases held"),
        ]
        for field, show, title in rows:
            if field in info:
                value = info[field]
                table.add_row(title, "n/a" if value is None else show(value))
        console.print(table)
    if "live" in report:
        table = rich.table.Table(title=args.live, title_justify="left")
        table.add_column("counter", style="bold")
        table.add_column("value", justify="right")
        for name, value in sorted(report["live"].items()):
            shown = f"{value:,.3f}" if isinstance(value, float) else f"{value:,}"
            table.add_row(name, shown if isinstance(value, int | float) else str(value))
        console.print(table)
    return 0


async def _store_report(url: str) -> dict[str, Any]:
    return await _with_store(url, _inspect)
