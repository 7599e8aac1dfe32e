"""The Lua scripts RedisStore runs: each touches one key, so each works on a cluster."""

from __future__ import annotations

__all__ = ["ACQUIRE", "DELETE", "INDEX", "RELEASE", "RENEW", "RENEW_LEASE", "REPLACE", "SWAP"]

INDEX = """
local function index(name, at_ms, member)
  local fresh = redis.call('EXISTS', name) == 0
  if at_ms == '' then
    redis.call('ZADD', name, '+inf', member)
    redis.call('PERSIST', name)
  else
    redis.call('ZADD', name, at_ms, member)
    local at = redis.call('PEXPIRETIME', name)
    if fresh or (at >= 0 and at < tonumber(at_ms)) then redis.call('PEXPIREAT', name, at_ms) end
  end
end
local function reindex(labels, head, at_ms, member)
  local digests = redis.call('GET', labels)
  if not digests then return end
  for i = 1, string.len(digests), 32 do
    index(head .. string.sub(digests, i, i + 31), at_ms, member)
  end
  if at_ms == '' then redis.call('PERSIST', labels) else redis.call('PEXPIREAT', labels, at_ms) end
end
"""
"""Lua the scripts of tagged decisions share (``tags``): ``index`` lists ``member`` in the
index ``name`` until ``at_ms`` (``""``: no expiry), pushing the index's own expiry out;
``reindex`` does it for every index a decision's labels key names (its digests, 32 hex
characters each, after ``head``), when it has one: a renewed or refreshed decision stays
listed as long as it lives."""

RENEW = (
    INDEX
    + """
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
reindex(KEYS[2], ARGV[4], ARGV[2], ARGV[5])
return 1
"""
)
"""Rewrite the header's expiry and Redis's own together, for a live entry only; a tagged
decision's indexes follow (``INDEX``).

KEYS: the entry, its labels key. ARGV: the new header, the new PXAT in ms (``""`` for
none), the caller's clock in ms, the head of its index names, the key.
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

SWAP = (
    INDEX
    + """
local current = redis.call('GET', KEYS[1])
if current and string.sub(current, 10) ~= ARGV[1] then return current end
if ARGV[3] == '' then
  redis.call('SET', KEYS[1], ARGV[2])
else
  redis.call('SET', KEYS[1], ARGV[2], 'PXAT', ARGV[3])
end
if current then redis.call('PUBLISH', ARGV[4], ARGV[5]) end
reindex(KEYS[2], ARGV[6], ARGV[3], ARGV[5])
return false
"""
)
"""Compare-and-set on the value after the 9-byte header (a renewal rewrites only the header).

Stores the new entry if the key holds the expected value or nothing, and then
tells other tiers to drop their copies of the old one; otherwise returns what is
there; a tagged decision's indexes follow (``INDEX``). KEYS: the entry, its labels key.
ARGV: the expected value, the new stored bytes, the new PXAT in ms (``""`` for none), the
invalidation channel, the key to announce, the head of its index names.
"""

ACQUIRE = """
local held = redis.call('GET', KEYS[1])
if held then
  local bound, holder = string.match(held, '^(%d+):(.*)$')
  local left = redis.call('PTTL', KEYS[1])
  if bound and left > 0 and left <= tonumber(bound) and holder ~= ARGV[3] then return 0 end
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 1
"""
"""Take a lease unless a live one of another token holds the key, or renew one this
token holds; a lease is ``<ttl ms>:<token>``.

The owner of a lease renews it while it computes, so that the lease can be
short: a dead owner's lease ends soon, a live one's never. A lease is live
only while Redis's expiry is within the ttl written in it
(``layout.lease_is_live``): one without an expiry, or with a longer one, or a
value that is no lease at all (written by something else) is dead and taken.
ARGV: the lease's value, its ttl in ms, the token.
"""

RENEW_LEASE = """
local held = redis.call('GET', KEYS[1])
if held and string.sub(held, (string.find(held, ':', 1, true) or 0) + 1) == ARGV[3] then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return 1
end
return 0
"""
"""Extend a lease that ``token`` still holds (by the token after its ttl); never take one.

A holder's renewal that crosses its own release (or arrives after another
process took the lease over) finds another value or none, and changes nothing.
ARGV: the lease's value, its ttl in ms, the token.
"""

RELEASE = """
local held = redis.call('GET', KEYS[1])
if held and string.sub(held, (string.find(held, ':', 1, true) or 0) + 1) == ARGV[1] then
  redis.call('DEL', KEYS[1])
end
redis.call('PUBLISH', ARGV[2], ARGV[3])
return 1
"""
"""Compare-and-delete a lease (by the token after its ttl), then tell waiters to look again.

ARGV: the holder's token, the channel, the key to announce.
"""

DELETE = """
if redis.call('UNLINK', KEYS[1]) == 1 then redis.call('PUBLISH', ARGV[1], ARGV[2]) end
return 1
"""
"""Drop an entry and, when there was one, tell other tiers to drop their copies.

ARGV: the invalidation channel, the key to announce.
"""
