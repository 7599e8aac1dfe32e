"""RedisStore's tag index and tombstones: what ``forget`` drops, and what it refuses after.

::

    <prefix>tags:<digest>             the keys of a label's decisions (a sorted set,
                                      member: the key, score: its expiry in ms, or
                                      +inf); on a cluster one per hash slot,
                                      ``<prefix>tags:{<tag>}<digest>``, in the slot of
                                      the decisions it lists
    <prefix>labels:<key>              a tagged decision's labels (their digests),
                                      expiring with it: ``RENEW`` and ``SWAP`` read it
                                      to keep the indexes up with a renewed or
                                      refreshed decision; on a cluster in its slot
    <prefix>forgotten:<digest>        a forgotten label's tombstone: until when writes
                                      that began earlier are refused (Unix seconds)

``<digest>`` is the label's BLAKE2b (16 bytes, hex). A tagged ``add`` is one
script on its key's slot: the ``SET NX`` and the index members together, so a
decision is never listed on another slot (nor moved to one). The index expires
with its decisions: each add trims members whose decision expired and pushes
the index's own expiry to the latest member's.

On a single Redis the script also reads the tombstones, and ``forget`` is one
script that writes them and drops the listed decisions: nothing can come in
between. On a cluster a tombstone lives in its label's slot, which a script
on a decision's slot cannot read; there a forget writes its tombstones
first (open-ended: ``FORGETTING``), then drops each primary's listed
decisions in one round trip per primary (one script over all of its slots),
then closes the tombstones; and a tagged add reads the tombstones after it
stored, taking its decision back when one covers its start. Either way, a
decision is listed before the forget reads the lists (and goes), or stored
after the tombstone (and is refused).
"""

from __future__ import annotations

import asyncio
import hashlib
import time
import weakref
from collections.abc import Callable, Sequence
from typing import Any

from redis.asyncio.cluster import RedisCluster

from ...tags import FORGETTING_SECONDS, MARGIN, TOMBSTONE_SECONDS
from .driver import primaries_with_slots
from .layout import in_slot, in_slot_of, pxat
from .scripts import INDEX

__all__ = [
    "FORGOTTEN",
    "LABELS",
    "REFUSED",
    "TAGS",
    "add_tagged",
    "forget",
    "index_head",
    "labels_name",
]

TAGS = b"tags:"
"""After the prefix: the tag indexes."""
LABELS = b"labels:"
"""After the prefix: a tagged decision's labels (their digests), expiring with it."""
FORGOTTEN = b"forgotten:"
"""After the prefix: the tombstones."""
OPEN = b"1e300"
"""A tombstone while its forget runs: refuses every write that began before the end of time."""
LABELS_PER_CALL = 8
"""Labels a cluster's forget sends per script (times the node's slots: its keys)."""

ADD = (
    INDEX
    + """
local n = tonumber(ARGV[5])
if ARGV[7] == '1' then
  for i = 1, n do
    local until_at = redis.call('GET', KEYS[1 + n + i])
    if until_at and tonumber(until_at) >= tonumber(ARGV[3]) then return {1} end
  end
end
local old
if ARGV[2] == '' then
  old = redis.call('SET', KEYS[1], ARGV[1], 'NX', 'GET')
else
  old = redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PXAT', ARGV[2], 'GET')
end
if old then return {0, old} end
for i = 1, n do
  index(KEYS[1 + i], ARGV[2], ARGV[4])
  redis.call('ZREMRANGEBYSCORE', KEYS[1 + i], '-inf', '(' .. ARGV[6])
end
if ARGV[2] == '' then
  redis.call('SET', KEYS[#KEYS], ARGV[8])
else
  redis.call('SET', KEYS[#KEYS], ARGV[8], 'PXAT', ARGV[2])
end
return {0}
"""
)
"""A tagged ``add``: refused (``{1}``) under a tombstone that covers its start (single
Redis only), else ``SET NX GET`` and, when it stored, the index members.

KEYS: the entry, the ``n`` indexes, the ``n`` tombstones (single Redis), its labels key.
ARGV: the stored bytes, the PXAT in ms (``""``: none), the write's start (Unix seconds),
the member (the key), ``n``, now in ms, ``1`` to read the tombstones, the labels' digests
(for ``RENEW`` and ``SWAP``, which keep the indexes up with a renewed or refreshed
decision). Returns ``{0, old}`` when a value was there (the caller settles it), ``{0}``
when stored.
"""

TAKE_BACK = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('UNLINK', KEYS[1])
  for i = 2, #KEYS do redis.call('ZREM', KEYS[i], ARGV[2]) end
  redis.call('PUBLISH', ARGV[3], ARGV[2])
  return 1
end
return 0
"""
"""Take back a decision a tombstone refused after it was stored (a cluster's check).

KEYS: the entry, its indexes. ARGV: the stored bytes, the member (key), the channel.
"""

FORGET = """
local seen = {}
local dropped = 0
local t = tonumber(ARGV[4])
local names = {}
for i = 1, #KEYS do names[#names + 1] = KEYS[i] end
for i = 7, #ARGV do names[#names + 1] = ARGV[i] end
for i = 1, #names - t do
  local members = redis.call('ZRANGEBYSCORE', names[i], ARGV[2], '+inf')
  for _, member in ipairs(members) do
    if not seen[member] then
      seen[member] = true
      if ARGV[3] == '1' then
        dropped = dropped + redis.call('EXISTS', ARGV[1] .. member)
      else
        dropped = dropped + redis.call('UNLINK', ARGV[1] .. member)
      end
    end
  end
  if ARGV[3] ~= '1' then redis.call('UNLINK', names[i]) end
end
if ARGV[3] ~= '1' then
  for i = #names - t + 1, #names do
    redis.call('SET', names[i], ARGV[5], 'EX', ARGV[6])
  end
end
return dropped
"""
"""Drop the live decisions the indexes list, and the indexes; then write the tombstones.

KEYS: the indexes, then ``t`` tombstones. ARGV: the prefix, now in ms, ``1`` for a
dry run (count only), ``t``, the tombstones' value, their keeping in seconds; on a
cluster, the index names follow in ARGV instead (``CLUSTER_FORGET``).
"""

CLUSTER_FORGET = "#!lua flags=allow-cross-slot-keys\n" + FORGET
"""``FORGET`` over every slot of one primary at once. Its names are in many slots, which a
cluster refuses among a command's keys: they go as arguments, and the flag lets the
script reach them (every one on this node)."""

_scripts: weakref.WeakKeyDictionary[Any, dict[str, Any]] = weakref.WeakKeyDictionary()


def _script(client: Any, name: str, text: str) -> Any:
    """``client``'s registered script ``name`` (made once per client)."""
    made = _scripts.setdefault(client, {})
    script = made.get(name)
    if script is None:
        script = made[name] = client.register_script(text)
    return script


def digest(label: bytes) -> bytes:
    """The part of an index's or a tombstone's name that stands for ``label``."""
    return hashlib.blake2b(label, digest_size=16).hexdigest().encode()


def index_name(prefix: bytes, label: bytes, key: bytes | None) -> bytes:
    """The index of ``label`` (on a cluster: its share in the slot of ``key``'s decision)."""
    if key is None:
        return prefix + TAGS + digest(label)
    return in_slot_of(prefix, key, TAGS, digest(label))


def labels_name(prefix: bytes, key: bytes, *, cluster: bool) -> bytes:
    """The key naming the labels of ``key``'s decision (their digests), in its slot."""
    return in_slot_of(prefix, key, LABELS, key) if cluster else prefix + LABELS + key


def index_head(prefix: bytes, key: bytes, *, cluster: bool) -> bytes:
    """What the names of ``key``'s decision's indexes start with (a digest follows)."""
    return in_slot_of(prefix, key, TAGS, b"") if cluster else prefix + TAGS


def tombstone_name(prefix: bytes, label: bytes) -> bytes:
    """The tombstone of ``label``."""
    return prefix + FORGOTTEN + digest(label)


REFUSED = object()
"""``add_tagged``'s answer when a tombstone refused the write."""


async def add_tagged(
    client: Any,
    prefix: bytes,
    key: bytes,
    stored: bytes,
    expires_at: float | None,
    labels: Sequence[bytes],
    since: float,
    channel: bytes,
) -> Any:
    """Store a tagged decision; ``REFUSED``, ``None`` (stored) or the bytes that were there."""
    cluster = isinstance(client, RedisCluster)
    name = prefix + key
    indexes = [index_name(prefix, label, key if cluster else None) for label in labels]
    tombs = [] if cluster else [tombstone_name(prefix, label) for label in labels]
    expiry: bytes | int = b"" if expires_at is None else pxat(expires_at)
    now_ms = int(time.time() * 1000)
    reply = await _script(client, "add", ADD)(
        keys=[name, *indexes, *tombs, labels_name(prefix, key, cluster=cluster)],
        args=[
            stored,
            expiry,
            repr(since),
            key,
            len(labels),
            now_ms,
            0 if cluster else 1,
            b"".join(digest(label) for label in labels),
        ],
    )
    if reply[0] == 1:
        return REFUSED
    if len(reply) > 1:
        return reply[1]
    if cluster:
        # The tombstones live on their labels' slots: read them now that the decision is
        # listed, and take it back when a forget began after this write did.
        names = [tombstone_name(prefix, label) for label in labels]
        found = await client.mget_nonatomic(names)
        if any(value is not None and float(value) >= since for value in found):
            await _script(client, "take_back", TAKE_BACK)(
                keys=[name, *indexes], args=[stored, key, channel]
            )
            return REFUSED
    return None


async def forget(
    client: Any,
    pipeline: Callable[[], Any],
    prefix: bytes,
    labels: Sequence[bytes],
    *,
    dry_run: bool,
    progress: Callable[[int, int], object] | None,
) -> int:
    """Drop the decisions listed under ``labels``; leave tombstones; return how many went."""
    now_ms = int(time.time() * 1000)
    keep = int(TOMBSTONE_SECONDS)
    dry = b"1" if dry_run else b"0"
    if not isinstance(client, RedisCluster):
        indexes = [index_name(prefix, label, None) for label in labels]
        tombs = [] if dry_run else [tombstone_name(prefix, label) for label in labels]
        until = repr(time.time() + MARGIN)
        dropped = int(
            await _script(client, "forget", FORGET)(
                keys=[*indexes, *tombs], args=[prefix, now_ms, dry, len(tombs), until, keep]
            )
        )
        if progress is not None:
            progress(1, 1)
        return dropped
    if not dry_run:
        await _tombstones(pipeline, prefix, labels, OPEN, int(FORGETTING_SECONDS))
    primaries = await primaries_with_slots(client)
    batches = [labels[i : i + LABELS_PER_CALL] for i in range(0, len(labels), LABELS_PER_CALL)]
    total = len(batches) * len(primaries)
    done = 0
    dropped = 0
    for batch in batches:
        # One round trip per primary per batch: every slot of the node in one script.
        async def on(node: Any, slots: list[int], batch: Sequence[bytes] = batch) -> int:
            keys = [in_slot(prefix, slot, TAGS, digest(label)) for slot in slots for label in batch]
            return int(
                await client.execute_command(
                    "EVAL",
                    CLUSTER_FORGET,
                    0,
                    prefix,
                    now_ms,
                    dry,
                    0,
                    b"",
                    0,
                    *keys,
                    target_nodes=node,
                )
            )

        for count in await asyncio.gather(*(on(node, slots) for node, slots in primaries)):
            dropped += count
            done += 1
            if progress is not None:
                progress(done, total)
    if not dry_run:
        await _tombstones(pipeline, prefix, labels, repr(time.time() + MARGIN).encode(), keep)
    return dropped


async def _tombstones(
    pipeline: Callable[[], Any], prefix: bytes, labels: Sequence[bytes], until: bytes, keep: int
) -> None:
    """Write each label's tombstone (``until``, kept ``keep`` seconds); one pipeline."""
    pipe = pipeline()
    for label in labels:
        pipe.set(tombstone_name(prefix, label), until, ex=keep)
    await pipe.execute()
