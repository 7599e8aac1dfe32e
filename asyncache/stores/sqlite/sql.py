"""The statements SQLiteStore sends, on the layout ``schema`` creates.

Parameters are numbered: ``?1`` is the current time wherever a statement needs
it, so that one clock reading decides what is live.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

__all__ = [
    "ACQUIRE",
    "ADD_CHUNK",
    "CLEAR_ENTRIES",
    "CLEAR_LEASES",
    "COUNT",
    "DELETE",
    "DELETE_CHUNK",
    "ENTRIES_AFTER",
    "EVICT_EXPIRING",
    "EVICT_FOREVER",
    "EXPIRED_AT",
    "FOLLOW_TAGS",
    "FORGOTTEN_OLD",
    "GET_CHUNK",
    "GET_ONE",
    "INDEX_KEY",
    "LIVE_LEASES",
    "PAGES",
    "POLL",
    "PRUNE",
    "PRUNE_LEASES",
    "PRUNE_TAGS",
    "RELEASE",
    "RENEW",
    "RENEW_LEASE",
    "REPLACE",
    "SUMMARY",
    "TABLES",
    "TAG_TABLES",
    "TOMBSTONE",
    "USED_BYTES",
    "Execute",
    "add_unless_forgotten",
    "forget_entries",
    "forget_index",
    "insert_many",
    "live_tagged",
    "numbered",
    "select_many",
    "storable_expiry",
]

Execute = Callable[[str, Sequence[object]], Awaitable[list[Any]]]
"""Runs one statement on a store's connection; returns its rows (``StoreError`` on failure)."""


def numbered(params: Sequence[object]) -> dict[str, object]:
    """``params`` by number (``{"1": ...}``), as sqlite3 binds them to ``?1``, ``?2``...

    Every statement here numbers its parameters. Handed a sequence for them,
    early Python 3.12 releases (3.12.1 among them) warn (a ``DeprecationWarning`` that a warnings
    filter of ``error`` turns into a failed store call); a mapping binds the
    same values on every version.
    """
    return {str(index): value for index, value in enumerate(params, 1)}


# Keys bound per statement, far under SQLITE_MAX_VARIABLE_NUMBER (32766 since 3.32).
GET_CHUNK = 4096
ADD_CHUNK = 2048
# Rows deleted per statement by prune and eviction, so that the write lock is
# held for milliseconds and callers' statements interleave between chunks.
DELETE_CHUNK = 512

# CASE rather than "DO UPDATE ... WHERE expired": the upsert then touches the row
# in every case, so RETURNING always yields the winner and one statement does it.
# ?1 is now; "expires_at" alone is the stored row, "excluded" the candidate.
_ADD_TAIL = """
ON CONFLICT (key) DO UPDATE SET
    value = CASE WHEN expires_at <= ?1 THEN excluded.value ELSE value END,
    expires_at = CASE WHEN expires_at <= ?1 THEN excluded.expires_at ELSE expires_at END
RETURNING key, value, expires_at"""
_LIVE = "(expires_at IS NULL OR expires_at > ?1)"

GET_ONE = (
    "SELECT value, expires_at FROM asyncache_entries "
    "WHERE key = ?1 AND (expires_at IS NULL OR expires_at > ?2)"
)
# When the entry under ?1 expired, if the file still holds it expired (replay's errors).
EXPIRED_AT = "SELECT expires_at FROM asyncache_entries WHERE key = ?1 AND expires_at <= ?2"
# A page of the walk ``entries`` makes, in key order from just after ?2 (keyset paging).
ENTRIES_AFTER = (
    f"SELECT key, value, expires_at FROM asyncache_entries WHERE key > ?2 AND {_LIVE} "
    "ORDER BY key LIMIT ?3"
)
# A compare-and-set: ?2..?4 the new row, ?5 the value it must still hold (or be expired).
REPLACE = """INSERT INTO asyncache_entries (key, value, expires_at) VALUES (?2, ?3, ?4)
ON CONFLICT (key) DO UPDATE SET
    value = CASE WHEN value = ?5 OR expires_at <= ?1 THEN excluded.value ELSE value END,
    expires_at = CASE WHEN value = ?5 OR expires_at <= ?1
        THEN excluded.expires_at ELSE expires_at END
RETURNING value, expires_at"""
RENEW = f"UPDATE asyncache_entries SET expires_at = ?2 WHERE key = ?3 AND {_LIVE} RETURNING 1"
DELETE = "DELETE FROM asyncache_entries WHERE key = ?1"
COUNT = "SELECT count(*) FROM asyncache_entries"
CLEAR_ENTRIES = "DELETE FROM asyncache_entries"
CLEAR_LEASES = "DELETE FROM asyncache_leases"
PRUNE = (
    "DELETE FROM asyncache_entries WHERE rowid IN (SELECT rowid FROM asyncache_entries "
    f"WHERE expires_at <= ?1 LIMIT {DELETE_CHUNK}) RETURNING 1"
)
PRUNE_LEASES = "DELETE FROM asyncache_leases WHERE expires_at <= ?1"
# Eviction order: soonest-expiring first, then entries without expiry, oldest first.
EVICT_EXPIRING = (
    "DELETE FROM asyncache_entries WHERE rowid IN (SELECT rowid FROM asyncache_entries "
    "WHERE expires_at IS NOT NULL ORDER BY expires_at LIMIT ?1) RETURNING 1"
)
EVICT_FOREVER = (
    "DELETE FROM asyncache_entries WHERE rowid IN (SELECT rowid FROM asyncache_entries "
    "WHERE expires_at IS NULL ORDER BY rowid LIMIT ?1) RETURNING 1"
)
USED_BYTES = (
    "SELECT (page_count - freelist_count) * page_size "
    "FROM pragma_page_count(), pragma_freelist_count(), pragma_page_size()"
)
PAGES = "SELECT * FROM pragma_page_count(), pragma_freelist_count()"

ACQUIRE = """INSERT INTO asyncache_leases (key, token, expires_at) VALUES (?1, ?2, ?3)
ON CONFLICT (key) DO UPDATE SET token = excluded.token, expires_at = excluded.expires_at
WHERE asyncache_leases.expires_at <= ?4 OR asyncache_leases.token = excluded.token
RETURNING 1"""
RELEASE = "DELETE FROM asyncache_leases WHERE key = ?1 AND token = ?2"
# A renewal only extends a lease its token still holds: one that crossed its
# holder's release (or a takeover) must never take the lease again.
RENEW_LEASE = (
    "UPDATE asyncache_leases SET expires_at = ?3 WHERE key = ?1 AND token = ?2 RETURNING 1"
)
POLL = """SELECT e.value, e.expires_at,
    EXISTS (SELECT 1 FROM asyncache_leases WHERE key = ?2 AND expires_at > ?1)
FROM (SELECT 1) LEFT JOIN asyncache_entries AS e
    ON e.key = ?2 AND (e.expires_at IS NULL OR e.expires_at > ?1)"""

# What describe() reports, in one pass over the entries.
TABLES = "SELECT name FROM sqlite_master WHERE type = 'table'"
SUMMARY = (
    "SELECT count(*), coalesce(sum(length(value)), 0),"
    " count(*) FILTER (WHERE expires_at <= ?1),"
    " count(*) FILTER (WHERE expires_at IS NULL),"
    " min(expires_at) FILTER (WHERE expires_at > ?1),"
    " max(expires_at) FILTER (WHERE expires_at > ?1)"
    " FROM asyncache_entries"
)
LIVE_LEASES = "SELECT count(*) FROM asyncache_leases WHERE expires_at > ?1"


@functools.lru_cache(maxsize=256)
def select_many(n: int) -> str:
    """The live entries among ``n`` keys (``?2`` to ``?n+1``), as ``key, value, expires_at``."""
    marks = ", ".join(f"?{i}" for i in range(2, n + 2))
    return (
        f"SELECT key, value, expires_at FROM asyncache_entries WHERE key IN ({marks}) AND {_LIVE}"
    )


@functools.lru_cache(maxsize=256)
def insert_many(n: int) -> str:
    """Add ``n`` rows (``key, value, expires_at`` from ``?2`` on) unless live; the winners."""
    rows = ", ".join(f"(?{3 * i + 2}, ?{3 * i + 3}, ?{3 * i + 4})" for i in range(n))
    return f"INSERT INTO asyncache_entries (key, value, expires_at) VALUES {rows}{_ADD_TAIL}"


def storable_expiry(expires_at: float | None) -> float | None:
    """``expires_at`` as a statement binds it: a float, or ``None`` for no expiry.

    ``inf`` means no expiry (as ``None``, so that the entry counts and is evicted
    as one without expiry), and so does NaN (which SQLite would store as NULL
    anyway). Any real number is taken: an ``int`` past SQLite's 64-bit integers
    would fail to bind, so it goes as a float, and one past the floats is ``inf``.
    """
    if expires_at is None:
        return None
    try:
        when = float(expires_at)
    except OverflowError:
        when = math.inf if expires_at > 0 else -math.inf
    if when == math.inf or math.isnan(when):
        return None
    return when


# -- the tag index and tombstones (``tags``): created on first use -------------------

TAG_TABLES = (
    """CREATE TABLE IF NOT EXISTS asyncache_tags (
        label BLOB NOT NULL,
        key BLOB NOT NULL,
        expires_at REAL,
        PRIMARY KEY (label, key)
    ) WITHOUT ROWID""",
    "CREATE INDEX IF NOT EXISTS asyncache_tags_expires_at ON asyncache_tags (expires_at)",
    "CREATE INDEX IF NOT EXISTS asyncache_tags_key ON asyncache_tags (key)",
    """CREATE TABLE IF NOT EXISTS asyncache_forgotten (
        label BLOB PRIMARY KEY NOT NULL,
        until REAL NOT NULL
    ) WITHOUT ROWID""",
)
# ?1 label, ?2 key, ?3 the decision's expiry (the row expires with it).
INDEX_KEY = """INSERT INTO asyncache_tags (label, key, expires_at) VALUES (?1, ?2, ?3)
ON CONFLICT (label, key) DO UPDATE SET expires_at = CASE
    WHEN expires_at IS NULL OR excluded.expires_at IS NULL THEN NULL
    ELSE max(expires_at, excluded.expires_at) END"""
# ?1 label, ?2 until when writes that began earlier are refused.
TOMBSTONE = """INSERT INTO asyncache_forgotten (label, until) VALUES (?1, ?2)
ON CONFLICT (label) DO UPDATE SET until = max(until, excluded.until)"""
PRUNE_TAGS = "DELETE FROM asyncache_tags WHERE expires_at <= ?1"
# A renewed or refreshed decision's index rows follow its expiry: ?1 key, ?2 expiry.
FOLLOW_TAGS = "UPDATE asyncache_tags SET expires_at = ?2 WHERE key = ?1"
FORGOTTEN_OLD = "DELETE FROM asyncache_forgotten WHERE until <= ?1"


def _labels(n: int, first: int) -> str:
    return ", ".join(f"?{i}" for i in range(first, first + n))


@functools.lru_cache(maxsize=64)
def add_unless_forgotten(n: int) -> str:
    """``add`` of one row (?2 key, ?3 value, ?4 expiry) unless a tombstone of its ``n``
    labels (?6...) reaches its start (?5); the winner, or no row when refused."""
    return (
        "INSERT INTO asyncache_entries (key, value, expires_at) SELECT ?2, ?3, ?4 "
        "WHERE NOT EXISTS (SELECT 1 FROM asyncache_forgotten "
        f"WHERE label IN ({_labels(n, 6)}) AND until >= ?5)"
        f"{_ADD_TAIL.replace('RETURNING key, value, expires_at', 'RETURNING value, expires_at')}"
    )


@functools.lru_cache(maxsize=64)
def forget_entries(n: int) -> str:
    """Delete the entries indexed under ``n`` labels (?2...; ?1 unused, for numbering);
    one row per entry: its expiry (the caller tells live from expired)."""
    return (
        "DELETE FROM asyncache_entries WHERE ?1 = ?1 AND key IN (SELECT key FROM asyncache_tags "
        f"WHERE label IN ({_labels(n, 2)})) RETURNING expires_at"
    )


@functools.lru_cache(maxsize=64)
def forget_index(n: int) -> str:
    """Delete the index rows of ``n`` labels (?2...; ?1 unused, for numbering)."""
    return f"DELETE FROM asyncache_tags WHERE ?1 = ?1 AND label IN ({_labels(n, 2)})"


@functools.lru_cache(maxsize=64)
def live_tagged(n: int) -> str:
    """How many live entries are indexed under ``n`` labels (?2...)."""
    return (
        "SELECT count(*) FROM asyncache_entries WHERE key IN (SELECT key FROM asyncache_tags "
        f"WHERE label IN ({_labels(n, 2)})) AND {_LIVE}"
    )
