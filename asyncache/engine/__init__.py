"""The engine: the one hit/miss path every door takes, for one key and for many.

Private to the package: ``DecisionCache`` is its public face, and the other
rooms (the decorator, the middleware, the stores) import what they need from
here, never from its underscore modules. Its modules:

- ``_engine``: ``Engine``, the path itself: the hit, the miss and its flight,
  admitting, encoding and adding a decision, the mode branches, renewals;
- ``_many``: the same path for many keys at once (``.many()``, micro-batches);
- ``_streams``: the same path for a streamed decision (chunks shared live on its flight);
- ``_flights``: the one coalescing table (a flight per missed key);
- ``_freshness``: fresh, stale-while-revalidate, stale-if-error, gone; jitter
  and cached errors;
- ``_guard``: the store guard (timeouts, failure counting, cool-down, a bug
  raised rather than a miss) and the shared deadlines of one call;
- ``_check``: the startup check, one round trip to the store;
- ``_leases``: one computation per fleet, through the store's leases;
- ``_forget``: dropping decisions by tag or scope (``cache.forget``);
- ``_audit``: sampled audits of hits and shadow mode;
- ``_trust``: audit windows, the wrong-rate bound, and doubting hits past it;
- ``_warm``: pre-warming from a list of inputs;
- ``_broadcast``: a computation's pieces shared live by its flight's callers;
- ``_memo``: decoded results of recent hits, by key.

What the path needs of the event loop, under asyncio and trio, is the package's
``asyncache._runtime`` (the one module that imports trio), re-exported here.
"""

from .._runtime import (
    Event,
    cancel_and_wait,
    cancelled,
    is_cancellation,
    new_event,
    spawn,
    wait_for,
)
from ._audit import Auditor, Compare, MismatchHook
from ._broadcast import MAX_PIECES, Broadcast, Framing, Reader
from ._calls import Call, ItemsCall, snapshot
from ._check import StoreCheck, check_store
from ._engine import (
    AGAIN,
    ALONE,
    MISS,
    AdmitHook,
    Engine,
    Fingerprint,
    Fresh,
    Live,
    Source,
    TtlHook,
    Unshared,
    replay_miss,
    unwrap,
)
from ._flights import Flight, error_for_caller
from ._forget import forget
from ._freshness import Freshness, StaleHit, failed_together, overridden
from ._guard import StoreGuard
from ._leases import Leases, lease_store
from ._streams import cached_stream
from ._trust import BreachHook, Trust, TrustReport, judged_as
from ._warm import WarmSummary, warm

__all__ = [
    "AGAIN",
    "ALONE",
    "MAX_PIECES",
    "MISS",
    "AdmitHook",
    "Auditor",
    "BreachHook",
    "Broadcast",
    "Call",
    "Compare",
    "Engine",
    "Event",
    "Fingerprint",
    "Flight",
    "Framing",
    "Fresh",
    "Freshness",
    "ItemsCall",
    "Leases",
    "Live",
    "MismatchHook",
    "Reader",
    "Source",
    "StaleHit",
    "StoreCheck",
    "StoreGuard",
    "Trust",
    "TrustReport",
    "TtlHook",
    "Unshared",
    "WarmSummary",
    "cached_stream",
    "cancel_and_wait",
    "cancelled",
    "check_store",
    "error_for_caller",
    "failed_together",
    "forget",
    "is_cancellation",
    "judged_as",
    "lease_store",
    "new_event",
    "overridden",
    "replay_miss",
    "snapshot",
    "spawn",
    "unwrap",
    "wait_for",
    "warm",
]
