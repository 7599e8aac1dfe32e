"""RedisStore: decisions in Redis or Redis Cluster, shared by a fleet.

Layout: everything the store touches starts with its prefix (``asyncache:`` by
default), so ``clear`` and ``count`` never reach another application's keys::

    <prefix><key>           a decision: a 9-byte header, then the value
    <prefix>lease:<key>     a lease token (``acquire_lease``)
    <prefix>lease:released  the pub/sub channel a released lease is announced on
    <prefix>invalidated     the pub/sub channel dropped entries are announced on

The header is a tag byte and the expiry as a big-endian IEEE double (Unix
seconds; the tag says whether there is one). Keeping the expiry beside the
value is what makes a hit one plain ``GET`` (and a batch one ``MGET``): asking
Redis for the expiry instead (``PEXPIRETIME``) would cost a pipeline or a
script on every hit, and a hit is what this store is for. Redis expires the key
itself at the same instant (``PXAT``), so nothing needs pruning; ``renew``
rewrites both atomically. A value that does not start with a header (written by
something else) is handed to the engine whole, whose decoder rejects it: the
entry is then counted as corrupt and deleted.

``add`` is one ``SET key value NX PXAT ms GET`` (Redis >= 7.0): it stores the
value unless the key exists, and returns what was there, header included, so
the winner and its expiry come back in the same round trip.

On a cluster, keys spread over the hash slots as they fall: no hash tags,
since nothing needs two keys in one slot (every script touches one key, and a
batch is one ``MGET`` per slot, sent to each owner in one pipeline round).
``count`` and ``clear`` scan every primary.

A redis-py client works on one event loop, so the store keeps a client (with
its gate, scripts, leases and subscription) per running loop: a second
``asyncio.run()`` or a thread's own loop gets its own, and a loop's client is
closed as that loop shuts down.

``clear`` and ``delete`` announce what they drop on ``<prefix>invalidated``;
``subscribe_invalidations`` lets a ``TieredStore`` in any process hear it and
drop its memory copies. Expiries: ``None`` and ``inf`` are none, and one past
Redis's range (2**63 ms) is clamped to ``layout.MAX_EXPIRES_AT``.

The package's modules: ``store`` (the store: its reads, and its writes,
``add`` and who won), ``layout`` (keys, channels and the header), ``scripts``
(the Lua scripts), ``gate`` (the bound on commands in flight), ``loops`` (a client and
what goes with it per event loop), ``channels`` (the pub/sub subscription and
the invalidation callbacks), ``leases`` (lease keys and their waiters),
``scan`` (count, clear and describe over the prefix) and ``url`` (URLs and the
client they build).
"""

from __future__ import annotations

try:
    import redis.asyncio  # noqa: F401 - the extra's client, checked before anything needs it
except ImportError as exc:  # pragma: no cover - exercised without the extra
    raise ImportError("RedisStore needs: pip install 'asyncache-ml[redis]'") from exc

from .store import RedisStore

__all__ = ["RedisStore"]
