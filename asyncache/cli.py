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
rich (``pip install 'asyncache-ml[cli]'``), imported only when needed; so is
``asyncache._cli_stats``, where the ``stats`` command looks into stores.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import os
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from .errors import ConfigurationError

__all__ = ["main"]

T = TypeVar("T")

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
    from .stores.registry import open_store

    if must_exist and url.lower().startswith("sqlite:"):
        path = _sqlite_path(url)
        if path != ":memory:" and not Path(path).exists():
            raise CliError(f"{url}: no such file: {path}")
    return open_store(url)


def _sqlite_path(url: str) -> str:
    from urllib.parse import unquote, urlsplit

    return unquote(urlsplit(url).path)[1:]


async def _with_store(url: str, use: Callable[[Any], Awaitable[T]]) -> T:
    """``use(store)`` on the store at ``url``, closed afterwards."""
    store = _open(url)
    try:
        return await use(store)
    finally:
        await store.aclose()


# -- stats -----------------------------------------------------------------------


def _stats(args: argparse.Namespace) -> int:
    # Imported on use: its tables, SQL and Redis scans serve this one command.
    from ._cli_stats import stats

    return stats(args)


# -- prune and clear -------------------------------------------------------------


def _prune(args: argparse.Namespace) -> int:
    dropped = int(asyncio.run(_with_store(args.url, lambda store: store.prune())))
    note = " (Redis expires entries by itself)" if args.url.lower().startswith("redis") else ""
    print(f"pruned {dropped:,} expired entries from {args.url}{note}")
    return 0


def _clear(args: argparse.Namespace) -> int:
    entries = int(asyncio.run(_with_store(args.url, lambda store: store.count())))
    if not args.yes:
        try:
            answer = input(f"delete all {entries:,} entries in {args.url}? [y/N] ")
        except EOFError:
            answer = ""
        if answer.strip().lower() not in ("y", "yes"):
            print("aborted; nothing was deleted", file=sys.stderr)
            return _FAILED
    asyncio.run(_with_store(args.url, lambda store: store.clear()))
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
