"""``asyncache export``: a store's live entries as JSON Lines, one entry a line."""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path
from typing import TextIO

from ..redact import redact_url
from .common import CliError, entry_count, load_rich, open_url
from .copy import progress_bar
from .entries import Moved, entry_line, walk

__all__ = ["run"]


def run(args: argparse.Namespace) -> int:
    """Run ``asyncache export``; returns the exit status."""
    # The entries go to stdout unless --output: then the bar may use the terminal.
    rich = load_rich() if args.output not in (None, "-") and not args.no_progress else None
    if args.output in (None, "-"):
        moved = asyncio.run(_export(args, sys.stdout, rich))
    else:
        try:
            with Path(args.output).open("w", encoding="utf-8") as out:
                moved = asyncio.run(_export(args, out, rich))
        except OSError as exc:
            raise CliError(f"cannot write {args.output}: {exc.strerror or exc}") from None
    print(
        f"exported {entry_count(moved.added)} from {redact_url(args.url)}",
        file=sys.stderr,
    )
    return 0


async def _export(args: argparse.Namespace, out: TextIO, rich: object) -> Moved:
    moved = Moved()
    store = open_url(args.url)
    try:
        total = await store.count() if rich is not None else None
        with progress_bar(rich, "exporting", total) as advance:
            shown = 0
            async for batch in walk(store, args.url, args.namespace, moved):
                out.writelines(entry_line(key, entry) + "\n" for key, entry in batch)
                moved.added += len(batch)
                advance(moved.read - shown)
                shown = moved.read
    finally:
        await store.aclose()
    return moved
