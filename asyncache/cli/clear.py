"""``asyncache clear``: drop every entry of a store, after asking."""

from __future__ import annotations

import argparse
import asyncio
import sys

from ..redact import redact_url
from .common import FAILED, entry_count, with_store

__all__ = ["run"]


def run(args: argparse.Namespace) -> int:
    """Run ``asyncache clear``; returns the exit status."""
    shown = redact_url(args.url)
    count = int(asyncio.run(with_store(args.url, lambda store: store.count())))
    if not args.yes:
        what = "the 1 entry" if count == 1 else f"all {entry_count(count)}"
        try:
            answer = input(f"delete {what} in {shown}? [y/N] ")
        except EOFError:
            answer = ""
        if answer.strip().lower() not in ("y", "yes"):
            print("aborted; nothing was deleted", file=sys.stderr)
            return FAILED
    asyncio.run(with_store(args.url, lambda store: store.clear()))
    print(f"cleared {shown} ({entry_count(count)})")
    return 0
