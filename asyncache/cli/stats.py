"""``asyncache stats``: what a store says it holds, and the counters a live process serves.

The store answers for itself (its ``describe()``); this command fetches and
formats. A store without ``describe`` is shown by its ``count()``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections.abc import Callable
from typing import Any

from ..redact import redact_url
from ..stores.protocol import DecisionStore
from .common import USAGE, CliError, load_rich, with_store

__all__ = ["MEMORY_NOTE", "describe", "fetch_live", "flatten", "run", "show_size", "show_time"]

MEMORY_NOTE = (
    "a memory:// store is this command's own, and a new process's memory is empty; "
    "use --live HTTP_URL for a running process's counters"
)

# The store's figures shown in the table, in order: (key, how to show it, title).
_ROWS: list[tuple[str, str, str]] = [
    ("entries", "count", "entries"),
    ("live", "count", "  live"),
    ("expired", "count", "  expired (prune drops them)"),
    ("without_expiry", "count", "  without expiry"),
    ("stored_bytes", "size", "bytes stored"),
    ("file_bytes", "size", "bytes (file + WAL)"),
    ("resident_bytes", "size", "bytes in memory (estimated)"),
    ("next_expiry", "time", "next expiry"),
    ("last_expiry", "time", "last expiry"),
    ("leases", "count", "leases held"),
    ("schema_version", "text", "schema version"),
]


def show_size(count: float) -> str:
    """Bytes in B, KiB, MiB or GiB."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if count < 1024 or unit == "GiB":
            return f"{count:,.0f} {unit}" if unit == "B" else f"{count:,.1f} {unit}"
        count /= 1024
    raise AssertionError("unreachable")


def show_time(timestamp: float, now: float) -> str:
    """A Unix time relative to ``now``: ``in 4.2m``, ``3.0h ago``."""
    delta = timestamp - now
    seconds = abs(delta)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            text = f"{seconds / size:.1f}{unit}"
            break
    else:
        text = f"{seconds:.0f}s"
    return f"{text} ago" if delta < 0 else f"in {text}"


def flatten(data: Any, prefix: str = "") -> dict[str, Any]:
    """Nested objects as one level of dotted names (``middleware.hit``)."""
    if not isinstance(data, dict):
        return {prefix or "value": data}
    flat: dict[str, Any] = {}
    for name, value in data.items():
        path = f"{prefix}.{name}" if prefix else str(name)
        if isinstance(value, dict):
            flat.update(flatten(value, path))
        else:
            flat[path] = value
    return flat


async def describe(store: DecisionStore) -> dict[str, Any]:
    """The store's ``describe()``, or its kind and ``count()`` when it has none."""
    own = getattr(store, "describe", None)
    if callable(own):
        return dict(await own())
    return {"kind": type(store).__name__, "entries": await store.count()}


def fetch_live(url: str) -> dict[str, Any]:
    """The counters a live process serves as JSON (the middleware's stats endpoint).

    A user and password in ``url`` are sent as HTTP basic authentication;
    messages show the URL without them (``redact_url``).
    """
    import http.client  # here: only --live needs them
    import urllib.error
    import urllib.request

    shown = redact_url(url)
    if not url.startswith(("http://", "https://")):
        raise CliError(f"--live needs an http:// or https:// URL, not {shown!r}", USAGE)
    try:
        with urllib.request.urlopen(_live_request(url), timeout=10) as response:
            body = response.read()
    except urllib.error.HTTPError as exc:
        raise CliError(f"{shown} answered {exc.code} {exc.reason}") from None
    except (urllib.error.URLError, OSError, http.client.HTTPException, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        raise CliError(f"cannot reach {shown}: {reason}") from None
    try:
        data = json.loads(body)
    except ValueError:
        raise CliError(f"{shown} did not answer JSON") from None
    if not isinstance(data, dict):
        raise CliError(f"{shown} did not answer a JSON object")
    return data


def _live_request(url: str) -> Any:
    """A GET of ``url``, its user information moved into an ``Authorization`` header."""
    import base64
    import urllib.request
    from urllib.parse import unquote

    scheme, _, rest = url.partition("://")
    authority, slash, path = rest.partition("/")
    userinfo, at, hosts = authority.rpartition("@")
    if not at:
        return urllib.request.Request(url)
    user, _, password = userinfo.partition(":")
    credentials = f"{unquote(user)}:{unquote(password)}".encode()
    request = urllib.request.Request(f"{scheme}://{hosts}{slash}{path}")
    request.add_header("Authorization", "Basic " + base64.b64encode(credentials).decode("ascii"))
    return request


def run(args: argparse.Namespace) -> int:
    """Run ``asyncache stats``; returns the exit status."""
    if args.url is None and args.live is None:
        raise CliError("stats needs a store URL, --live HTTP_URL, or both", USAGE)
    report: dict[str, Any] = {}
    if args.url is not None:
        report["store"] = asyncio.run(with_store(args.url, describe))
        if report["store"].get("kind") == "memory":
            print(f"asyncache: note: {MEMORY_NOTE}", file=sys.stderr)
    if args.live is not None:
        report["live"] = flatten(fetch_live(args.live))
    if args.json:
        print(json.dumps(report, indent=2, sort_keys=True))
        return 0
    rich = load_rich()
    console = rich.console.Console()
    if "store" in report:
        console.print(_store_table(rich, args.url, report["store"]))
    if "live" in report:
        title = rich.text.Text(redact_url(args.live))
        table = rich.table.Table(title=title, title_justify="left", min_width=len(title))
        table.add_column("counter", style="bold")
        table.add_column("value", justify="right")
        for name, value in sorted(report["live"].items()):
            shown = f"{value:,.3f}" if isinstance(value, float) else f"{value:,}"
            table.add_row(name, shown if isinstance(value, int | float) else str(value))
        console.print(table)
    return 0


def _store_table(rich: Any, title: str, info: dict[str, Any]) -> Any:
    now = time.time()
    shows: dict[str, Callable[[Any], str]] = {
        "count": "{:,}".format,
        "size": show_size,
        "time": lambda t: show_time(t, now),
        "text": str,
    }
    # A Text, not markup: a URL's "[...]" is not a style. Never its password; and
    # wide enough for it on one line where the console is.
    shown = rich.text.Text(redact_url(title))
    table = rich.table.Table(
        title=shown, show_header=False, title_justify="left", min_width=len(shown)
    )
    table.add_column("", style="bold")
    table.add_column("", justify="right")
    for field, how, name in _ROWS:
        if field in info:
            value = info[field]
            table.add_row(name, "n/a" if value is None else shows[how](value))
    return table
