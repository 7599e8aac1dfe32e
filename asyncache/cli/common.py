"""What the ``asyncache`` commands share: failures as one line, rich, opening a store."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

from ..errors import ConfigurationError
from ..redact import redact_url
from ..stores.protocol import DecisionStore
from ..stores.registry import open_store

__all__ = [
    "FAILED",
    "USAGE",
    "CliError",
    "entry_count",
    "load_rich",
    "one_line",
    "open_url",
    "plural",
    "with_store",
]

T = TypeVar("T")

FAILED = 1
"""Exit status: the command failed (or was declined, or some inputs failed)."""
USAGE = 2
"""Exit status: the command line or an input is wrong."""


class CliError(Exception):
    """A failure reported as one line and an exit status, without a traceback."""

    def __init__(self, message: str, status: int = FAILED) -> None:
        super().__init__(message)
        self.status = status


def plural(count: int, one: str, many: str | None = None) -> str:
    """``1 entry``, ``2 entries``, ``1,024 entries``: the count and the right form."""
    return f"{count:,} {one if count == 1 else (many or one + 's')}"


def entry_count(count: int) -> str:
    """``1 entry``, ``5,012 entries``."""
    return plural(count, "entry", "entries")


def load_rich() -> Any:
    """The rich modules the commands draw with, or a one-line install hint."""
    try:
        import rich.console
        import rich.progress
        import rich.table
        import rich.text
    except ImportError:
        raise CliError(
            "the asyncache command needs rich: pip install 'asyncache-ml[cli]'"
        ) from None
    return rich


def open_url(url: str, *, must_exist: bool = True) -> DecisionStore:
    """Open the store at ``url``; a missing SQLite file is an error, not a new database."""
    if must_exist:
        inner = url[len("tiered+") :] if url.lower().startswith("tiered+") else url
        if inner.lower().startswith("sqlite:"):
            # Imported here: only SQLite URLs need the SQLite store's package.
            from ..stores.sqlite.url import parse_url

            path, _ = parse_url(inner)
            if path != ":memory:" and not Path(path).exists():
                raise CliError(f"{redact_url(url)}: no such file: {path}")
    return open_store(url)


async def with_store(url: str, use: Callable[[Any], Awaitable[T]]) -> T:
    """``use(store)`` on the store at ``url``, closed afterwards."""
    store = open_url(url)
    try:
        return await use(store)
    finally:
        await store.aclose()


def one_line(exc: BaseException) -> str:
    """``exc`` as the one line printed after ``asyncache: error:``."""
    text = " ".join(str(exc).split())
    if isinstance(exc, CliError | ConfigurationError | ImportError):
        return text or type(exc).__name__
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
