"""A pytest plugin that puts DecisionCacheMiddleware in front of every app a TestClient gets.

Loaded into a peer's own test suite (Starlette's, FastAPI's) by ``scripts/peer``
with ``-p asyncache_peer``; this directory is on ``PYTHONPATH`` then. It is not
a test module of asyncache and is never imported by asyncache's own suite.

``ASYNCACHE_PEER_MODE`` says what it does:

- ``bare``: nothing but record outcomes (the baseline);
- ``wrapped``: every app that ``starlette.testclient`` drives (TestClient,
  and FastAPI's, which is Starlette's) is wrapped in a
  ``DecisionCacheMiddleware`` with a fresh memory store per client: every
  method and route, statuses 100-599, credentials keyed per credential by a
  scope function;
- ``verify``: ``wrapped``, and every miss that was stored is replayed at once
  through a second middleware over the same cache whose app fails the test
  when it is called; the replayed status, headers and body must equal what
  the client of the miss received, byte for byte. A difference fails the test
  at teardown with ``asyncache-peer verify:`` in its message.

The cache's own status header is added under a private name and removed
before the client sees the response, so the client sees exactly what the app
(or the store) said.

``ASYNCACHE_PEER_REPORT`` names a JSON file that receives each test's
outcome and the verify counters when the session ends.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, MutableMapping
from typing import Any

import pytest

from asyncache import DecisionCache
from asyncache.middleware import DecisionCacheMiddleware
from asyncache.stores.memory import MemoryStore

MODE = os.environ.get("ASYNCACHE_PEER_MODE", "bare")
REPORT = os.environ.get("ASYNCACHE_PEER_REPORT")
MARK = "x-asyncache-peer"
_MARK_BYTES = MARK.encode()
METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "TRACE", "CONNECT")
CREDENTIALS = (b"authorization", b"cookie")

Message = MutableMapping[str, Any]

# Verify mode: counters for the whole session, and the differences found in the running test.
VERIFY = {"stored_misses": 0, "replayed_identical": 0, "differences": 0, "extension_notes": 0}
VERIFY_PARTS: dict[str, int] = {}  # how many hits differed in each part
DIFFERENCES: list[str] = []
# Tests whose hits differed (nodeid: what differed), and extension messages a hit did not send.
_VERIFY_FAILED: dict[str, list[str]] = {}
_EXTENSION_NOTES: dict[str, list[str]] = {}
_NOTES: list[str] = []


def credential_scope(scope: MutableMapping[str, Any]) -> str | None:
    """The principal of a request: its credential headers, verbatim; ``None`` without any."""
    found = [
        f"{name.decode('latin-1')}={value.decode('latin-1')}"
        for name, value in scope.get("headers", ())
        if name.lower() in CREDENTIALS
    ]
    return "\n".join(found) if found else None


def _middleware(app: Any, cache: DecisionCache) -> DecisionCacheMiddleware:
    return DecisionCacheMiddleware(
        app,
        cache=cache,
        routes=None,
        methods=METHODS,
        statuses=range(100, 600),
        scope=credential_scope,
        status_header=MARK,
        server_timing=False,
    )


class _Forbidden:
    """The app behind the verify middleware: a stored miss must be a hit, never a call."""

    def __init__(self) -> None:
        self.called = False

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        self.called = True
        await send({"type": "http.response.start", "status": 599, "headers": []})
        await send({"type": "http.response.body", "body": b"verify: the app was called"})


class Exchanged:
    """What one side of a request saw: the request body and the response messages."""

    def __init__(self) -> None:
        self.request: list[bytes] = []
        self.status: int | None = None
        self.headers: list[tuple[bytes, bytes]] = []
        self.body: list[bytes] = []
        self.outcome = b""
        self.others: list[str] = []

    def response(self) -> tuple[int | None, list[tuple[bytes, bytes]], bytes]:
        return self.status, self.headers, b"".join(self.body)


class PeerCache:
    """The middleware in front of one client's app, with the cache status header taken off."""

    def __init__(self, app: Any, *, verify: bool = MODE == "verify") -> None:
        self.app = app
        self.cache = DecisionCache(MemoryStore(), namespace="peer")
        self.middleware = _middleware(app, self.cache)
        self.forbidden = _Forbidden()
        self.verifier = _middleware(self.forbidden, self.cache) if verify else None

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        seen = Exchanged()

        async def recording_receive() -> Message:
            message: Message = await receive()
            if message["type"] == "http.request":
                seen.request.append(bytes(message.get("body", b"")))
            return message

        async def stripping_send(message: Message) -> None:
            _record(seen, message)
            if message["type"] == "http.response.start":
                message = dict(message)
                message["headers"] = [
                    (name, value)
                    for name, value in message.get("headers", ())
                    if name.lower() != _MARK_BYTES
                ]
            await send(message)

        # The app may change the scope it gets (Starlette's routing does): replay the original.
        original = dict(scope)
        stores = self.cache.engine.stats.stores
        await self.middleware(scope, recording_receive, stripping_send)
        if self.verifier is not None and seen.outcome == b"miss":
            if self.cache.engine.stats.stores > stores:
                await self.verify(original, seen)

    async def verify(self, scope: Any, miss: Exchanged) -> None:
        """Replay ``miss`` (a stored miss) through the verifier; record how its hit differs."""
        VERIFY["stored_misses"] += 1
        assert self.verifier is not None
        hit = Exchanged()
        body = b"".join(miss.request)
        sent = False

        async def receive() -> Message:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            return {"type": "http.disconnect"}

        async def send(message: Message) -> None:
            _record(hit, message)

        self.forbidden.called = False
        await self.verifier(scope, receive, send)
        problems = []
        if self.forbidden.called:
            problems.append("the app was called for a stored miss")
        elif hit.outcome != b"hit":
            problems.append(f"the replay was a {hit.outcome.decode() or 'nothing'}, not a hit")
        if miss.response() != hit.response():
            parts = zip(("status", "headers", "body"), miss.response(), hit.response(), strict=True)
            for part, a, b in parts:
                if a != b:
                    name = _header_difference(a, b) if part == "headers" else part
                    problems.append(f"{name}: miss {_short(a)} != hit {_short(b)}")
        where = f"{scope['method']} {scope['path']}"
        if miss.others != hit.others:
            # Not part of the response a client gets over HTTP: noted, not failed.
            VERIFY["extension_notes"] += 1
            _NOTES.append(f"{where}: miss sent {miss.others}, hit sent {hit.others}")
        if problems:
            VERIFY["differences"] += 1
            for problem in problems:
                part = problem.split(":")[0]
                VERIFY_PARTS[part] = VERIFY_PARTS.get(part, 0) + 1
            DIFFERENCES.append(f"asyncache-peer verify: {where}: " + "; ".join(problems))
        else:
            VERIFY["replayed_identical"] += 1


def _record(seen: Exchanged, message: Message) -> None:
    kind = message["type"]
    if kind == "http.response.start":
        seen.status = message["status"]
        for name, value in message.get("headers", ()):
            if bytes(name).lower() == _MARK_BYTES:
                seen.outcome = bytes(value)
            else:
                seen.headers.append((bytes(name), bytes(value)))
    elif kind == "http.response.body":
        seen.body.append(bytes(message.get("body", b"")))
    else:
        seen.others.append(kind)


def _header_difference(miss: list[tuple[bytes, bytes]], hit: list[tuple[bytes, bytes]]) -> str:
    """Which kind of header difference this is, for the summary (each is a difference)."""
    if sorted(miss) == sorted(hit):
        return "headers (order only)"
    lengths = [(n, v) for n, v in hit if n.lower() == b"content-length"]
    if not any(n.lower() == b"content-length" for n, _ in miss) and sorted(
        miss + lengths
    ) == sorted(hit):
        return "headers (content-length added)"
    return "headers"


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 300 else text[:300] + "..."


def pytest_configure(config: pytest.Config) -> None:
    if MODE not in ("bare", "wrapped", "verify"):
        raise pytest.UsageError(f"ASYNCACHE_PEER_MODE must be bare, wrapped or verify: {MODE!r}")
    if MODE == "bare":
        return
    from starlette import testclient

    transport = testclient._TestClientTransport
    original = transport.__init__

    def __init__(self: Any, app: Any, *args: Any, **kwargs: Any) -> None:
        original(self, PeerCache(app), *args, **kwargs)

    transport.__init__ = __init__  # type: ignore[method-assign]


@pytest.fixture(autouse=True)
def _asyncache_peer_verify(request: pytest.FixtureRequest) -> Iterator[None]:
    DIFFERENCES.clear()
    _NOTES.clear()
    yield
    if _NOTES:
        _EXTENSION_NOTES[request.node.nodeid] = list(_NOTES)
    if DIFFERENCES:
        found = _VERIFY_FAILED[request.node.nodeid] = list(DIFFERENCES)
        DIFFERENCES.clear()
        pytest.fail("\n".join(found), pytrace=False)


_OUTCOMES: dict[str, str] = {}
_MESSAGES: dict[str, str] = {}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    nodeid = report.nodeid
    if report.when == "call" or (report.when == "setup" and not report.passed):
        _OUTCOMES[nodeid] = "xfailed" if hasattr(report, "wasxfail") else report.outcome
    if report.failed and report.when == "teardown" and nodeid not in _VERIFY_FAILED:
        _OUTCOMES[nodeid] = "error"
    if report.failed and nodeid not in _MESSAGES:
        lines = report.longreprtext.splitlines()
        errors = [line for line in lines if line.startswith("E ")]
        _MESSAGES[nodeid] = (errors or lines or [""])[0][:300]


def pytest_sessionfinish(session: pytest.Session) -> None:
    if REPORT:
        with open(REPORT, "w", encoding="utf-8") as out:
            report = {
                "mode": MODE,
                "outcomes": _OUTCOMES,
                "messages": _MESSAGES,
                "verify": VERIFY,
                "verify_parts": VERIFY_PARTS,
                "verify_failed": _VERIFY_FAILED,
                "extension_notes": _EXTENSION_NOTES,
            }
            json.dump(report, out, indent=1)
