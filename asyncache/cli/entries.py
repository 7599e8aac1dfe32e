"""What ``copy``, ``export`` and ``import`` share: walking a store, entries as JSON Lines.

An entry moves as it is stored: its key, its value (opaque bytes: a signed
entry stays signed, a compressed one compressed) and its expiry (Unix
seconds, or none). Nothing is decoded, except to read the namespace a cache
recorded in the envelope when ``--namespace`` asks for it.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..codec import decode_envelope
from ..errors import DecodeError
from ..keys import KEY_SIZE
from ..redact import redact_url
from ..stores.protocol import DecisionStore, Entry, EntryScan
from .common import USAGE, CliError

__all__ = [
    "BATCH",
    "Moved",
    "add_batch",
    "entry_line",
    "parse_line",
    "walk",
]

BATCH = 500
"""Entries read, and added, per round trip."""


@dataclass
class Moved:
    """What a copy or an import did, for its summary."""

    read: int = 0
    added: int = 0
    same: int = 0
    """The destination already held this very entry."""
    kept: int = 0
    """The destination already held a live, different decision: it stays (first one wins)."""
    skipped: int = 0
    """Not of the namespace asked for (or, on import, expired by now)."""
    unreadable: int = 0
    """``--namespace`` could not read the envelope (not an asyncache value)."""
    errors: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "read": self.read,
            "added": self.added,
            "same": self.same,
            "kept": self.kept,
            "skipped": self.skipped,
            "unreadable": self.unreadable,
        }


def namespace_of(key: bytes, value: bytes) -> str | None:
    """The namespace recorded in an envelope (``None``: none recorded).

    A signed envelope is read without its secret: only the namespace is
    looked at, and the value is copied with its tag as it is.

    Raises:
        DecodeError: the value is not an asyncache envelope.
    """
    namespace = decode_envelope(value, key=key, secret=None).get("n")
    return namespace if isinstance(namespace, str) else None


async def walk(
    store: DecisionStore, url: str, namespace: str | None, moved: Moved
) -> AsyncIterator[list[tuple[bytes, Entry]]]:
    """The live entries of ``store`` in batches; only ``namespace``'s when given."""
    if not isinstance(store, EntryScan):
        raise CliError(f"{redact_url(url)}: {type(store).__name__} cannot list its entries", USAGE)
    async for batch in store.entries(batch_size=BATCH):
        moved.read += len(batch)
        if namespace is None:
            yield batch
            continue
        chosen = []
        for key, entry in batch:
            try:
                found = namespace_of(key, entry.value)
            except DecodeError:
                moved.unreadable += 1
                continue
            if found == namespace:
                chosen.append((key, entry))
            else:
                moved.skipped += 1
        if chosen:
            yield chosen


async def add_batch(
    store: DecisionStore, batch: Sequence[tuple[bytes, Entry]], moved: Moved
) -> None:
    """Add the batch where the destination holds nothing live; count added, same and kept.

    One ``get_many`` tells what is there already, one ``add_many`` adds the
    rest; an entry another writer added in between wins too (``add`` keeps it).
    """
    held = await store.get_many([key for key, _ in batch])
    items = []
    for (key, entry), there in zip(batch, held, strict=True):
        if there is None:
            items.append((key, entry.value, entry.expires_at))
        elif there.value == entry.value:
            moved.same += 1
        else:
            moved.kept += 1
    winners = await store.add_many(items) if items else []
    for (_, value, _), winner in zip(items, winners, strict=True):
        if winner.value == value:
            moved.added += 1
        else:
            moved.kept += 1


def entry_line(key: bytes, entry: Entry) -> str:
    """One JSON Lines record: ``{"key": hex, "value": base64, "expires_at": seconds|null}``.

    The key comes first, so that ``sort`` orders an export by key; ``namespace``
    (when the envelope records one) is added for reading, and ignored by import.
    """
    record: dict[str, Any] = {
        "key": key.hex(),
        "value": base64.b64encode(entry.value).decode("ascii"),
        "expires_at": entry.expires_at,
    }
    try:
        found = namespace_of(key, entry.value)
    except DecodeError:
        found = None
    if found is not None:
        record["namespace"] = found
    return json.dumps(record, separators=(",", ":"))


def parse_line(text: str, where: str) -> tuple[bytes, Entry]:
    """The entry one line of an export holds.

    Raises:
        CliError: the line is not such a record (``where`` says which line).
    """
    try:
        record = json.loads(text)
    except ValueError as exc:
        raise CliError(f"{where}: not JSON: {exc}", USAGE) from None
    if not isinstance(record, dict):
        raise CliError(f"{where}: expected an object with key, value and expires_at", USAGE)
    try:
        key = bytes.fromhex(record["key"])
        value = base64.b64decode(record["value"], validate=True)
        expires_at = record.get("expires_at")
    except (KeyError, TypeError, ValueError, binascii.Error) as exc:
        raise CliError(f"{where}: expected key (hex) and value (base64): {exc}", USAGE) from None
    if len(key) != KEY_SIZE:
        # The cache makes no other key, and a store may give other lengths a meaning of
        # its own: RedisStore's lease keys are "lease:" and a 16-byte key.
        raise CliError(
            f"{where}: a key is {KEY_SIZE} bytes ({2 * KEY_SIZE} hex digits), not {len(key)}",
            USAGE,
        )
    if expires_at is not None and (
        isinstance(expires_at, bool)
        or not isinstance(expires_at, int | float)
        or math.isnan(expires_at)
    ):
        raise CliError(f"{where}: expires_at must be Unix seconds or null", USAGE)
    return key, Entry(value, None if expires_at is None else float(expires_at))
