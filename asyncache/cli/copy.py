"""``asyncache copy``: the live entries of one store into another, first decision winning there."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import time
from collections.abc import Callable, Iterator
from typing import Any

from ..redact import redact_url
from .common import USAGE, CliError, entry_count, load_rich, open_url
from .entries import Moved, add_batch, walk

__all__ = ["progress_bar", "run", "summary_lines"]


@contextlib.contextmanager
def progress_bar(rich: Any, label: str, total: int | None) -> Iterator[Callable[[int], None]]:
    """A rich progress bar on stderr (``rich`` ``None``: none); yields ``advance(n)``."""
    if rich is None:
        yield lambda n: None
        return
    columns = (*rich.progress.Progress.get_default_columns(), rich.progress.MofNCompleteColumn())
    console = rich.console.Console(stderr=True)
    with rich.progress.Progress(*columns, console=console, transient=False) as bar:
        task = bar.add_task(label, total=total)
        yield lambda n: bar.update(task, advance=n)


def summary_lines(moved: Moved, namespace: str | None) -> list[str]:
    """The lines under a copy's or an import's first line, for what was not added."""
    lines = []
    if moved.same:
        lines.append(f"  {entry_count(moved.same)} already there")
    if moved.kept:
        lines.append(
            f"  {entry_count(moved.kept)} kept as the destination had them "
            "(a live decision there wins)"
        )
    if moved.skipped:
        reason = f"not of namespace {namespace!r}" if namespace is not None else "expired"
        lines.append(f"  {entry_count(moved.skipped)} skipped: {reason}")
    if moved.unreadable:
        lines.append(
            f"  {entry_count(moved.unreadable)} skipped: "
            "not an asyncache value, no namespace to read"
        )
    return lines


def run(args: argparse.Namespace) -> int:
    """Run ``asyncache copy``; returns the exit status."""
    if args.src == args.dst:
        raise CliError("the source and the destination are the same store", USAGE)
    rich = None if args.json else load_rich()
    started = time.perf_counter()
    moved = asyncio.run(_copy(args, None if args.no_progress else rich))
    seconds = time.perf_counter() - started
    src, dst = redact_url(args.src), redact_url(args.dst)
    if args.json:
        print(json.dumps({**moved.as_dict(), "seconds": round(seconds, 3)}, indent=2))
        return 0
    print(f"copied {entry_count(moved.added)} from {src} to {dst} in {seconds:.2f}s")
    for line in summary_lines(moved, args.namespace):
        print(line)
    return 0


async def _copy(args: argparse.Namespace, rich: Any) -> Moved:
    moved = Moved()
    source = open_url(args.src)
    try:
        destination = open_url(args.dst, must_exist=False)
        try:
            total = await source.count() if rich is not None else None
            with progress_bar(rich, "copying", total) as advance:
                shown = 0
                async for batch in walk(source, args.src, args.namespace, moved):
                    await add_batch(destination, batch, moved)
                    advance(moved.read - shown)
                    shown = moved.read
        finally:
            await destination.aclose()
    finally:
        await source.aclose()
    return moved
