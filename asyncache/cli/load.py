"""``asyncache import``: entries from JSON Lines (an export) into a store; its own entries win."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

from ..redact import redact_url
from ..stores.protocol import Entry, is_live
from .common import CliError, entry_count, load_rich, open_url
from .copy import progress_bar, summary_lines
from .entries import BATCH, Moved, add_batch, parse_line

__all__ = ["read_entries", "run"]


def read_entries(path: str) -> list[tuple[bytes, Entry]]:
    """Every entry of an export (``-``: stdin); the whole file is checked before any is added."""
    try:
        text = sys.stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise CliError(f"cannot read {path}: {getattr(exc, 'strerror', None) or exc}") from None
    return [
        parse_line(line, f"{path}:{number}")
        for number, line in enumerate(text.splitlines(), start=1)
        if line.strip()
    ]


def run(args: argparse.Namespace) -> int:
    """Run ``asyncache import``; returns the exit status."""
    entries = read_entries(args.file)
    rich = None if args.json or args.no_progress else load_rich()
    started = time.perf_counter()
    moved = asyncio.run(_import(args, entries, rich))
    seconds = time.perf_counter() - started
    if args.json:
        print(json.dumps({**moved.as_dict(), "seconds": round(seconds, 3)}, indent=2))
        return 0
    print(f"imported {entry_count(moved.added)} into {redact_url(args.url)} in {seconds:.2f}s")
    for line in summary_lines(moved, None):
        print(line)
    return 0


async def _import(args: argparse.Namespace, entries: list[tuple[bytes, Entry]], rich: Any) -> Moved:
    moved = Moved(read=len(entries))
    store = open_url(args.url, must_exist=False)
    try:
        with progress_bar(rich, "importing", len(entries)) as advance:
            for start in range(0, len(entries), BATCH):
                chunk = entries[start : start + BATCH]
                now = time.time()
                batch = [(key, entry) for key, entry in chunk if is_live(entry.expires_at, now)]
                moved.skipped += len(chunk) - len(batch)
                if batch:
                    await add_batch(store, batch, moved)
                advance(len(chunk))
    finally:
        await store.aclose()
    return moved
