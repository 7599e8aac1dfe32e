"""One cacheable request through the engine: the middleware's door.

A request the middleware could not answer from memory (``Engine.hit_now``)
comes here. The engine's one pipeline takes the steps
(``Engine.get_or_compute`` with the ``Exchange`` as its live door): a run of
the app in progress for an identical request is followed, a hit is answered at
once (no run, no task, no ``Broadcast``), and a miss runs ``compute``: the app,
its response captured. So leases, audits, shadow mode, the cache's ``admit``
and ttl hooks, renewals and the store guard hold for HTTP exactly as they do
for the decorator. What
only HTTP knows stays in the middleware: ``response`` (what may be stored) and
``capture`` (the app's messages as the pieces of a stream).

A miss starts a ``Broadcast`` that hangs on the engine's flight for its key
(``Flight.stream``: the one coalescing table), where identical requests find
it while it runs. The app runs on its own, and every request that shares it,
the leader included, sends its messages to its own client as they come. So:

- followers of a shareable response get each chunk as the app sends it, and
  what was admitted is stored once the response is complete;
- followers of a response the cache would not store (its start message says
  it is private, a ``5xx``, too large, stale) are released at once and run
  the app on their own, and so are the followers of a run that raised before
  its start message: one client's failure (its quota, its throttling) is never
  handed to another;
- a follower whose run has not started its answer within ``RunTimes.wait``
  (a few times the route's typical run, or ``follower_timeout``) runs the app
  on its own;
- followers of a run that ended before its start message elect one new leader;
- a run whose stored response is within its stale-if-error window answers, when
  the app raises before its start or answers 500, 502, 503 or 504
  (``STALE_IF_ERROR_STATUSES``), every request sharing it with the stale
  response (``X-Cache: stale``, ``Cache-Status: ...; fwd=stale;
  fwd-status=503; detail=stale-if-error``); past the window the failure goes
  out as it came.

The leader's request ends when the app does (its background work runs after
the response); a follower's when its response is sent.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from ..engine import (
    AGAIN,
    ALONE,
    Broadcast,
    Flight,
    Reader,
    StaleHit,
    cancelled,
    error_for_caller,
    is_cancellation,
    judged_as,
    spawn,
    wait_for,
)
from ..errors import DecodeError, ReplayMiss
from ..stats import RateLimitedLog
from .apprun import AppRunner, FailedAnswer
from .capture import response_broadcast
from .request import RequestHead, request_inputs
from .response import InvalidEntry, Replay, hook_agrees
from .settings import ExchangeSettings, OnHit
from .types import Receive, Scope, Send

__all__ = ["Exchange", "ExchangeSettings", "OnHit"]

logger = logging.getLogger("asyncache.middleware")
_log = RateLimitedLog(logger)

_RESPONSE = frozenset({"http.response.start", "http.response.body"})


class Exchange:
    """One request whose answer the engine decides: a hit, a shared response, or a run of the app.

    Args:
        settings: the middleware's shared settings.
        scope: the request's scope.
        receive: replays the body already read, then the server's ``receive``.
        send: the server's ``send``.
        key: the request's key.
        head: what its headers say (for the canonical request, made on a miss only).
        body: the request body (the same, and for an audit's run of the app).
        route: the route it matched (whose runs time a follower's wait).
    """

    __slots__ = (
        "body",
        "broadcast",
        "head",
        "inputs",
        "key",
        "passing",
        "receive",
        "route",
        "runner",
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
        head: RequestHead,
        body: bytes,
        route: str = "",
    ) -> None:
        self.settings = settings
        self.route = route
        self.scope = scope
        self.receive = receive
        self.send = send
        self.key = key
        self.head = head
        self.body = body
        # The canonical request, for the ttl and admit hooks: only a miss needs it.
        self.inputs: list[Any] = []
        self.source = "hit"
        self.runner: AppRunner | None = None
        self.passing = False
        """A pass (``Live``): this request shares no run, and its own is not listed."""
        self.broadcast: Broadcast | None = None
        """Where the run this request leads sends its messages (``Live``)."""

    async def run(self) -> None:
        """Answer a request ``hit_now`` did not: a share of a run, a hit, or a run of its own.

        The engine takes the steps (``Engine.get_or_compute`` with this exchange as its
        live door); the methods below answer each outcome over HTTP.
        """
        settings = self.settings
        engine = settings.engine
        # Hit-for-pass: the last answer could not be shared, so this request does not
        # queue behind another run; on a miss it runs the app at once, on its own (its
        # answer is stored if it may be, which ends the pass). What the store holds still
        # answers it, and a stale answer still stands in for a failed run.
        if engine.mode == "live" and bool(settings.passes) and settings.passing(self.key):
            self.passing = True
            engine.stats.passes += 1
        audit = engine.sampler is not None and settings.audit
        # The route's own audit window judges its hits (and the runs that settle doubts).
        judged = judged_as.set(self.route or None) if audit and engine.trust is not None else None
        try:
            await engine.get_or_compute(
                self.key,
                self._compute,
                self.inputs_made(),
                recompute=self._recompute,
                audit=audit,
                source=self.told,
                stream=self,
            )
        finally:
            if judged is not None:
                judged_as.reset(judged)

    async def _compute(self) -> Any:
        return await self._runner().compute()

    async def _recompute(self) -> Any:
        return await self._runner().recompute()

    def refresh(self) -> Any:
        """What a refresh runs: the app once more, in the background, for no client; its
        response replaces the stale one if it may be stored."""
        return self._runner().refresh

    async def refuse(self, error: ReplayMiss) -> None:
        await self.refuse_in_replay(error)

    def inputs_made(self) -> list[Any]:
        """The canonical request, for the ttl and admit hooks and audits: made once, on need."""
        if not self.inputs:
            self.inputs = request_inputs(self.scope, self.head, self.body)
        return self.inputs

    def _runner(self) -> AppRunner:
        if self.runner is None:
            self.runner = AppRunner(
                self.settings,
                self.scope,
                self.receive,
                self.key,
                self.inputs_made(),
                self.body,
                self.route,
            )
        return self.runner

    async def refuse_in_replay(self, error: ReplayMiss | str) -> None:
        """``mode="replay"`` never runs the app: what would run it is a 500 with the error."""
        await refuse_in_replay(self.send, self.settings, str(error))

    def told(self, source: str) -> None:
        self.source = "hit" if source == "hit" else "shared"

    async def answer(self, value: Any, how: str, entry: Any = None) -> None:
        """Answer with what the store held (``how``: ``"hit"``, ``"stale"``)."""
        self.source = how
        await self.reply(value)

    async def reply(self, value: Any) -> None:
        """Send a stored or shared response, unless it is invalid or ``on_hit`` refuses it.

        ``source`` names the outcome, with a reason after ``:`` for a stale
        response that answered a failed run (``stale:503``, ``stale:error``).
        """
        settings = self.settings
        outcome, _, reason = self.source.partition(":")
        try:
            replay = Replay.of(value, head=self.scope["method"] == "HEAD")
        except InvalidEntry as exc:
            _log.warning("entry", "asyncache: dropping an entry under a route: %s", exc)
            if settings.engine.mode != "replay":  # replay writes nothing, deletes nothing
                await settings.engine.discard_corrupt(self.key, DecodeError(str(exc)))
            await self.bypass(f"invalid_{exc.reason}")
            return
        if settings.on_hit is not None and not await self._hit_allowed():
            await self.bypass("on_hit")
            return
        settings.stats.outcomes[outcome] += 1
        named = settings.headers
        start, body = replay.messages(named.for_outcome(outcome, reason or None), age=named.ages)
        await self.send(start)
        await self.send(body)

    async def bypass(self, reason: str) -> None:
        """Run the app for this request alone, outside the cache (never in replay mode)."""
        settings = self.settings
        if settings.engine.mode == "replay":
            await self.refuse_in_replay(f"the request would bypass the cache ({reason})")
            return
        settings.count_bypass(reason)
        await settings.app(
            self.scope, self.receive, settings.headers.tagged(self.send, "bypass", reason)
        )

    async def _hit_allowed(self) -> bool:
        on_hit = self.settings.on_hit
        assert on_hit is not None
        return await hook_agrees(on_hit, self.scope, name="on_hit", otherwise="calling the app")

    # -- following a run ------------------------------------------------------------

    async def follow(self, flight: Flight[Any]) -> Any:
        """Share the outcome of ``flight``'s run: ``AGAIN`` when it ended before its start
        message, ``ALONE`` when this request must run the app on its own."""
        settings = self.settings
        engine = settings.engine
        broadcast: Broadcast = flight.stream
        reader = broadcast.join()
        try:
            wait = settings.run_times.wait(self.route, engine.coalesce_timeout)
            if not await wait_for(broadcast.decided, wait):
                engine.stats.coalesce_timeouts += 1
                return ALONE
            if broadcast.source:
                # The leader got its answer without running the app here, or its run
                # failed and the stale response answers instead.
                if broadcast.source.startswith("stale:"):
                    engine.stats.stale_if_error_hits += 1
                self.source = broadcast.source
                await self.reply(broadcast.value)
                return None
            if broadcast.ran and broadcast.shared:
                if settings.on_hit is not None and not await self._hit_allowed():
                    broadcast.leave(reader)
                    await self.bypass("on_hit")
                    return None
                settings.stats.outcomes["shared"] += 1
                await self.pump(broadcast, reader, "shared")
                if broadcast.error is not None and not broadcast.complete:
                    raise error_for_caller(broadcast.error, broadcast.traceback)
                return None
            if broadcast.ran or broadcast.error is not None:
                # Released: the response (or the failure) belongs to the leader's client
                # alone; this request's own run may well succeed.
                return ALONE
            return AGAIN
        finally:
            broadcast.leave(reader)

    async def pump(self, broadcast: Broadcast, reader: Reader, outcome: str) -> None:
        """Send ``broadcast``'s messages to this request's client as they come.

        A follower's ends with the response; the leader's when the app does.
        """
        extra = self.settings.headers.for_outcome(outcome)
        send = self.send
        extensions = self.scope.get("extensions") or {}
        try:
            while True:
                message = broadcast.take(reader)
                if message is None:
                    if broadcast.ended or reader.detached:
                        # Detached: this client lagged the others by too much; its
                        # response ends here, incomplete, and the server closes it.
                        return
                    await broadcast.changed().wait()
                    continue
                kind = message["type"]
                # Each client gets a copy: a send that changes what it is given (a
                # middleware in front, a server) must not change the stored answer
                # nor what the other clients get.
                if kind == "http.response.start":
                    message = {**message, "headers": [*message.get("headers", ()), *extra]}
                else:
                    message = {**message}
                if reader.owner or kind in _RESPONSE or kind in extensions:
                    # The leader's client gets exactly what the app sent, in order, even
                    # what a server would refuse: that is the server's to reject.
                    await send(message)
                broadcast.sent(reader)
                if not reader.owner and broadcast.framing.final(message):
                    return
        except OSError:
            return  # this client went away; the others go on
        finally:
            broadcast.leave(reader)

    # -- leading a run --------------------------------------------------------------

    async def lead(
        self,
        start: Callable[[], Awaitable[Any]],
        *,
        listed: bool,
        stale: StaleHit | None = None,
    ) -> None:
        """Start a run (found by identical requests when ``listed``) and send its response."""
        engine = self.settings.engine
        broadcast = self.broadcast = response_broadcast(engine.max_entry_bytes, joinable=listed)
        runner = self._runner()
        runner.broadcast = broadcast
        runner.fallback = stale is not None
        reader = broadcast.join(owner=True)
        # A run already in progress that this one follows (found before it would take off
        # one of its own): its failure says why a stale answer came.
        followed = engine.flights.get(self.key) if stale is not None else None
        spawn(self._produce(runner, broadcast, start(), followed, stale))
        # Whatever the app sends, from its first message on (an extension's message may
        # come before the start), until the app ends or the answer came without it.
        await self.pump(broadcast, reader, "miss")
        run = runner.app
        if broadcast.source:
            self.source = broadcast.source
            await self.reply(broadcast.value)
            if run is not None:
                # The run failed and the stale response answered: the request still ends
                # when the app does, and what the app raised is logged, not raised.
                await run.finished.wait()
                if run.error is not None:
                    _log.warning(
                        "stale_if_error",
                        "asyncache: the app raised; the stale response answered: %r",
                        run.error,
                    )
            return
        if run is not None:
            # The request ends when the app does (and what it may store is stored);
            # what the app raised is the server's to see.
            await run.finished.wait()
            await broadcast.settled.wait()
            run.raise_error()
        elif broadcast.error is not None:
            raise error_for_caller(broadcast.error, broadcast.traceback)

    async def _produce(
        self,
        runner: AppRunner,
        broadcast: Broadcast,
        outcome: Awaitable[Any],
        followed: Flight[Any] | None,
        stale: StaleHit | None,
    ) -> None:
        try:
            value = await outcome
        except BaseException as exc:
            if is_cancellation(exc):
                runner.abandon()
                broadcast.fail(cancelled("the run was cancelled"))
                raise
            # The app's own response, if it is held, goes out before the failure is told.
            await runner.release(None)
            if type(exc) is not FailedAnswer:  # a failing answer is the app's: it goes on
                broadcast.fail(exc)
        else:
            if runner.app is None:
                if followed is not None and stale is not None and value is stale.value:
                    # The run this request followed failed and the stale response
                    # answers it too, as it answers that run's own requests.
                    self.source = f"stale:{failure_of(followed.error)}"
                broadcast.resolve(value, self.source)
            else:
                # First decision wins: a whole response goes out once the store decided,
                # and another process's stored answer replaces this run's; the stale
                # response replaces a failed run's.
                await runner.release(value)
                if runner.failed:
                    broadcast.resolve(value, f"stale:{runner.failed}")
        finally:
            broadcast.joinable = False
            broadcast.settled.set()


def failure_of(error: BaseException | None) -> str:
    """Why a run a stale response answered failed: its status (``"503"``) or ``"error"``."""
    return error.status if type(error) is FailedAnswer else "error"


async def refuse_in_replay(send: Send, settings: ExchangeSettings, message: str) -> None:
    """Answer 500 with ``message``: ``mode="replay"`` never runs the app."""
    settings.stats.outcomes["replay_miss"] += 1
    body = f"asyncache replay: {message}".encode()
    headers = [
        (b"content-type", b"text/plain; charset=utf-8"),
        (b"content-length", str(len(body)).encode()),
        *settings.headers.for_outcome("replay_miss"),
    ]
    await send({"type": "http.response.start", "status": 500, "headers": headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})
