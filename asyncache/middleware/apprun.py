"""A run of the app on a miss: its response to a ``Broadcast``, its outcome to the engine.

The app runs in a task of its own: the engine gets the captured response as
soon as it is complete, not when the app returns (an app's background work
runs after its response), and neither a leader that is cancelled nor one
whose client left cuts the run short for the requests that share it.

A run that may fall back on a stale response (``fallback``) fails for the
engine when the app raises before its start message or answers one of
``STALE_IF_ERROR_STATUSES`` (``FailedAnswer``): the engine then answers with
the stale decision while its window lasts, and what the app sent goes nowhere.
"""

from __future__ import annotations

import time
from typing import Any

from ..engine import (
    Broadcast,
    Event,
    Fresh,
    Freshness,
    Unshared,
    cancelled,
    is_cancellation,
    new_event,
    overridden,
    spawn,
    unwrap,
)
from ..tags import tagging_of
from .capture import ResponseCapture, response_broadcast
from .freshness import Freshness as HttpFreshness
from .freshness import freshness
from .response import StoredResponse, invalid_reason, private, to_value
from .settings import ExchangeSettings
from .types import Message, Receive, Scope

__all__ = ["AppRun", "AppRunner", "FailedAnswer", "LeaderReceive"]


class FailedAnswer(Exception):
    """The app answered with a failure a stale response may replace (the engine's error)."""

    def __init__(self, status: str) -> None:
        super().__init__(f"the app answered {status}")
        self.status = status


class AppRunner:
    """Runs the app for one request, for the engine (``compute``) and for audits (``recompute``).

    Args:
        settings: the middleware's shared settings.
        scope: the request's scope.
        receive: the leader's ``receive`` (the body already read, then the server's).
        key: the request's key.
        inputs: the canonical request.
        body: the request body, for an audit's run of the app.
        route: the route, whose typical run a storable answer times (``RunTimes``).
    """

    __slots__ = (
        "app",
        "body",
        "broadcast",
        "fallback",
        "inputs",
        "key",
        "receive",
        "route",
        "scope",
        "settings",
    )

    def __init__(
        self,
        settings: ExchangeSettings,
        scope: Scope,
        receive: Receive,
        key: bytes,
        inputs: list[Any],
        body: bytes,
        route: str = "",
    ) -> None:
        self.settings = settings
        self.route = route
        self.scope = scope
        self.receive = receive
        self.key = key
        self.inputs = inputs
        self.body = body
        self.app: AppRun | None = None
        """The run of the app, once the engine asked for one."""
        self.broadcast: Broadcast | None = None
        """Where the run's messages go; set before the engine may call ``compute``."""
        self.fallback = False
        """A stale response may answer instead of a failure (the engine's ``stale=``)."""

    async def compute(self) -> Any:
        """Run the app for this request (the engine calls this at most once per run).

        Returns the storable response value as soon as the response is
        complete, or ``Unshared(None)`` when it may not be stored.
        """
        settings = self.settings
        broadcast = self.broadcast
        assert broadcast is not None
        settings.stats.outcomes["miss"] += 1
        started = time.perf_counter()
        self.app = run = AppRun()
        run.capture = capture = settings.capture(
            broadcast,
            self.scope,
            self._finish,
            hold=True,
            fallback=self.fallback,
            marks=tagging_of(self.key),
        )
        receive = LeaderReceive(self.receive, broadcast, run.response)
        run.task = spawn(self._run_app(run, capture, receive, broadcast))
        try:
            await run.response.wait()
        except BaseException as exc:
            if is_cancellation(exc) and run.task is not None:
                # The run itself was cancelled (the cache is closing): stop the app too.
                run.task.cancel()
            raise
        if run.response_error is not None:
            raise run.response_error
        if run.freshness is not None:
            # The store write that follows, in this same task, keeps the entry this long.
            overridden.set(run.freshness)
        if type(run.value) is not Unshared:
            # A run whose answer followers could have had: what they may wait for.
            settings.run_times.ran(self.route, time.perf_counter() - started)
        return run.value

    async def _run_app(
        self, run: AppRun, capture: ResponseCapture, receive: Receive, broadcast: Broadcast
    ) -> None:
        try:
            await self.settings.app(self.scope, receive, capture)
        except BaseException as exc:
            await capture.flush()  # what the app sent reaches its clients before its end
            if is_cancellation(exc):
                run.settle(error=cancelled("the app was cancelled"))
                raise
            run.error = exc
            if capture.fail_over():
                # Nothing was sent: the engine decides whether the stale response answers.
                run.settle(error=exc)
                await capture.decided()
                if not capture.replaced:
                    broadcast.fail(exc)
            else:
                broadcast.fail(exc)
                run.settle(error=exc)  # nothing is stored; whoever shares the run shares this
        finally:
            if not run.response.is_set():
                # The app ended without a whole response.
                self.settings.stats.not_admitted("incomplete")
                run.settle(Unshared(None))
            await capture.flush()
            broadcast.end()
            run.finished.set()

    async def _finish(self, response: StoredResponse | None, reason: str | None) -> None:
        """The response is complete: hand it to the engine (or say it may not be stored)."""
        run = self.app
        if run is None or run.response.is_set():
            return
        stats = self.settings.stats
        if response is None:
            stats.not_admitted(reason or "refused")
            if run.capture is not None and run.capture.failed:
                run.settle(error=FailedAnswer(run.capture.failed))
                return
            if reason is not None and private(reason):
                # Private to its client: identical requests could not have shared it, so
                # for a while they go straight to the app (hit-for-pass). A failure may
                # not come again: its key keeps coalescing.
                self.settings.remember_pass(self.key)
            run.settle(Unshared(None))
            return
        kept = self._kept(response)
        if type(kept) is Unshared:
            run.settle(kept)
            return
        run.stored = unwrap(kept)
        self.settings.end_pass(self.key)  # a storable answer ends hit-for-pass
        run.freshness = self._freshness(freshness(response.headers, time.time()))
        run.settle(kept)

    def _kept(self, response: StoredResponse) -> Any:
        """What the engine stores of a complete response: its stored form, as ``Fresh``
        when it gives its own lifetime (kept for what is left of it); ``Unshared(None)``
        when it is invalid. A miss's run and a refresh keep a response alike."""
        head = self.inputs[0] == "HEAD"
        now = time.time()
        seen = freshness(response.headers, now)
        left, age = seen.left, seen.age
        # Only a response that says how old it is or how long it lives keeps when it was
        # born (its hits then say their Age): a value that changes with time on every run
        # would make each audit and shadow comparison a mismatch.
        aged = left is not None or age > 0
        value = to_value(
            response, self.settings.headers.names, head=head, born=now - age if aged else None
        )
        invalid = invalid_reason(value, head=head)
        if invalid is not None:
            self.settings.stats.not_admitted(f"invalid_{invalid}")
            return Unshared(None)
        return value if left is None else Fresh(value, left)

    async def release(self, decision: Any) -> None:
        """Send the response the run holds: ``decision`` (what the store kept) or its own.

        ``decision`` is the engine's answer for the run, ``None`` when it failed.
        """
        run = self.app
        if run is not None and run.capture is not None:
            await run.capture.release(decision, run.stored)

    @property
    def failed(self) -> str:
        """Why the run failed when the stale response answered instead (``"503"``,
        ``"error"``); ``""`` when it did not."""
        run = self.app
        capture = None if run is None else run.capture
        return capture.failed if capture is not None and capture.replaced else ""

    def abandon(self) -> None:
        """The run was cancelled: what it holds is sent to nobody."""
        run = self.app
        if run is not None and run.capture is not None:
            run.capture.abandon()

    def _freshness(self, seen: HttpFreshness) -> Freshness | None:
        """These routes' settings, with the windows the response asks for (capped by them)."""
        settings = self.settings
        chosen = settings.freshness
        revalidate, if_error = seen.stale_while_revalidate, seen.stale_if_error
        if seen.revalidate:
            # must-revalidate and its kin: never served stale, so kept for no window.
            return (chosen or settings.engine.freshness)._replace(
                stale_while_revalidate=0.0, stale_if_error=0.0
            )
        if revalidate is None and if_error is None:
            return chosen
        policy = chosen or settings.engine.freshness
        return policy._replace(
            stale_while_revalidate=policy.stale_while_revalidate
            if revalidate is None
            else min(revalidate, policy.stale_while_revalidate),
            stale_if_error=policy.stale_if_error
            if if_error is None
            else min(if_error, policy.stale_if_error),
        )

    async def refresh(self) -> Any:
        """Run the app again in the background for a stale-while-revalidate refresh.

        Its response is kept as a miss's is (``_kept``: its own lifetime, its
        ``Age``, the route's windows, never stale when it forbids it). One that
        may not be stored (private, ``no-store``, a ``4xx``...) is
        ``Unshared``, which ends the stale entry (``Engine.serve_stale``).

        Raises:
            FailedAnswer: the app failed (raised, or answered a ``5xx``): the stale
                response serves on within its stale-if-error window.
        """
        response, reason = await self._rerun()
        if response is None:
            self.settings.stats.not_admitted(reason or "refused")
            if reason == "failure":
                raise FailedAnswer(reason)
            return Unshared(None)
        kept = self._kept(response)
        if type(kept) is not Unshared:
            policy = self._freshness(freshness(response.headers, time.time()))
            if policy is not None:
                # The store write that follows, in this same task, keeps the entry this long.
                overridden.set(policy)
        return kept

    async def recompute(self) -> Any:
        """Run the app again in the background for an audit; its response goes nowhere.

        Raises:
            ValueError: the fresh response may not be stored, so it cannot be compared.
        """
        response, reason = await self._rerun()
        if response is None:
            raise ValueError(f"the fresh response may not be stored ({reason})")
        return to_value(response, self.settings.headers.names, head=self.inputs[0] == "HEAD")

    async def _rerun(self) -> tuple[StoredResponse | None, str | None]:
        """Run the app again for no client: its complete response, or why it may not be
        stored.

        Raises:
            ValueError: the app ended without a whole response.
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

        async def finish(response: StoredResponse | None, reason: str | None) -> None:
            if not done:
                done.append((response, reason))

        broadcast = response_broadcast(settings.engine.max_entry_bytes, joinable=False)
        try:
            await settings.app(dict(self.scope), receive, settings.capture(broadcast, {}, finish))
        except OSError:
            if not done:
                raise  # otherwise: nobody reads a response that will not be stored
        if not done:
            raise ValueError("the app ended without a whole response")
        return done[0]


class LeaderReceive:
    """The app's ``receive`` in a run: the leader's, but its disconnect waits for the followers.

    A leader whose client left must not cut short the response that other
    clients are reading: the app learns of the disconnect once nobody else
    reads (or the response is complete).

    Nor, once the response is complete, before the outcome is decided (``decided``:
    stored or refused). A server answers ``http.disconnect`` as soon as its client has
    the last body message, and an app may cancel its handler then (Quart 0.23 does, at
    once). From a bare server the app's ``send`` of that message has returned by then;
    here it waits for the client (the body is paced) and then decides what is stored,
    so without this wait the app cancelled itself inside that ``send`` and a whole
    response was never stored.
    """

    __slots__ = ("_broadcast", "_decided", "_disconnect", "_receive")

    def __init__(self, receive: Receive, broadcast: Broadcast, decided: Event) -> None:
        self._receive = receive
        self._broadcast = broadcast
        self._decided = decided
        self._disconnect: Message | None = None
        """A disconnect taken from the server but not yet handed to the app."""

    async def __call__(self) -> Message:
        message = self._disconnect or await self._receive()
        if message["type"] == "http.disconnect":
            # Kept while waiting: an app's receive in a cancelled scope (Starlette's
            # ``is_disconnected`` under trio) must find it again on its next call.
            self._disconnect = message
            broadcast = self._broadcast
            while not broadcast.complete and broadcast.followers():
                await broadcast.changed().wait()
            if broadcast.complete and not self._decided.is_set():
                # Set by the app's send of the last message (or when the app ends).
                await self._decided.wait()
            self._disconnect = None
        return message


class AppRun:
    """One run of the app by a leader: when its response is complete, and when it ends."""

    __slots__ = (
        "capture",
        "error",
        "finished",
        "freshness",
        "response",
        "response_error",
        "stored",
        "task",
        "value",
    )

    def __init__(self) -> None:
        self.response = new_event()
        """Set once the response is complete (or known not to be storable, or failed)."""
        self.finished = new_event()
        """Set when the app returned or raised."""
        self.value: Any = None
        self.response_error: BaseException | None = None
        self.error: BaseException | None = None
        """What the app raised, for the leader's server."""
        self.task: Any = None
        self.freshness: Freshness | None = None
        """The windows this response is kept for, when they are not the cache's."""
        self.capture: ResponseCapture | None = None
        self.stored: Any = None
        """The response's stored form, once it may be stored: what the run adds."""

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
