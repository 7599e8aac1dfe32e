"""A bug is not a miss: a store call that raises a sign of a bug or a version mismatch
(``TypeError``, ``AttributeError``, ``NameError``, ``ImportError``, raised by the store or
wrapped by it in a ``StoreError``) reaches the caller through every door, its cause
chained and logged once with its traceback; a fault of the store's service stays a miss.

The broken stores are stand-ins: a real version mismatch (SQLiteStore on anyio 4.0's
``run_sync``, RedisStore on an older redis-py) raises the same way, and the floors job
(scripts/test-floors) runs the real ones.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from asyncache import DecisionCache, MemoryStore, StoreError, cached_prediction
from asyncache.engine._guard import bug_in
from asyncache.middleware import DecisionCacheMiddleware
from asyncache.offload import ThreadOffload
from asyncache.stores.tiered import TieredStore

MISMATCH = "run_sync() got an unexpected keyword argument 'abandon_on_cancel'"


def type_error() -> Exception:
    return TypeError(MISMATCH)


def wrapped_type_error() -> Exception:
    # How a store wraps what its driver raised (RedisStore's gate: "redis: TypeError: ...").
    try:
        raise TypeError("get_connection() missing 1 required positional argument")
    except TypeError as exc:
        try:
            raise StoreError(f"redis: TypeError: {exc}") from exc
        except StoreError as wrapped:
            return wrapped


BUGS: dict[str, Callable[[], Exception]] = {
    "TypeError": type_error,
    "StoreError from TypeError": wrapped_type_error,
    "AttributeError": lambda: AttributeError("'Redis' object has no attribute 'x'"),
    "NameError": lambda: NameError("name 'aiosqlite' is not defined"),
    "ImportError": lambda: ModuleNotFoundError("No module named 'hiredis'"),
    "group of a TypeError": lambda: ExceptionGroup("calls", [TimeoutError(), type_error()]),
}
FAULTS: dict[str, Callable[[], Exception]] = {
    "TimeoutError": TimeoutError,
    "ConnectionError": lambda: ConnectionRefusedError(111, "Connection refused"),
    "StoreError": lambda: StoreError("sqlite: database is locked"),
    "StoreError from OSError": lambda: _wrapped(OSError("Connection reset by peer")),
    "MemoryError": lambda: StoreError("redis: OutOfMemoryError: OOM command not allowed"),
}


def _wrapped(cause: Exception) -> Exception:
    error = StoreError(f"redis: {cause!r}")
    error.__cause__ = cause
    return error


class BrokenStore:
    """A MemoryStore whose calls named in ``broken`` raise ``error()``."""

    def __init__(self, broken: set[str], error: Callable[[], Exception]) -> None:
        self.inner = MemoryStore()
        self.broken = broken
        self.error = error
        self.raised = 0

    def __getattr__(self, name: str) -> Any:
        if name in self.broken:

            async def broken(*args: object, **kwargs: object) -> Any:
                self.raised += 1
                raise self.error()

            return broken
        return getattr(self.inner, name)


def raises_the_bug(excinfo: pytest.ExceptionInfo[BaseException]) -> None:
    """The error the caller got is the store's, or wraps it: never a stand-in."""
    assert bug_in(excinfo.value) is not None


@pytest.mark.parametrize("error", BUGS.values(), ids=BUGS.keys())
@pytest.mark.parametrize("broken", ["get", "add"])
async def test_a_bug_raises_from_get_or_compute(
    broken: str, error: Callable[[], Exception]
) -> None:
    store = BrokenStore({broken}, error)
    cache = DecisionCache(store)  # type: ignore[arg-type]
    for _ in range(3):  # every call: no cool-down turns it into a miss either
        with pytest.raises(BaseException) as excinfo:
            await cache.get_or_compute(bytes(16), _compute("ok"))
        raises_the_bug(excinfo)
    assert store.raised == 3
    assert cache.stats()["errors"] == 3


@pytest.mark.parametrize("error", FAULTS.values(), ids=FAULTS.keys())
@pytest.mark.parametrize("broken", ["get", "add"])
async def test_a_fault_stays_a_miss(broken: str, error: Callable[[], Exception]) -> None:
    cache = DecisionCache(BrokenStore({broken}, error))  # type: ignore[arg-type]
    assert await cache.get_or_compute(bytes(16), _compute("ok")) == "ok"
    assert cache.stats()["errors"] == 1


async def test_a_bug_is_logged_once_with_its_traceback(caplog: pytest.LogCaptureFixture) -> None:
    cache = DecisionCache(BrokenStore({"get"}, type_error))  # type: ignore[arg-type]
    with caplog.at_level(logging.WARNING, logger="asyncache"):
        for _ in range(3):
            with pytest.raises(TypeError, match="abandon_on_cancel") as excinfo:
                await cache.get_or_compute(bytes(16), _compute("ok"))
    errors = [record for record in caplog.records if record.levelno >= logging.ERROR]
    assert len(errors) == 1, caplog.text
    assert errors[0].exc_info is not None and errors[0].exc_info[0] is TypeError
    assert "not treated as a miss" in errors[0].getMessage()
    assert "treated as a miss" not in caplog.text.replace("not treated as a miss", "")
    assert any("never a miss" in note for note in excinfo.value.__notes__)


async def test_a_wrapped_bug_keeps_its_cause() -> None:
    cache = DecisionCache(BrokenStore({"get"}, wrapped_type_error))  # type: ignore[arg-type]
    with pytest.raises(StoreError) as excinfo:
        await cache.get_or_compute(bytes(16), _compute("ok"))
    assert isinstance(excinfo.value.__cause__, TypeError)


@pytest.mark.parametrize("broken", ["get", "add"])
async def test_a_bug_raises_from_a_decorated_call(broken: str) -> None:
    cache = DecisionCache(BrokenStore({broken}, type_error))  # type: ignore[arg-type]

    @cached_prediction(cache)
    async def classify(text: str) -> str:
        return text.upper()

    with pytest.raises(TypeError, match="abandon_on_cancel"):
        await classify("refund")


@pytest.mark.parametrize("broken", ["get_many", "add_many"])
async def test_a_bug_raises_from_many(broken: str) -> None:
    cache = DecisionCache(BrokenStore({broken}, type_error))  # type: ignore[arg-type]

    async def compute(indices: list[int]) -> list[str]:
        return ["ok" for _ in indices]

    with pytest.raises(TypeError, match="abandon_on_cancel"):
        await cache.get_or_compute_many([bytes(16), b"\x01" * 16], compute)


@pytest.mark.parametrize("broken", ["get_many", "add_many"])
async def test_a_bug_raises_from_a_micro_batch(broken: str) -> None:
    cache = DecisionCache(BrokenStore({broken, "get", "add"}, type_error))  # type: ignore[arg-type]
    offload = ThreadOffload(1)
    try:
        predict = cached_prediction(cache, batch=True, max_wait_ms=1, offload=offload)(
            lambda items: [item.upper() for item in items]
        )
        with pytest.raises(TypeError, match="abandon_on_cancel"):
            await predict("a")
        with pytest.raises(TypeError, match="abandon_on_cancel"):
            await predict.many(["a", "b"])
    finally:
        await offload.aclose()


async def test_a_bug_raises_from_a_stream() -> None:
    cache = DecisionCache(BrokenStore({"get"}, type_error))  # type: ignore[arg-type]

    @cached_prediction(cache)
    async def tokens(prompt: str) -> AsyncIterator[str]:
        for word in prompt.split():
            yield word

    with pytest.raises(TypeError, match="abandon_on_cancel"):
        async for _ in tokens("where is my refund"):
            pass


async def test_a_streams_failed_add_is_logged_with_its_traceback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # The caller has every chunk before the add: what it was answered stands, and
    # the bug is in the log with its traceback (not a warning about a miss).
    cache = DecisionCache(BrokenStore({"add"}, type_error))  # type: ignore[arg-type]

    @cached_prediction(cache)
    async def tokens(prompt: str) -> AsyncIterator[str]:
        for word in prompt.split():
            yield word

    with caplog.at_level(logging.WARNING, logger="asyncache"):
        try:
            assert [word async for word in tokens("where is my refund")] == prompt_words()
        except TypeError as exc:
            assert "abandon_on_cancel" in str(exc)
    _logged_as_a_bug(caplog)


def prompt_words() -> list[str]:
    return "where is my refund".split()


def _logged_as_a_bug(caplog: pytest.LogCaptureFixture) -> None:
    errors = [record for record in caplog.records if record.levelno >= logging.ERROR]
    assert len(errors) == 1, caplog.text
    assert errors[0].exc_info is not None and errors[0].exc_info[0] is TypeError


async def test_a_bug_raises_from_lookup() -> None:
    cache = DecisionCache(BrokenStore({"get"}, type_error))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="abandon_on_cancel"):
        await cache.lookup(bytes(16))


@pytest.mark.parametrize("broken", ["get", "add"])
async def test_a_bug_raises_through_a_tiered_store(broken: str) -> None:
    l2 = BrokenStore({broken}, wrapped_type_error)
    cache = DecisionCache(TieredStore(MemoryStore(), l2))  # type: ignore[arg-type]
    with pytest.raises(StoreError) as excinfo:
        await cache.get_or_compute(bytes(16), _compute("ok"))
    assert isinstance(excinfo.value.__cause__, TypeError)


async def test_a_bug_raises_from_the_middleware(caplog: pytest.LogCaptureFixture) -> None:
    client, calls = _service(BrokenStore({"get"}, type_error))
    async with client:
        with pytest.raises(TypeError, match="abandon_on_cancel"):
            await client.post("/predict", json={"text": "where is my refund?"})
    assert calls == []  # the app never ran on a read that was a bug


async def test_the_middlewares_failed_add_is_logged_with_its_traceback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # The response went out as the app sent it (the middleware never holds it back):
    # the add that follows cannot change it, and its bug is in the log.
    client, calls = _service(BrokenStore({"add"}, type_error))
    with caplog.at_level(logging.WARNING, logger="asyncache"):
        async with client:
            try:
                response = await client.post("/predict", json={"text": "where is my refund?"})
                assert response.json() == {"label": "refund"}
            except TypeError as exc:
                assert "abandon_on_cancel" in str(exc)
    assert calls == [1]
    _logged_as_a_bug(caplog)


def _service(store: BrokenStore) -> tuple[httpx.AsyncClient, list[int]]:
    cache = DecisionCache(store)  # type: ignore[arg-type]
    calls: list[int] = []

    async def predict(request: Request) -> JSONResponse:
        calls.append(1)
        return JSONResponse({"label": "refund"})

    app = Starlette(routes=[Route("/predict", predict, methods=["POST"])])
    app.add_middleware(DecisionCacheMiddleware, cache=cache, routes=["/predict"])
    transport = httpx.ASGITransport(app=app)  # raises what the app raised
    return httpx.AsyncClient(transport=transport, base_url="http://svc"), calls


def _compute(value: str) -> Callable[[], Any]:
    async def compute() -> str:
        return value

    return compute


@pytest.mark.parametrize("error", [AttributeError, TypeError])
async def test_a_driver_mismatch_in_a_redis_store_raises(
    redis_url: str, redis_prefix: str, monkeypatch: pytest.MonkeyPatch, error: type[Exception]
) -> None:
    """redis-py raising from a signature the store was not written for (redis-py 5.0.1's
    ``get_connection()`` without ``command_name``) raises, through the store's batches;
    a connection torn down under a command (``'NoneType' object...``, tests/stores/
    test_redis.py) stays a miss."""
    from redis.asyncio.connection import AbstractConnection

    from asyncache.stores.redis import RedisStore

    store = RedisStore.from_url(redis_url, prefix=redis_prefix)
    cache = DecisionCache(store, store_timeout=5.0)
    computed: list[str] = []
    predict = cached_prediction(cache)(_upper(computed))

    try:
        assert await predict("a") == "A"

        def mismatch(self: object, command: object) -> None:
            raise error("get_connection() missing 1 required positional argument: 'command_name'")

        monkeypatch.setattr(AbstractConnection, "_send_packed_command", mismatch)
        for text in ("a", "b"):
            with pytest.raises(StoreError, match="command_name") as excinfo:
                await predict(text)
            assert isinstance(excinfo.value.__cause__, error)
        assert computed == ["a"]  # the model never ran on a read that was a bug
        monkeypatch.undo()
    finally:
        await store.clear()
        await cache.aclose()


class BrokenLeaseStore(BrokenStore):
    """A BrokenStore with the lease methods spelled out: from Python 3.12 a runtime
    protocol check looks methods up statically, never through ``__getattr__``."""

    async def acquire_lease(self, key: bytes, token: bytes, ttl: float) -> bool:
        return bool(await self.__getattr__("acquire_lease")(key, token, ttl))

    async def release_lease(self, key: bytes, token: bytes) -> None:
        await self.__getattr__("release_lease")(key, token)

    async def wait_for_entry(self, key: bytes, timeout: float) -> Any:  # noqa: ASYNC109
        return await self.__getattr__("wait_for_entry")(key, timeout)


async def test_a_bug_raises_from_a_lease_step() -> None:
    # A lease store (the fleet's one computation per key) whose lease calls are broken.
    store = BrokenLeaseStore({"acquire_lease", "release_lease", "wait_for_entry"}, type_error)
    cache = DecisionCache(store, leases=True)  # type: ignore[arg-type]
    runs = 0

    async def compute() -> str:
        nonlocal runs
        runs += 1
        return "ok"

    with pytest.raises(TypeError, match="abandon_on_cancel"):
        await cache.get_or_compute(bytes(16), compute)
    assert runs == 0


def _upper(computed: list[str]) -> Callable[[str], Any]:
    async def upper(text: str) -> str:
        computed.append(text)
        return text.upper()

    return upper
