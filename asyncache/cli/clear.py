"""``asyncache clear``: drop every entry of a store, after asking."""

from __future__ import annotations

import argparse
import asyncio
import sys

from ..redact import redact_url
from .common import FAILED, with_store

__all__ = ["run"]


def run(args: argparse.Namespace) -> int:
    """Run ``asyncache clear``; returns the exit status."""
    shown = redact_url(args.url)
    entries = int(asyncio.run(with_store(args.url, lambda store: store.count())))
    if not args.yes:
        try:
            answer = input(f"delete all {entries:,} entries in {shown}? [y/N] ")
        except EOFError:
            answer = ""
        if answer.strip().lower() not in ("y", "yes"):
            print("aborted; nothing was deleted", file=sys.stderr)
            return FAILED
    asyncio.run(with_store(args.url, lambda store: store.clear()))
    print(f"cleared {shown} ({entries:,} entries)")
    return 0
