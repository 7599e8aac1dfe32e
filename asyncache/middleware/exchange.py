"""One cacheable request through the engine: the middleware's door.

The middleware hands ``Engine.get_or_compute`` a compute that runs the app
and captures its response, so coalescing, leases, audits, shadow mode, the
cache's ``admit`` and ttl hooks, renewals and the store guard hold for HTTP
exactly as they do for the decorator. What only HTTP knows stays here and in
``response``: whether a response may be stored at all, privacy, headers.

The request that computes (the leader) runs the app in a task of its own and
streams the response to its client as the app sends it; the engine gets the
captured response as soon as it is complete, not when the app returns (an
app's background work runs after its response), and the leader's request ends
when the app does. A response that may not be stored is ``Unshared``: the
leader's client has it, and each waiting request runs the app itself.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable
from typing import Any

from ..engine import MISS, Engine, Unshared
from ..runtime import cancelled, is_cancellation, new_event, spawn
from ..stats import RateLimitedLog
from .response import AdmitResponse, ResponseCapture, StoredResponse, replay_messages, to_value
from .stats import MiddlewareStats
from .status import StatusHeaders
from .types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["Exchange", "ExchangeSettings", "OnHit"]

logger = logging.getLogger("asyncache.middleware")
_log = RateLimitedLog(logger)

OnHit = Callable[[Scope], Any]
"""``on_hit(asgi_scope)``: called before a stored answer is sent; ``False`` sends none."""

_REPLAY_ERRORS = (KeyError, TypeError, ValueError, AttributeError, UnicodeEncodeError)


class ExchangeSettings:
    """What every request of one middleware shares; built once by the middleware."""

    __slots__ = (
        "admit",
        "app",
        "audit",
        "engine",
        "headers",
        "keyed",
        "on_hit",
        "stats",
        "statuses",
    )

    def __init__(
        self,
        *,
        app: ASGIApp,
        engine: Engine,
        stats: MiddlewareStats,
        headers: StatusHeaders,
        statuses: frozenset[int],
        keyed: frozenset[bytes],
        admit: AdmitResponse | None,
        on_hit: OnHit | None,
        audit: bool,
    ) -> None:
        self.app = app
        self.engine = engine
        self.stats = stats
        self.headers = headers
        self.statuses = statuses
        self.keyed = keyed
        self.admit = admit
        self.on_hit = on_hit
        self.audit = audit

    def count_bypass(self, reason: str) -> None:
        """Count a request that did not use the cache."""
        self.stats.outcomes["bypass"] += 1
        self.stats.bypassed(reason)
        self.engine.stats.bypassed += 1


class Exchange:
    """One request whose answer the engine decides: a hit, a shared response, or a run of the app.

    Args:
        settings: the middleware's shared settings.
        scope: the request's scope.
        receive: replays the body already read, then the server's ``receive``.
        send: the server's ``send``.
        key: the request's key.
        inputs: the canonical request, for the ``ttl`` and ``admit`` hooks.
        body: the request body, for an audit's run of the app.
    """

    __slots__ = (
        "app",
        "body",
        "inputs",
        "key",
        "receive",
        "scope",
        "send",
        "settings",
        "source",
    )

    def __init__(
        self,
        settings: ExchangeSettings,
        scope: Scope,
        receive: Receive,
        send: Send,
        key: bytes,
        inputs: list[Any],
        body: bytes,
    ) -> None:
        self.settings = settings
        self.scope = scope
        self.receive = receive
        self.send = send
        self.key = key
        self.inputs = inputs
        self.body = body
        self.source = "hit"
        self.app: AppRun | None = None

    async def run(self) -> None:
        """Answer the request: from the engine, or by running the app as the leader."""
        settings = self.settings
        engine = settings.engine
        value = engine.hit_now(self.key)
        if value is MISS:
            try:
                value = await engine.get_or_compute(
                    self.key,
                    self.compute,
                    self.inputs,
                    recompute=self.recompute,
                    audit=settings.audit,
                    source=self.told,
                )
            except BaseException:
                if self.app is not None and self.app.finished.is_set():
                    self.app.raise_error()  # the app's own exception is what the server must see
                raise
        if self.app is not None:
            # This request ran the app: its client already has the response. The request
            # ends when the app does (its background work runs after the response).
            await self.app.finished.wait()
            self.app.raise_error()
            return
        await self.answer(value)

    def told(self, source: str) -> None:
        self.source = "hit" if source == "hit" else "shared"

    async def answer(self, value: Any) -> None:
        """Send a stored or shared response, unless it is unreadable or ``on_hit`` refuses it."""
        settings = self.settings
        outcome = self.source
        try:
            start, body = replay_messages(
                value,
                settings.headers.for_outcome(outcome),
                head=self.scope["method"] == "HEAD",
            )
        except _REPLAY_ERRORS:
            _log.warning("entry", "asyncache: an entry under a route is not a stored response")
            await self.bypass("unreadable_entry")
            return
        if settings.on_hit is not None and not await self._hit_allowed():
            await self.bypass("on_hit")
            return
        settings.stats.outcomes[outcome] += 1
        await self.send(start)
        await self.send(body)

    async def bypass(self, reason: str) -> None:
        """Run the app for this request alone, outside the cache."""
        settings = self.settings
        settings.count_bypass(reason)
        await settings.app(
            self.scope, self.receive, settings.headers.tagged(self.send, "bypass", reason)
        )

    async def _hit_allowed(self) -> bool:
        on_hit = self.settings.on_hit
        assert on_hit is not None
        try:
            verdict = on_hit(self.scope)
            if inspect.isawaitable(verdict):
                verdict = await verdict
        except Exception as exc:
            _log.warning("on_hit", "asyncache: the on_hit hook raised %r; calling the app", exc)
            return False
        return verdict is not False

    # -- running the app -------------------------------------------------------

    async def compute(self) -> Any:
        """Run the app for this request (the engine calls this at most once per flight).

        Returns the storable response value as soon as the response is
        complete, or ``Unshared(None)`` when it may not be stored or shared.
        """
        settings = self.settings
        settings.stats.outcomes["miss"] += 1
        self.app = run = AppRun()
        capture = ResponseCapture(
            self.send,
            scope=self.scope,
            extra=settings.headers.for_outcome("miss"),
            statuses=settings.statuses,
            keyed=settings.keyed,
            limit=settings.engine.max_entry_bytes,
            admit=settings.admit,
            finish=self._finish,
        )
        run.task = spawn(self._run_app(run, capture))
        try:
            await run.response.wait()
        except BaseException as exc:
            if is_cancellation(exc) and run.task is not None:
                # The flight itself was cancelled (the cache is closing): stop the app too.
                run.task.cancel()
            raise
        if run.response_error is not None:
            raise run.response_error
        return run.value

    async def _run_app(self, run: AppRun, capture: ResponseCapture) -> None:
        try:
            await self.settings.app(self.scope, self.receive, capture)
        except BaseException as exc:
            if is_cancellation(exc):
                run.settle(error=cancelled("the app was cancelled"))
                raise
            run.error = exc
            run.settle(error=exc)  # the flight fails; nothing is stored
        finally:
            if not run.response.is_set():
                # The app ended without a whole response.
                self.settings.stats.not_admitted("incomplete")
                run.settle(Unshared(None))
            run.finished.set()

    async def _finish(self, response: StoredResponse | None, reason: str | None) -> None:
        """The response is complete: hand it to the engine (or say it is not shareable)."""
        run = self.app
        if run is None or run.response.is_set():
            return
        if response is None:
            self.settings.stats.not_admitted(reason or "refused")
            run.settle(Unshared(None))
            return
        own = self.settings.headers.names
        run.settle(to_value(response, own, head=self.inputs[0] == "HEAD"))

    async def recompute(self) -> Any:
        """Run the app again in the background for an audit; its response goes nowhere.

        Raises:
            ValueError: the fresh response may not be stored, so it cannot be compared.
        """
        settings = self.settings
        done: list[tuple[StoredResponse | None, str | None]] = []
        sent = False

        async def receive() -> Message:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": self.body, "more_body": False}
            # Never a disconnect: an app that listens for one would cut its response short.
            await new_event().wait()
            raise AssertionError("unreachable")

        async def discard(message: Message) -> None:
            pass

        async def finish(response: StoredResponse | None, reason: str | None) -> None:
            if not done:
                done.append((response, reason))

        capture = ResponseCapture(
            discard,
            scope=self.scope,
            extra=[],
            statuses=settings.statuses,
            keyed=settings.keyed,
            limit=settings.engine.max_entry_bytes,
            admit=settings.admit,
            finish=finish,
        )
        await settings.app(dict(self.scope), receive, capture)
        if not done:
            raise ValueError("the app ended without a whole response")
        response, reason = done[0]
        if response is None:
            raise ValueError(f"the fresh response may not be stored ({reason})")
        return to_value(response, settings.headers.names, head=self.inputs[0] == "HEAD")


class AppRun:
    """One run of the app by a leader: when its response is complete, and when it ends."""

    __slots__ = ("error", "finished", "response", "response_error", "task", "value")

    def __init__(self) -> None:
        self.response = new_event()
        """Set once the response is complete (or known not to be shareable, or failed)."""
        self.finished = new_event()
        """Set when the app returned or raised."""
        self.value: Any = None
        self.response_error: BaseException | None = None
        self.error: BaseException | None = None
        """What the app raised, for the leader's server."""
        self.task: Any = None

    def settle(self, value: Any = None, *, error: BaseException | None = None) -> None:
        """Hand the engine the outcome (the first one only)."""
        if not self.response.is_set():
            self.value = value
            self.response_error = error
            self.response.set()

    def raise_error(self) -> None:
        """Raise what the app raised, if it did."""
        if self.error is not None:
            raise self.error
