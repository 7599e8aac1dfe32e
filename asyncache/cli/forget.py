"""``asyncache forget``: drop every decision with some tags, or of a scope, from a store."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from typing import Any

from ..cache import DecisionCache
from ..redact import redact_url
from .common import USAGE, CliError, entry_count, load_rich, open_url

__all__ = ["run"]


def run(args: argparse.Namespace) -> int:
    """Run ``asyncache forget``; returns the exit status."""
    if not args.tag and args.scope is None:
        raise CliError("forget needs --tag T (one or more) or --scope S", USAGE)
    shown = redact_url(args.url)
    rich = None if args.json or args.no_progress else load_rich()
    started = time.perf_counter()
    count = asyncio.run(_forget(args, rich))
    seconds = time.perf_counter() - started
    if args.json:
        print(
            json.dumps(
                {
                    "store": shown,
                    "namespace": args.namespace,
                    "tags": args.tag,
                    "scope": args.scope,
                    "dry_run": args.dry_run,
                    "decisions": count,
                    "seconds": round(seconds, 3),
                }
            )
        )
        return 0
    what = [f"tag {tag!r}" for tag in args.tag]
    if args.scope is not None:
        what.append(f"scope {args.scope!r}")
    where = f"namespace {args.namespace!r} of {shown}" if args.namespace else shown
    verb = "would forget" if args.dry_run else "forgot"
    print(f"{verb} {entry_count(count)} with {' or '.join(what)} in {where} ({seconds:.2f} s)")
    return 0


async def _forget(args: argparse.Namespace, rich: Any) -> int:
    store = open_url(args.url)
    # A cache over the store: the same checks and refusals as ``cache.forget`` in a program.
    cache = DecisionCache(store, namespace=args.namespace)
    try:
        if rich is None:
            return await cache.forget(args.tag, args.scope, dry_run=args.dry_run)
        console = rich.console.Console(file=sys.stderr)
        columns = (
            *rich.progress.Progress.get_default_columns(),
            rich.progress.MofNCompleteColumn(),
        )
        with rich.progress.Progress(*columns, console=console) as bar:
            task = bar.add_task("forgetting", total=None)

            def progress(done: int, total: int) -> None:
                bar.update(task, completed=done, total=total)

            return await cache.forget(args.tag, args.scope, dry_run=args.dry_run, progress=progress)
    finally:
        await cache.aclose()
