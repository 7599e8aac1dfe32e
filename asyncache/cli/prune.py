"""``asyncache prune``: drop a store's expired entries."""

from __future__ import annotations

import argparse
import asyncio

from ..redact import redact_url
from .common import plural, with_store

__all__ = ["run"]


def run(args: argparse.Namespace) -> int:
    """Run ``asyncache prune``; returns the exit status."""
    dropped = int(asyncio.run(with_store(args.url, lambda store: store.prune())))
    note = " (Redis expires entries by itself)" if args.url.lower().startswith("redis") else ""
    shown = plural(dropped, "expired entry", "expired entries")
    print(f"pruned {shown} from {redact_url(args.url)}{note}")
    return 0
