"""The Lua scripts RedisStore runs: each touches one key, so each works on a cluster."""

from __future__ import annotations

__all__ = ["DELETE", "RELEASE", "RENEW", "REPLACE", "SWAP"]

RENEW = """
local head = redis.call('GETRANGE', KEYS[1], 0, 8)
if string.len(head) < 9 then return 0 end
local tag = string.byte(head, 1)
if tag == 0xA1 then
  if struct.unpack('>d', head, 2) * 1000 <= tonumber(ARGV[3]) then return 0 end
elseif tag ~= 0xA0 then
  return 0
end
redis.call('SETRANGE', KEYS[1], 0, ARGV[1])
if ARGV[2] == '' then
  redis.call('PERSIST', KEYS[1])
else
  redis.call('PEXPIREAT', KEYS[1], ARGV[2])
end
return 1
"""
"""Rewrite the header's expiry and Redis's own together, for a live entry only.

ARGV: the new header, the new PXAT in ms (``""`` for none), the caller's clock in ms.
"""

REPLACE = """
local current = redis.call('GET', KEYS[1])
if current and current ~= ARGV[1] then return current end
if ARGV[3] == '' then
  redis.call('SET', KEYS[1], ARGV[2])
else
  redis.call('SET', KEYS[1], ARGV[2], 'PXAT', ARGV[3])
end
return false
"""
"""Replace an entry that expired by our clock but not yet by Redis's.

Unless another writer replaced it first; returns what is there instead, or nil.
ARGV: the old stored bytes, the new ones, the new PXAT in ms (``""`` for none).
"""

SWAP = """
local current = redis.call('GET', KEYS[1])
if current and string.sub(current, 10) ~= ARGV[1] then return current end
if ARGV[3] == '' then
  redis.call('SET', KEYS[1], ARGV[2])
else
  redis.call('SET', KEYS[1], ARGV[2], 'PXAT', ARGV[3])
end
if current then redis.call('PUBLISH', ARGV[4], ARGV[5]) end
return false
"""
"""Compare-and-set on the value after the 9-byte header (a renewal rewrites only the header).

Stores the new entry if the key holds the expected value or nothing, and then
tells other tiers to drop their copies of the old one; otherwise returns what is
there. ARGV: the expected value, the new stored bytes, the new PXAT in ms (``""``
for none), the invalidation channel, the key to announce.
"""

RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('DEL', KEYS[1]) end
redis.call('PUBLISH', ARGV[2], ARGV[3])
return 1
"""
"""Compare-and-delete a lease, then tell waiters to look again.

ARGV: the holder's token, the channel, the key to announce.
"""

DELETE = """
if redis.call('UNLINK', KEYS[1]) == 1 then redis.call('PUBLISH', ARGV[1], ARGV[2]) end
return 1
"""
"""Drop an entry and, when there was one, tell other tiers to drop their copies.

ARGV: the invalidation channel, the key to announce.
"""
