"""``asyncache warm``: compute known requests ahead of traffic, with a progress bar."""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from ..redact import redact_text
from ..stores.memory import MemoryStore
from .common import FAILED, USAGE, CliError, load_rich, open_url

__all__ = ["load_function", "read_jsonl", "run"]


def load_function(spec: str) -> Any:
    """The ``@cached_prediction`` function ``module:function`` names."""
    module_name, sep, attribute = spec.partition(":")
    if not sep or not module_name or not attribute:
        raise CliError(f"expected module:function, not {spec!r}", USAGE)
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
        raise CliError(f"{spec} is not a @cached_prediction function", USAGE)
    return target


def read_jsonl(path: str) -> list[Any]:
    """The inputs in a JSON Lines file (``-``: stdin); every line is checked first."""
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
            raise CliError(f"{path}:{number}: not JSON: {exc}", USAGE) from None
    return items


def run(args: argparse.Namespace) -> int:
    """Run ``asyncache warm``; returns the exit status."""
    if args.concurrency < 1:
        raise CliError("--concurrency must be at least 1", USAGE)
    items = read_jsonl(args.file)
    function = load_function(args.function)
    rich: Any = None if args.json else load_rich()
    summary, seconds = asyncio.run(_warm(function, items, args, rich))
    # A failure's message may quote the store URL: never its password.
    errors = [redact_text(line, [args.store or ""]) for line in summary.errors]
    if rich is None:
        report = {
            "computed": summary.computed,
            "cached": summary.cached,
            "failed": summary.failed,
            "seconds": round(seconds, 3),
            "errors": errors,
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
        for line in errors:
            console.print(f"failed: {line}", markup=False, highlight=False)
    return 0 if summary.failed == 0 else FAILED


async def _warm(
    function: Any, items: list[Any], args: argparse.Namespace, rich: Any
) -> tuple[Any, float]:
    cache = function.cache
    if args.store is not None:
        old = cache.store
        cache.use_store(open_url(args.store, must_exist=False))
        await old.aclose()
    elif isinstance(cache.store, MemoryStore):
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
