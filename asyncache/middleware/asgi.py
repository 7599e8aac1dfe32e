"""DecisionCacheMiddleware: answers repeated prediction requests without calling the app.

Pure ASGI 3, so it wraps Starlette, FastAPI or any other ASGI app, and keeps
every request's state in objects of that request (``BodyReplay``,
``ResponseCapture``, ``_Miss``), never on the middleware.

For a configured method and route it reads the body (up to a cap), builds the
key from the canonical request and looks it up. A hit is answered from the
store without calling the app. A miss runs the app once per key at a time:
identical requests that arrive meanwhile wait and get its response if it was
stored, or run the app themselves if it was not.
"""

from __future__ import annotations

import inspect
import logging
import re
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from ..cache import MISS, DecisionCache
from ..flight import Flight
from ..keys import KeyBuilder
from ..stats import RateLimitedLog
from .request import BodyReplay, header_codes, read_body, read_head, request_inputs
from .response import AdmitResponse, ResponseCapture, StoredResponse, replay_messages, to_value
from .routes import Route, RouteTable
from .stats import MiddlewareStats, middleware_stats
from .types import ASGIApp, Headers, Message, Receive, Scope, Send

__all__ = ["DecisionCacheMiddleware", "OnHit", "ScopeFunction"]

logger = logging.getLogger("asyncache.middleware")
# Hooks that raise, or odd entries, would raise on every request: log each kind at a bounded rate.
_log = RateLimitedLog(logger)

ScopeFunction = Callable[[Scope], Any]
"""``scope(asgi_scope)``: the principal or tenant to key under (may be a coroutine function)."""
OnHit = Callable[[Scope], Any]
"""``on_hit(asgi_scope)``: called before a stored answer is sent; ``False`` sends none."""

_TOKEN = re.compile(r"[A-Za-z*][A-Za-z0-9!#$%&'*+\-.^_`|~:/]*")
_REPLAY_ERRORS = (KeyError, TypeError, ValueError, AttributeError, UnicodeEncodeError)


class _TaggedSend:
    """A ``send`` that adds the cache status headers to the start message."""

    __slots__ = ("_extra", "_send")

    def __init__(self, send: Send, extra: Headers) -> None:
        self._send = send
        self._extra = extra

    async def __call__(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            message = dict(message)
            message["headers"] = [*message.get("headers", ()), *self._extra]
        await self._send(message)


class DecisionCacheMiddleware:
    """Caches the responses of prediction endpoints in a ``DecisionCache``.

    Usable as ``Middleware(DecisionCacheMiddleware, cache=...)`` in Starlette
    and ``app.add_middleware(DecisionCacheMiddleware, cache=...)`` in FastAPI.

    Args:
        app: the ASGI app to wrap.
        cache: where responses are stored; its ``ttl``, ``admit`` (which sees
            the stored dict), ``max_entry_bytes``, ``coalesce`` and
            ``coalesce_timeout`` apply.
        routes: the paths to cache: exact paths, Starlette-style templates
            (``"/models/{name}/predict"``) or compiled patterns matching the
            whole path. The matched route is the key's namespace. ``None``
            caches every path (under the namespace ``"*"``; the path is
            always in the key).
        paths: another name for ``routes``; give one or the other.
        methods: the methods to cache.
        vary: request headers whose values are part of the key. An absent
            header and an empty one key differently. A response whose ``Vary``
            names a header outside this list (and ``Content-Type``) is not stored.
        scope: ``scope(asgi_scope)`` returns the principal or tenant the
            response belongs to (sync or async). It is the key's scope, so
            entries never cross it. Without it, requests with credentials
            bypass the cache; when it returns ``None`` for such a request, so
            do they.
        admit: ``admit(asgi_scope, response)`` returning ``False`` keeps a
            response (a degraded or fallback answer) out of the cache (sync or
            async; it sees a ``StoredResponse``).
        statuses: the statuses that may be stored.
        max_body_bytes: request bodies larger than this bypass the cache; the
            app still receives them whole.
        credentials: request headers that make a request private.
        fingerprint: the model's fingerprint for these routes; the cache's by default.
        status_header: the response header saying what happened
            (``hit``, ``miss``, ``shared``, ``bypass``, ``disabled``); ``None`` for none.
        cache_status: add an RFC 9211 ``Cache-Status`` header; ``True`` names
            this cache ``asyncache``, a string names it so.
        on_hit: ``on_hit(asgi_scope)`` runs before a stored (or shared) answer is
            sent, to meter or authorize it (sync or async). ``False`` (or an
            exception) sends the request to the app instead.

    Raises:
        ValueError: an option is out of range or both ``routes`` and ``paths`` are given.
    """

    def __init__(
        self,
        app: ASGIApp,
        *,
        cache: DecisionCache,
        routes: Iterable[Route] | None = None,
        paths: Iterable[Route] | None = None,
        methods: Iterable[str] = ("POST",),
        vary: Iterable[str] = (),
        scope: ScopeFunction | None = None,
        admit: AdmitResponse | None = None,
        statuses: Iterable[int] = (200,),
        max_body_bytes: int = 1024 * 1024,
        credentials: Iterable[str] = ("authorization", "cookie"),
        fingerprint: str | Mapping[str, Any] | None = None,
        status_header: str | None = "X-Cache",
        cache_status: bool | str = False,
        on_hit: OnHit | None = None,
    ) -> None:
        if routes is not None and paths is not None:
            raise ValueError("give routes or paths, not both")
        if max_body_bytes < 0:
            raise ValueError("max_body_bytes must not be negative")
        self.app = app
        self.cache = cache
        self.max_body_bytes = max_body_bytes
        self.stats: MiddlewareStats = middleware_stats(cache)
        self._routes = RouteTable(routes if routes is not None else paths)
        self._builders: dict[str, KeyBuilder] = {
            name: cache.key_builder(name, fingerprint) for name in self._routes.names
        }
        self._methods = frozenset(method.upper() for method in methods)
        vary_names = [name.lower().encode("latin-1") for name in vary]
        self._vary_count = len(vary_names)
        self._codes = header_codes(
            vary_names, [name.lower().encode("latin-1") for name in credentials]
        )
        # What a response's Vary may name: what the key holds.
        self._keyed = frozenset([*vary_names, b"content-type"])
        self._scope_fn = scope
        self._admit = admit
        self._statuses = frozenset(statuses)
        self._on_hit = on_hit
        self._status_name = status_header.lower().encode("latin-1") if status_header else None
        if cache_status is True:
            cache_status = "asyncache"
        self._cache_name: str | None = None
        if cache_status:
            name = str(cache_status)
            self._cache_name = name if _TOKEN.fullmatch(name) else '"' + name.replace('"', "") + '"'
        # Our own headers are never stored: a hit writes fresh ones.
        self._own = frozenset(
            name for name in (self._status_name, b"cache-status") if name is not None
        )
        self._headers: dict[str, Headers] = {}

    def __repr__(self) -> str:
        return f"DecisionCacheMiddleware(app={self.app!r}, cache={self.cache!r})"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            # Lifespan and websocket scopes pass through untouched.
            await self.app(scope, receive, send)
            return
        if scope["method"] not in self._methods:
            self.stats.bypassed("method")
            await self.app(scope, receive, send)
            return
        route = self._routes.match(scope["path"])
        if route is None:
            self.stats.bypassed("route")
            await self.app(scope, receive, send)
            return
        cache = self.cache
        if not cache.enabled:
            self.stats.outcomes["disabled"] += 1
            cache._stats.bypassed += 1
            await self.app(scope, receive, self._tagged(send, "disabled"))
            return
        head = read_head(scope.get("headers", ()), self._codes, self._vary_count)
        if head.no_store:
            await self._bypass(scope, receive, send, "no_store")
            return
        if head.encoded:
            await self._bypass(scope, receive, send, "content_encoding")
            return
        if head.content_length is not None and head.content_length > self.max_body_bytes:
            await self._bypass(scope, receive, send, "body_too_large")
            return
        principal: Any = None
        if self._scope_fn is not None:
            try:
                principal = self._scope_fn(scope)
                if inspect.isawaitable(principal):
                    principal = await principal
            except Exception as exc:
                _log.warning("scope", "asyncache: the scope function raised %r; bypassing", exc)
                await self._bypass(scope, receive, send, "scope_error")
                return
        if head.credentials and principal is None:
            await self._bypass(scope, receive, send, "credentials")
            return
        message = await receive()
        body = message.get("body", b"")
        if (
            message["type"] == "http.request"
            and not message.get("more_body", False)
            and len(body) <= self.max_body_bytes
        ):
            replay = [message]  # the whole body in one message: the common case
        else:
            read = await read_body(receive, self.max_body_bytes, message)
            if read.body is None:
                replay_receive = BodyReplay(read.replay, receive)
                await self._bypass(scope, replay_receive, send, read.reason or "body_incomplete")
                return
            body, replay = read.body, read.replay
        try:
            inputs = request_inputs(scope, head, body)
            key = self._builders[route].key(inputs, principal)
        except Exception as exc:
            # Only a scope function's exotic return value gets here: the body is JSON or bytes.
            _log.warning("key", "asyncache: the request cannot be keyed (%s); bypassing", exc)
            await self._bypass(scope, BodyReplay(replay, receive), send, "unkeyable")
            return
        # Shadow mode serves no hits: every request runs the app and fills the store.
        found = MISS if cache.mode != "live" else cache.hit_now(key)
        if found is MISS and cache.mode == "live":
            # What the synchronous path cannot settle: a remote store, audits, corruption.
            decoded = await cache.lookup(key)
            if decoded is not None:
                found = decoded.value
        if found is not MISS:
            answer = self._replay(scope, found, "hit")
            if answer is None:
                refused = "unreadable_entry"
            elif self._on_hit is None or await self._hit_allowed(scope):
                self.stats.outcomes["hit"] += 1
                await send(answer[0])
                await send(answer[1])
                return
            else:
                refused = "on_hit"
            await self._bypass(scope, BodyReplay(replay, receive), send, refused)
            return
        await self._miss(scope, BodyReplay(replay, receive), send, key, inputs)

    async def _miss(
        self, scope: Scope, receive: Receive, send: Send, key: bytes, inputs: list[Any]
    ) -> None:
        cache = self.cache
        stats = cache._stats
        stats.misses += 1
        if not cache.coalesce:
            await _Miss(self, key, inputs, None).run(scope, receive, send)
            return
        flights = cache._flights
        flight = flights.get(key)
        if flight is None:
            await _Miss(self, key, inputs, flights.claim(key)).run(scope, receive, send)
            return
        stats.coalesced += 1
        if await flight.wait(cache.coalesce_timeout):
            if flight.shared and flight.error is None and flight.value is not None:
                answer = self._replay(scope, flight.value, "shared")
                if answer is not None:
                    if self._on_hit is not None and not await self._hit_allowed(scope):
                        await self._bypass(scope, receive, send, "on_hit")
                        return
                    self.stats.outcomes["shared"] += 1
                    await send(answer[0])
                    await send(answer[1])
                    return
            # The leader's response was not stored: it was for that client only.
        else:
            stats.coalesce_timeouts += 1
        await _Miss(self, key, inputs, None).run(scope, receive, send)

    def _replay(self, scope: Scope, value: Any, outcome: str) -> tuple[Message, Message] | None:
        """The messages answering from ``value``; ``None`` when it is not a stored response."""
        try:
            return replay_messages(
                value, self._outcome_headers(outcome), head=scope["method"] == "HEAD"
            )
        except _REPLAY_ERRORS:
            _log.warning("entry", "asyncache: an entry under a route is not a stored response")
            return None

    async def _hit_allowed(self, scope: Scope) -> bool:
        assert self._on_hit is not None
        try:
            verdict = self._on_hit(scope)
            if inspect.isawaitable(verdict):
                verdict = await verdict
        except Exception as exc:
            _log.warning("on_hit", "asyncache: the on_hit hook raised %r; calling the app", exc)
            return False
        return verdict is not False

    async def _bypass(self, scope: Scope, receive: Receive, send: Send, reason: str) -> None:
        self.stats.outcomes["bypass"] += 1
        self.stats.bypassed(reason)
        self.cache._stats.bypassed += 1
        await self.app(scope, receive, self._tagged(send, "bypass", reason))

    def _tagged(self, send: Send, outcome: str, reason: str | None = None) -> Send:
        extra = self._outcome_headers(outcome, reason)
        return _TaggedSend(send, extra) if extra else send

    def _outcome_headers(self, outcome: str, reason: str | None = None) -> Headers:
        """The status headers of one outcome (computed once per outcome and reason)."""
        memo = outcome if reason is None else f"{outcome}:{reason}"
        headers = self._headers.get(memo)
        if headers is None:
            headers = []
            if self._status_name is not None:
                headers.append((self._status_name, outcome.encode()))
            if self._cache_name is not None:
                headers.append((b"cache-status", _cache_status(self._cache_name, outcome, reason)))
            self._headers[memo] = headers
        return headers


def _cache_status(name: str, outcome: str, reason: str | None) -> bytes:
    """An RFC 9211 ``Cache-Status`` member for one outcome."""
    if outcome == "hit":
        member = f"{name}; hit"
    elif outcome == "miss":
        member = f"{name}; fwd=uri-miss"
    elif outcome == "shared":
        member = f"{name}; fwd=uri-miss; collapsed"
    elif reason == "no_store":
        member = f"{name}; fwd=request; detail=no-store"
    else:
        member = f"{name}; fwd=bypass; detail={reason or outcome}"
    return member.encode("latin-1")


class _Miss:
    """One request that runs the app: captures, admits and stores its response.

    With a flight, it is the leader of the requests for its key: whatever
    happens to it (its response is refused, the app raises, the request is
    cancelled), the flight ends, and waiting requests run the app themselves
    unless it ended with a stored response.
    """

    __slots__ = ("flight", "inputs", "key", "middleware", "started")

    def __init__(
        self,
        middleware: DecisionCacheMiddleware,
        key: bytes,
        inputs: list[Any],
        flight: Flight[Any] | None,
    ) -> None:
        self.middleware = middleware
        self.key = key
        self.inputs = inputs
        self.flight = flight
        self.started = 0.0

    async def run(self, scope: Scope, receive: Receive, send: Send) -> None:
        middleware = self.middleware
        middleware.stats.outcomes["miss"] += 1
        capture = ResponseCapture(
            send,
            scope=scope,
            extra=middleware._outcome_headers("miss"),
            statuses=middleware._statuses,
            keyed=middleware._keyed,
            limit=middleware.cache.max_entry_bytes,
            admit=middleware._admit,
            finish=self.finish,
        )
        self.started = time.perf_counter()
        try:
            await middleware.app(scope, receive, capture)
        finally:
            if not capture.finished:
                # The app raised, was cancelled, or ended without a whole response.
                self._not_admitted("incomplete")
            self._end(None, shared=False)

    async def finish(self, response: StoredResponse | None, reason: str | None) -> None:
        """Store an admitted response and end the flight; called once the client has it."""
        cache = self.middleware.cache
        seconds = time.perf_counter() - self.started
        if cache.on_compute is not None:
            cache.on_compute(seconds)
        if response is None:
            self._not_admitted(reason or "refused")
            self._end(None, shared=False)
            return
        value = to_value(response, self.middleware._own, head=self.inputs[0] == "HEAD")
        try:
            winner = await cache.store_result(
                self.key, value, inputs=self.inputs, compute_seconds=seconds
            )
        except Exception as exc:
            # The client already has its answer; a cache failure must not reach the app.
            _log.warning("store", "asyncache: storing a response failed: %r", exc)
            self._end(None, shared=False)
            return
        # store_result hands back the very object it was given when it kept nothing
        # (the cache's own ttl, admit or size rules): such a response is not shared.
        self._end(winner, shared=winner is not value)

    def _not_admitted(self, reason: str) -> None:
        self.middleware.stats.not_admitted(reason)
        self.middleware.cache._stats.not_admitted += 1

    def _end(self, value: Any, *, shared: bool) -> None:
        flight = self.flight
        if flight is not None and not flight.done.is_set():
            self.middleware.cache._flights.release(self.key, flight)
            flight.set_result(value, shared=shared)
