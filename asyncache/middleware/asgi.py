"""DecisionCacheMiddleware: answers repeated prediction requests without calling the app.

Pure ASGI 3, so it wraps Starlette, FastAPI or any other ASGI app, and keeps
every request's state in objects of that request (``BodyReplay``,
``Exchange``, ``ResponseCapture``), never on the middleware; the runs in
progress (``Broadcast``) are found by key, as the engine's flights are.

For a configured method and route it reads the body (up to a cap), builds the
key from the canonical request (with its host and scheme) and looks it up. A
hit is answered from the store without calling the app. A miss runs the app
once per key at a time: identical requests that arrive meanwhile share its
response as it streams, or run the app themselves as soon as its start
message shows the cache would not store it (private, a ``5xx``...), when it
raised first, or when it is much slower to start than the route's runs are.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable, Iterable, Mapping
from time import perf_counter_ns
from typing import Any

from ..cache import DecisionCache
from ..engine import MISS, Freshness
from ..stats import RateLimitedLog
from ..stores import entries_of
from ..tags import Tagging, tagging
from .exchange import Exchange, ExchangeSettings, OnHit, refuse_in_replay
from .request import (
    FORWARDING,
    REMEMBERED_BODY_BYTES,
    BodyBudget,
    BodyReplay,
    RequestHead,
    RequestHeads,
    RequestKeys,
    read_body,
    whole_body,
)
from .response import AdmitResponse, replay_maker
from .routes import Route, RouteTable
from .stats import BYPASS_COUNTED, MiddlewareStats, middleware_stats
from .status import (
    TIMINGS_MADE,
    StatusHeaders,
    TimedSend,
    hit_timings,
    made_timing,
    timing_header,
)
from .types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["DecisionCacheMiddleware", "OnHit", "ScopeFunction"]

logger = logging.getLogger("asyncache.middleware")
# Hooks that raise, or odd entries, would raise on every request: log each kind at a bounded rate.
_log = RateLimitedLog(logger)

ScopeFunction = Callable[[Scope], Any]
"""``scope(asgi_scope)``: the principal or tenant to key under (may be a coroutine function)."""


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
        vary: request headers whose values are part of the key, every value
            of a repeated one in order. An absent header and an empty one key
            differently; ``-`` and ``_`` in a name are one (a WSGI bridge maps
            both to one variable). A response whose ``Vary`` names a header
            outside this list (and ``Content-Type`` and ``Host``) is not stored.
        scope: ``scope(asgi_scope)`` returns the principal or tenant the
            response belongs to (sync or async). It is the key's scope, so
            entries never cross it. Without it, requests with credentials
            bypass the cache; when it returns ``None`` for such a request, so
            do they.
        admit: ``admit(asgi_scope, response)`` returning ``False`` keeps a
            response (a degraded or fallback answer) out of the cache (sync or
            async; it sees a ``StoredResponse``).
        statuses: the statuses that may be stored; never ``206`` nor ``304``,
            whatever this says (they answer one request's ``Range`` or validators).
        max_body_bytes: request bodies larger than this bypass the cache; the
            app still receives them whole.
        max_held_body_bytes: the most request bytes held, across all requests,
            while their bodies arrive (clients that declare large bodies and
            stall would otherwise hold ``max_body_bytes`` each): past it, a
            body being read bypasses the cache (``body_budget``), handed to the
            app as it stands.
        credentials: request headers that make a request private, in any
            case and with ``-`` or ``_`` alike (``x_api_key`` is ``X-Api-Key``).
        forwarding: what to do with a request that carries a forwarding header
            (``Forwarded``, ``X-Forwarded-Host``, ``X-Forwarded-Proto``...: see
            ``FORWARDING``) not named in ``vary``, or two ``Host`` headers:
            ``"bypass"`` (the default: the app answers it alone) or ``"key"``
            (every forwarding header and every ``Host`` value join the key).
            An app behind a proxy that always sends one, and that may read it,
            names it in ``vary`` or says ``"key"``.
        follower_timeout: how long a request waits for an identical request's
            run of the app to start its answer before running the app itself,
            in seconds. ``None`` (the default): a few times the route's
            typical run (``FOLLOWER_FACTOR`` times the moving average of the
            runs whose answer could be shared, or their slowest recent one
            when longer, at least ``FOLLOWER_FLOOR``),
            and the cache's ``coalesce_timeout`` until one was timed. Never
            longer than ``coalesce_timeout``.
        fingerprint: the model's fingerprint for these routes; the cache's by default.
        status_header: the response header saying what happened
            (``hit``, ``miss``, ``shared``, ``bypass``, ``disabled``). ``None``
            is the switch for clients that must not learn what the cache did:
            no response then tells a hit from a run (no status header, no
            ``Server-Timing``, no ``Age`` on hits), unless ``cache_status`` or
            ``server_timing=True`` asks for one by name.
        cache_status: add an RFC 9211 ``Cache-Status`` header; ``True`` names
            this cache ``asyncache``, a string names it so.
        server_timing: add a W3C ``Server-Timing`` header,
            ``cache;desc=hit;dur=0.041``: the outcome, and the milliseconds from
            the request reaching the middleware to its response starting (for a
            miss, the app's time included). Browsers' developer tools and load
            generators show it beside the round trip. ``None`` (the default):
            on, unless ``status_header`` is ``None``; without a status header
            the timing names no outcome (``cache;dur=...``), though a hit's
            duration still tells it apart.
        on_hit: ``on_hit(asgi_scope)`` runs before a stored (or shared) answer is
            sent, to meter or authorize it (sync or async). ``False`` (or an
            exception) sends the request to the app instead.
        audit: let the cache's ``audit_rate`` sample hits of these routes: a
            sampled hit runs the app again in the background, with the same
            request, and compares its response with the stored one. Only for
            routes the app may safely run twice (idempotent predictions).
        stale_while_revalidate: these routes' window (the cache's when ``None``):
            a stored response past its ttl is served at once, with ``X-Cache:
            stale`` and ``Cache-Status: ...; hit; fwd=stale``, while the app runs
            once in the background to refresh it. A response's own
            ``Cache-Control: stale-while-revalidate=N`` asks for less, never more.
        stale_if_error: these routes' stale-if-error window (the cache's when
            ``None``), capped likewise by a response's ``stale-if-error=N``:
            within it, a run whose app raises before its start or answers 500,
            502, 503 or 504 is answered with the stored response (``X-Cache:
            stale``, ``Cache-Status: ...; fwd=stale; fwd-status=503;
            detail=stale-if-error``), for every request sharing the run.
        pass_ttl: seconds a key whose answer may not be shared (private, a
            ``Set-Cookie``, an unkeyed ``Vary``...) sends identical requests
            straight to the app, each on its own run (``X-Cache: miss``; counted
            in ``passes``), instead of having them wait on a run whose answer they
            may not share (hit-for-pass). A ``5xx`` or a response too large may
            not come again, so it is not remembered.
            ``0`` turns it off.
        tags: ``tags(asgi_scope)`` returns the tags (strings) a stored response
            carries (sync or async), so that ``cache.forget(tags=[...])`` drops
            it; called only when a response is stored. Its scope (``scope=``)
            can always be forgotten (``cache.forget(scope=...)``).
        tag_header: the response header the app names more tags in,
            comma-separated (``Cache-Tag: doc:42, policy:7``); the middleware
            takes it out of every response of a cached route, stored or not,
            hit or miss. ``None`` reads no header and leaves it alone.

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
        max_held_body_bytes: int = 64 * 1024 * 1024,
        credentials: Iterable[str] = ("authorization", "cookie"),
        fingerprint: str | Mapping[str, Any] | None = None,
        status_header: str | None = "X-Cache",
        cache_status: bool | str = False,
        server_timing: bool | None = None,
        on_hit: OnHit | None = None,
        audit: bool = False,
        forwarding: str = "bypass",
        follower_timeout: float | None = None,
        stale_while_revalidate: float | None = None,
        stale_if_error: float | None = None,
        pass_ttl: float = 5.0,
        tags: Callable[[Scope], Any] | None = None,
        tag_header: str | None = "Cache-Tag",
    ) -> None:
        if routes is not None and paths is not None:
            raise ValueError("give routes or paths, not both")
        if follower_timeout is not None and not follower_timeout >= 0:
            raise ValueError("follower_timeout must be a number of seconds, or None")
        if forwarding not in ("bypass", "key"):
            raise ValueError('forwarding must be "bypass" or "key"')
        if max_body_bytes < 0:
            raise ValueError("max_body_bytes must not be negative")
        if max_held_body_bytes < 0:
            raise ValueError("max_held_body_bytes must not be negative")
        self.app = app
        self.cache = cache
        self._engine = cache.engine  # made with the cache, never replaced
        self.max_body_bytes = max_body_bytes
        self._bodies = BodyBudget(max_held_body_bytes)
        self.stats: MiddlewareStats = middleware_stats(cache)
        self._routes = RouteTable(routes if routes is not None else paths)
        self._exact_routes = self._routes.exact
        self._keys = RequestKeys(
            {name: cache.key_builder(name, fingerprint) for name in self._routes.names}
        )
        self._methods = frozenset(method.upper() for method in methods)
        vary_names = [_header_name(name) for name in vary]
        if forwarding == "key":
            vary_names += [name for name in (*FORWARDING, b"host") if name not in vary_names]
        self._heads = RequestHeads(
            vary_names, [_header_name(name) for name in credentials], max_body_bytes
        )
        self._scope_fn = scope
        self._headers = StatusHeaders(status_header, cache_status, tag_header)
        self._tags_fn = tags
        # status_header=None: the one switch that keeps outcomes from clients (docs/security.md).
        self._server_timing = status_header is not None if server_timing is None else server_timing
        hit_headers = self._headers.for_outcome("hit")
        # What this middleware's hits make of a stored answer (hit_now's made): its
        # replay, with this middleware's hit headers already joined to the stored ones.
        self._hit_desc = b"hit" if self._headers.status_name is not None else None
        ages = self._headers.ages
        self._ready = replay_maker(hit_headers, head=False, ages=ages)
        self._ready_for_head = replay_maker(hit_headers, head=True, ages=ages)
        self._on_hit = on_hit
        # Requests the hit path may answer: no hook to call, a body the keys memory holds.
        # With a hook, no method is the hit path's: one check for both.
        self._hit_methods = self._methods if scope is None and on_hit is None else frozenset()
        # The two memories' dicts (never replaced), looked up by the hit path itself.
        self._known_heads = self._heads.known
        self._known_keys = self._keys.known
        self._remembered_body = min(max_body_bytes, REMEMBERED_BODY_BYTES)
        self._hit_timings = hit_timings(self._hit_desc)
        self._settings = ExchangeSettings(
            app=app,
            engine=cache.engine,
            stats=self.stats,
            headers=self._headers,
            statuses=frozenset(statuses),
            # What a response's Vary may name: what the key holds.
            keyed=frozenset([*vary_names, b"content-type", b"host"]),
            admit=admit,
            on_hit=on_hit,
            audit=audit,
            follower_timeout=follower_timeout,
            freshness=_route_freshness(cache, stale_while_revalidate, stale_if_error),
            pass_ttl=pass_ttl,
            tags=tags,
        )

    def __repr__(self) -> str:
        return f"DecisionCacheMiddleware(app={self.app!r}, cache={self.cache!r})"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            # Lifespan and websocket scopes pass through untouched.
            await self.app(scope, receive, send)
            return
        started = perf_counter_ns()
        # The hit path: a cached route, a remembered head and key, a body in one message,
        # no hooks. Anything else (and every miss) takes _handle's general path, which
        # counts, bypasses and runs the app; a hit here is answered without a call of it.
        method = scope["method"]
        path = scope["path"]
        # An exact path is the common route: looked up here, saving match()'s call.
        route = self._exact_routes.get(path) or self._routes.match(path)
        engine = self._engine
        if (
            route is None
            or method not in self._hit_methods
            or engine.mode == "off"  # not enabled (the property, without its call)
        ):
            await self._handle(scope, receive, send, started)
            return
        try:
            head = self._known_heads.get(tuple(scope["headers"]))
        except (KeyError, TypeError):  # a hand-built scope: _handle reads it
            head = None
        if head is None or not head.public:
            await self._handle(scope, receive, send, started)
            return
        message = await receive()
        body = message.get("body", b"")
        if (
            message["type"] != "http.request"
            or message.get("more_body", False)
            or len(body) > self._remembered_body
        ):
            await self._received(scope, receive, send, started, route, head, None, message)
            return
        try:
            # The keys memory, by RequestKeys.key's parts, looked up here: its call would
            # cost as much as the lookup.
            key = self._known_keys.get(
                (
                    route,
                    method,
                    scope["root_path"],
                    path,
                    scope["query_string"],
                    scope["scheme"],
                    head,
                    None if head.host is not None else scope["server"],
                    body,
                    None,
                )
            )
        except (KeyError, TypeError):  # a hand-built scope: key() builds its key
            key = None
        if key is None:
            await self._received(scope, receive, send, started, route, head, None, message)
            return
        # A hit on an entry in memory: answered now, from the replay made on its first hit.
        value = engine.hit_now(key, self._ready_for_head if method == "HEAD" else self._ready)
        if value is MISS:
            # The body whole in its message: what the app receives first.
            replay = BodyReplay([message], receive)
            timed = self._timed(send, started)
            await self._run(scope, replay, timed, key, head, body, route, value, None)
            return
        self.stats.outcomes["hit"] += 1
        # Fresh messages (what is in front may change them), from the replay's parts.
        headers = [*value.hit_headers] if value.born is None else value.hit_start()
        if self._server_timing:
            us = (perf_counter_ns() - started) // 1000
            timing = self._hit_timings[us] if us < TIMINGS_MADE else None
            headers.append(timing or made_timing(self._hit_desc, us))
        await send({"type": "http.response.start", "status": value.status, "headers": headers})
        await send({"type": "http.response.body", "body": value.body, "more_body": False})

    async def _handle(self, scope: Scope, receive: Receive, send: Send, started: int) -> None:
        """A request the hit path did not settle before reading its body."""
        method = scope["method"]
        if method not in self._methods:
            self.stats.bypassed("method")
            # The stats endpoint takes it back (every middleware in front that counted it).
            scope.setdefault(BYPASS_COUNTED, []).append((self.stats, "method"))
            await self.app(scope, receive, send)
            return
        path = scope["path"]
        route = self._exact_routes.get(path) or self._routes.match(path)
        if route is None:
            self.stats.bypassed("route")
            scope.setdefault(BYPASS_COUNTED, []).append((self.stats, "route"))
            await self.app(scope, receive, send)
            return
        # The client's send is wrapped to add Server-Timing (_timed) only where the answer
        # is not a hit, which adds its own: a hit makes no wrapper.
        engine = self._engine
        if engine.mode == "off":
            self.stats.outcomes["disabled"] += 1
            engine.stats.bypassed += 1
            timed = self._timed(send, started)
            await self.app(scope, receive, self._headers.tagged(timed, "disabled"))
            return
        head = self._heads.read(scope.get("headers", ()))
        if head.refusal is not None:  # body_too_large (by its Content-Length) among them
            await self._bypass(scope, receive, self._timed(send, started), head.refusal)
            return
        principal: Any = None
        if self._scope_fn is not None:
            try:
                principal = self._scope_fn(scope)
                if inspect.isawaitable(principal):
                    principal = await principal
            except Exception as exc:
                _log.warning("scope", "asyncache: the scope function raised %r; bypassing", exc)
                await self._bypass(scope, receive, self._timed(send, started), "scope_error")
                return
        if head.credentials and principal is None:
            await self._bypass(scope, receive, self._timed(send, started), "credentials")
            return
        message = await receive()
        await self._received(scope, receive, send, started, route, head, principal, message)

    async def _received(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        started: int,
        route: str,
        head: RequestHead,
        principal: Any,
        message: Message,
    ) -> None:
        """A request whose first message is ``message``: its whole body read, keyed, answered."""
        body = message.get("body", b"")
        received: tuple[Message, ...] = ()  # read on, when the body is not whole here
        if message["type"] != "http.request" or len(body) > self.max_body_bytes:
            received = (message,)
        elif message.get("more_body", False):
            # The body whole, then an empty last message: how granian sends a small one.
            last = await receive()
            if last["type"] != "http.request" or last.get("more_body", False) or last.get("body"):
                received = (message, last)
        replay: list[Message] | None = None  # None: whole_body(), made only when the app runs
        if received:
            read = await read_body(receive, self.max_body_bytes, *received, budget=self._bodies)
            if read.body is None:
                # What was read is the app's now (read.replay): kept here, it would stay
                # for as long as the request.
                del message, body, received
                replay_receive = BodyReplay(read.replay, receive)
                reason = read.reason or "body_incomplete"
                await self._bypass(scope, replay_receive, self._timed(send, started), reason)
                return
            body, replay = read.body, read.replay
        try:
            key = self._keys.key(route, scope, head, body, principal)
        except Exception as exc:
            # Only a scope function's exotic return value gets here: the body is JSON or bytes.
            _log.warning("key", "asyncache: the request cannot be keyed (%s); bypassing", exc)
            await self._bypass(
                scope,
                BodyReplay(replay or whole_body(message, body), receive),
                self._timed(send, started),
                "unkeyable",
            )
            return
        made = self._ready_for_head if scope["method"] == "HEAD" else self._ready
        value = self._engine.hit_now(key, made)
        if value is not MISS and self._on_hit is None:
            self.stats.outcomes["hit"] += 1
            headers = value.hit_start()
            if self._server_timing:
                headers.append(timing_header(self._hit_desc, started))
            await send({"type": "http.response.start", "status": value.status, "headers": headers})
            await send({"type": "http.response.body", "body": value.body, "more_body": False})
            return
        body_replay = BodyReplay(replay or whole_body(message, body), receive)
        timed = self._timed(send, started)
        await self._run(scope, body_replay, timed, key, head, body, route, value, principal)

    async def _run(
        self,
        scope: Scope,
        receive: BodyReplay,
        send: Send,
        key: bytes,
        head: RequestHead,
        body: bytes,
        route: str,
        value: Any,
        principal: Any,
    ) -> None:
        """Answers a keyed request that no hit answered: a miss (the app runs), or a hit
        that ``on_hit`` decides on. ``receive``: the body read, then the server's."""
        exchange = Exchange(self._settings, scope, receive, send, key, head, body, route)
        if value is not MISS:
            await exchange.reply(value)  # on_hit decides
        elif principal is None and self._tags_fn is None and self._headers.tag_name is None:
            await exchange.run()
        else:
            # What this run stores counts against its scope's budget in a memory store,
            # and carries its scope and tags (``tags=``, ``Cache-Tag``: ``asyncache.tags``).
            tags_fn = self._tags_fn
            marks = Tagging(
                self.cache.namespace,
                scope=principal,
                source=None if tags_fn is None else lambda: tags_fn(scope),
            )
            with entries_of(principal), tagging({key: marks}):
                await exchange.run()

    def _timed(self, send: Send, started: int) -> Send:
        """The client's ``send``, adding ``Server-Timing`` when this middleware does."""
        if self._server_timing:
            return TimedSend(send, started, self._headers.status_name)
        return send

    async def _bypass(self, scope: Scope, receive: Receive, send: Send, reason: str) -> None:
        if self._engine.mode == "replay":
            # Replay never runs the app for a cached route, whatever kept the cache out.
            await refuse_in_replay(
                send, self._settings, f"the request would bypass the cache ({reason})"
            )
            return
        self._settings.count_bypass(reason)
        await self.app(scope, receive, self._headers.tagged(send, "bypass", reason))


def _route_freshness(
    cache: DecisionCache, revalidate: float | None, if_error: float | None
) -> Freshness | None:
    """The routes' freshness settings: the cache's with the windows given, or ``None``."""
    if revalidate is None and if_error is None:
        return None
    base = cache.freshness
    return Freshness.checked(
        **{
            **base._asdict(),
            "stale_while_revalidate": base.stale_while_revalidate
            if revalidate is None
            else revalidate,
            "stale_if_error": base.stale_if_error if if_error is None else if_error,
        }
    )


def _header_name(name: str) -> bytes:
    """A header name as the request side matches it: lowercase, ``-`` for ``_``."""
    return name.lower().replace("_", "-").encode("latin-1")
