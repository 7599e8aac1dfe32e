"""The ``asyncache`` command: look at, prune, clear and warm stores; run the demo.

::

    asyncache stats URL [--live HTTP_URL] [--json]
    asyncache prune URL
    asyncache clear URL [--yes]
    asyncache warm module:function FILE.jsonl [--store URL] [--concurrency N]
    asyncache demo [demo options]

Every failure the user can cause (a bad URL, a missing extra, an unreadable
file, a module that does not import) is one line on stderr and a non-zero
exit; ``--traceback`` shows the whole story. Tables and the progress bar use
rich (``pip install 'asyncache-ml[cli]'``), imported only when needed.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import os
import sqlite3
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from .errors import ConfigurationError

__all__ = ["main"]

# Exit statuses: 1 the command failed, 2 the command line or an input is wrong.
_FAILED = 1
_USAGE = 2


class CliError(Exception):
    """A failure reported as one line and an exit status, without a traceback."""

    def __init__(self, message: str, status: int = _FAILED) -> None:
        super().__init__(message)
        self.status = status


# -- helpers -----------------------------------------------------------------


def _rich() -> Any:
    """The rich modules the command draws with, or a one-line install hint."""
    try:
        import rich.console
        import rich.progress
        import rich.table
    except ImportError:
        raise CliError(
            "the asyncache command needs rich: pip install 'asyncache-ml[cli]'"
        ) from None
    return rich


def _open(url: str, *, must_exist: bool = True) -> Any:
    """Open the store at ``url``; a missing SQLite file is an error, not a new database."""
    from .store import open_store

    if must_exist and url.lower().startswith("sqlite:"):
        path = _sqlite_path(url)
        if path != ":memory:" and not Path(path).exists():
            raise CliError(f"{url}: no such file: {path}")
    return open_store(url)


def _sqlite_path(url: str) -> str:
    from urllib.parse import unquote, urlsplit

    return unquote(urlsplit(url).path)[1:]


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


# -- stats ---------------------------------------------------------------------


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

    pattern = b"".join(b"\\" + bytes((c,)) if c in b"*?[]\\" else bytes((c,)) for c in store.prefix)
    async for name in store.client.scan_iter(match=pattern + b"*", count=1000):
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


def _stats(args: argparse.Namespace) -> int:
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
    store = _open(url)
    try:
        return await _inspect(store)
    finally:
        await store.aclose()


# -- prune and clear -------------------------------------------------------------


def _prune(args: argparse.Namespace) -> int:
    async def run() -> int:
        store = _open(args.url)
        try:
            return int(await store.prune())
        finally:
            await store.aclose()

    dropped = asyncio.run(run())
    note = " (Redis expires entries by itself)" if args.url.lower().startswith("redis") else ""
    print(f"pruned {dropped:,} expired entries from {args.url}{note}")
    return 0


def _clear(args: argparse.Namespace) -> int:
    async def count() -> int:
        store = _open(args.url)
        try:
            return int(await store.count())
        finally:
            await store.aclose()

    async def clear() -> None:
        store = _open(args.url)
        try:
            await store.clear()
        finally:
            await store.aclose()

    entries = asyncio.run(count())
    if not args.yes:
        try:
            answer = input(f"delete all {entries:,} entries in {args.url}? [y/N] ")
        except EOFError:
            answer = ""
        if answer.strip().lower() not in ("y", "yes"):
            print("aborted; nothing was deleted", file=sys.stderr)
            return _FAILED
    asyncio.run(clear())
    print(f"cleared {args.url} ({entries:,} entries)")
    return 0


# -- warm ------------------------------------------------------------------------


def _load_function(spec: str) -> Any:
    module_name, sep, attribute = spec.partition(":")
    if not sep or not module_name or not attribute:
        raise CliError(f"expected module:function, not {spec!r}", _USAGE)
    # Like uvicorn: modules next to where the command runs can be imported.
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        target: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise CliError(f"cannot import {module_name}: {exc}") from None
    for part in attribute.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise CliError(f"{module_name} has no attribute {attribute!r}") from None
    if not callable(getattr(target, "key", None)) or getattr(target, "cache", None) is None:
        raise CliError(f"{spec} is not a @cached_prediction function", _USAGE)
    return target


def _read_jsonl(path: str) -> list[Any]:
    try:
        text = sys.stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise CliError(f"cannot read {path}: {getattr(exc, 'strerror', None) or exc}") from None
    items: list[Any] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            items.append(json.loads(line))
        except ValueError as exc:
            raise CliError(f"{path}:{number}: not JSON: {exc}", _USAGE) from None
    return items


def _warm(args: argparse.Namespace) -> int:
    if args.concurrency < 1:
        raise CliError("--concurrency must be at least 1", _USAGE)
    items = _read_jsonl(args.file)
    function = _load_function(args.function)
    rich: Any = None if args.json else _rich()
    summary, seconds = asyncio.run(_warm_run(function, items, args, rich))
    if rich is None:
        report = {
            "computed": summary.computed,
            "cached": summary.cached,
            "failed": summary.failed,
            "seconds": round(seconds, 3),
            "errors": summary.errors,
        }
        print(json.dumps(report, indent=2))
    else:
        table = rich.table.Table(title=f"warmed {args.function}", title_justify="left")
        table.add_column("computed", justify="right")
        table.add_column("already cached", justify="right")
        table.add_column("failed", justify="right")
        table.add_column("seconds", justify="right")
        table.add_row(
            f"{summary.computed:,}", f"{summary.cached:,}", f"{summary.failed:,}", f"{seconds:.2f}"
        )
        console = rich.console.Console()
        console.print(table)
        for line in summary.errors:
            console.print(f"failed: {line}", markup=False, highlight=False)
    return 0 if summary.failed == 0 else _FAILED


async def _warm_run(
    function: Any, items: list[Any], args: argparse.Namespace, rich: Any
) -> tuple[Any, float]:
    cache = function.cache
    if args.store is not None:
        old = cache.store
        cache._use_store(_open(args.store, must_exist=False))
        await old.aclose()
    elif type(cache.store).__name__ == "MemoryStore":
        print(
            f"asyncache: note: {args.function} keeps decisions in memory, which ends with "
            "this command; pass --store URL to warm a shared store",
            file=sys.stderr,
        )
    started = time.perf_counter()
    try:
        if rich is None or args.no_progress:
            summary = await cache.warm(function, items, concurrency=args.concurrency)
        else:
            columns = (
                *rich.progress.Progress.get_default_columns(),
                rich.progress.MofNCompleteColumn(),
            )
            console = rich.console.Console(stderr=True)
            with rich.progress.Progress(*columns, console=console, transient=False) as bar:
                task = bar.add_task("warming", total=len(items))
                summary = await cache.warm(
                    function,
                    items,
                    concurrency=args.concurrency,
                    progress=lambda done: bar.update(task, completed=done.done),
                )
    finally:
        await cache.aclose()
    return summary, time.perf_counter() - started


# -- demo ------------------------------------------------------------------------


def _demo(args: argparse.Namespace) -> int:
    try:
        demo = importlib.import_module("asyncache.demo")
    except ModuleNotFoundError as exc:
        if exc.name != "asyncache.demo":
            raise CliError(f"the demo needs {exc.name}: pip install 'asyncache-ml[all]'") from None
        print("the asyncache demo is coming: it will live in asyncache/demo/")
        return 0
    status = demo.main(list(args.demo_args))
    return int(status or 0)


# -- the parser ------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="asyncache",
        description="Look at, prune, clear and warm asyncache stores.",
    )
    parser.add_argument("--traceback", action="store_true", help="show tracebacks of failures")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    stats = commands.add_parser("stats", help="entries, bytes and expiries of a store")
    stats.add_argument("url", nargs="?", help="store URL (sqlite:///path, redis://host...)")
    stats.add_argument("--live", metavar="HTTP_URL", help="a live process's stats JSON endpoint")
    stats.add_argument("--json", action="store_true", help="print JSON instead of tables")
    stats.set_defaults(run=_stats)

    prune = commands.add_parser("prune", help="drop expired entries")
    prune.add_argument("url", help="store URL")
    prune.set_defaults(run=_prune)

    clear = commands.add_parser("clear", help="drop every entry (asks first)")
    clear.add_argument("url", help="store URL")
    clear.add_argument("-y", "--yes", action="store_true", help="do not ask for confirmation")
    clear.set_defaults(run=_clear)

    warm = commands.add_parser("warm", help="compute known requests ahead of traffic")
    warm.add_argument("function", help="module:function, a @cached_prediction function")
    warm.add_argument(
        "file",
        help="JSON Lines: an object per line is keyword arguments, an array positional "
        "arguments, anything else the single argument; - reads stdin",
    )
    warm.add_argument("--store", metavar="URL", help="warm this store instead of the function's")
    warm.add_argument("--concurrency", type=int, default=8, help="calls at once (default 8)")
    warm.add_argument("--no-progress", action="store_true", help="no progress bar")
    warm.add_argument("--json", action="store_true", help="print the summary as JSON")
    warm.set_defaults(run=_warm)

    demo = commands.add_parser(
        "demo", help="a model service behind asyncache, under load", add_help=False
    )
    demo.add_argument("demo_args", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    demo.set_defaults(run=_demo)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``asyncache`` command; returns the exit status."""
    parser = _parser()
    # The demo has its own options (and --help): everything after "demo" is passed on.
    args, extra = parser.parse_known_args(argv)
    if extra:
        if args.command != "demo":
            parser.error(f"unrecognized arguments: {' '.join(extra)}")
        args.demo_args = [*extra, *args.demo_args]
    try:
        status: int = args.run(args)
    except KeyboardInterrupt:
        print("asyncache: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:
        if args.traceback:
            raise
        print(f"asyncache: error: {_one_line(exc)}", file=sys.stderr)
        if isinstance(exc, CliError):
            return exc.status
        return _USAGE if isinstance(exc, ConfigurationError) else _FAILED
    return status


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    if isinstance(exc, CliError | ConfigurationError | ImportError):
        return text or type(exc).__name__
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


if __name__ == "__main__":
    sys.exit(main())
