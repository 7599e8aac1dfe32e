"""Cached errors keep their fidelity, or are not cached at all.

With ``cache_errors=(ValueError, OSError, KeyError)``, what a later caller gets
from the store is the exception that was raised: its own type (a subclass of a
listed type included), its ``args`` and its attributes. An error that cannot
come back so is not stored: the model runs again, and nothing is counted
``corrupt``. A cache that does not list a type computes past another cache's
cached error of that type and leaves it in place. Real stores: memory, and a
SQLite file shared by two caches.
"""

from __future__ import annotations

import errno
import json
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import orjson
import pytest

from asyncache import DecisionCache, MemoryStore, cached_prediction
from asyncache.codec import PLAIN_HEADER
from asyncache.stores import DecisionStore

from ..stores.test_contract import store_of

LISTED = (ValueError, OSError, KeyError)


@pytest.fixture(params=["memory", "sqlite"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[DecisionStore]:
    async with store_of(request.param, request, tmp_path) as made:
        yield made


class Pair(ValueError):
    """A listed type whose constructor takes two arguments and keeps them as attributes."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{field}: {reason}")
        self.field = field
        self.reason = reason


class Both(KeyError):
    """A two-argument constructor that hands both to the base."""

    def __init__(self, left: str, right: int) -> None:
        super().__init__(left, right)


class Unprintable(ValueError):
    """An exception whose ``__str__`` raises."""

    def __str__(self) -> str:
        raise RuntimeError("no str for you")


class Opaque(ValueError):
    """An exception holding what the store cannot keep exactly (an object)."""

    def __init__(self) -> None:
        super().__init__(object())


def _json_error() -> Exception:
    try:
        json.loads('{"a": ')
    except json.JSONDecodeError as exc:
        return exc
    raise AssertionError("unreachable")


def _unicode_error() -> Exception:
    try:
        b"ok \xff".decode("utf-8")
    except UnicodeDecodeError as exc:
        return exc
    raise AssertionError("unreachable")


def _missing_file(tmp_path: Path) -> Exception:
    try:
        (tmp_path / "absent.txt").open()
    except FileNotFoundError as exc:
        return exc
    raise AssertionError("unreachable")


def _noted() -> Exception:
    error = KeyError("label")
    error.add_note("while reading the label")
    return error


# What the model raises, and what a caller must see of it on every later call.
CASES: dict[str, Callable[[Path], Exception]] = {
    "json": lambda _: _json_error(),
    "unicode": lambda _: _unicode_error(),
    "file-not-found": _missing_file,
    "oserror-errno": lambda _: OSError(errno.ENOSPC, "No space left on device"),
    "keyerror": lambda _: KeyError("label"),
    "keyerror-noted": lambda _: _noted(),
    "two-argument-constructor": lambda _: Pair("label", "missing"),
    "two-arguments-to-base": lambda _: Both("left", 2),
    "unprintable": lambda _: Unprintable("quiet"),
}


def _same(seen: BaseException, raised: BaseException) -> None:
    """``seen`` is ``raised`` as far as a caller can tell (type, args, attributes)."""
    assert type(seen) is type(raised)
    assert seen.args == raised.args
    assert vars(seen) == vars(raised)
    for name in ("errno", "strerror", "filename", "filename2"):
        if isinstance(raised, OSError):
            assert getattr(seen, name) == getattr(raised, name)
    for name in ("msg", "doc", "pos", "lineno", "colno"):
        if isinstance(raised, json.JSONDecodeError):
            assert getattr(seen, name) == getattr(raised, name)
    for name in ("encoding", "object", "start", "end", "reason"):
        if isinstance(raised, UnicodeDecodeError):
            assert getattr(seen, name) == getattr(raised, name)


def _predict(cache: DecisionCache, error: Exception, runs: list[int]) -> Callable[..., Any]:
    @cached_prediction(cache, namespace="errors")
    async def predict(x: int) -> str:
        runs.append(x)
        raise error

    return predict


@pytest.mark.parametrize("case", sorted(CASES))
async def test_a_cached_error_comes_back_as_raised(
    store: DecisionStore, tmp_path: Path, case: str
) -> None:
    raised = CASES[case](tmp_path)
    cache = DecisionCache(store, cache_errors=LISTED, error_ttl=60, store_timeout=30)
    runs: list[int] = []
    predict = _predict(cache, raised, runs)
    with pytest.raises(type(raised)):
        await predict(1)
    for _ in range(3):
        with pytest.raises(type(raised)) as seen:
            await predict(1)
        _same(seen.value, raised)
    assert len(runs) == 1
    stats = cache.stats()
    assert stats["error_hits"] == 3 and stats["corrupt"] == 0
    await cache.aclose()


async def test_an_error_that_cannot_come_back_as_raised_is_not_cached(
    store: DecisionStore,
) -> None:
    cache = DecisionCache(store, cache_errors=LISTED, error_ttl=60, store_timeout=30)
    runs: list[int] = []
    predict = _predict(cache, Opaque(), runs)
    for _ in range(3):
        with pytest.raises(Opaque):
            await predict(1)
    assert len(runs) == 3  # never stored, so never refused either
    stats = cache.stats()
    assert stats["error_hits"] == 0 and stats["corrupt"] == 0
    assert await store.count() == 0
    await cache.aclose()


async def test_another_cache_never_deletes_a_cached_error_it_does_not_list(
    store: DecisionStore,
) -> None:
    lists = DecisionCache(store, cache_errors=LISTED, error_ttl=60, store_timeout=30)
    lists_not = DecisionCache(store, cache_errors=(KeyError,), error_ttl=60, store_timeout=30)
    runs: list[int] = []
    error = ValueError("bad input")
    first, second = _predict(lists, error, runs), _predict(lists_not, error, runs)
    with pytest.raises(ValueError):
        await first(1)
    for _ in range(2):
        with pytest.raises(ValueError):
            await second(1)  # not its to raise: it computes...
    assert len(runs) == 3
    with pytest.raises(ValueError, match="bad input") as seen:
        await first(1)  # ...and the first cache's cached error is still there
    _same(seen.value, error)
    assert len(runs) == 3
    assert lists.stats()["error_hits"] == 1
    assert lists.stats()["corrupt"] == 0 and lists_not.stats()["corrupt"] == 0
    await lists_not.aclose()
    await lists.aclose()


async def test_an_error_cached_by_an_older_version_reads_as_its_message() -> None:
    # Older versions wrote "x" as [type, message]: the listed type, called with it.
    store = MemoryStore()
    cache = DecisionCache(store, cache_errors=LISTED, store_timeout=30)
    runs: list[int] = []
    predict = _predict(cache, ValueError("new"), runs)
    body = {"v": None, "t": 60, "c": time.time(), "d": 0.0, "x": ["builtins.ValueError", "old"]}
    key: bytes = predict.key(1)  # type: ignore[attr-defined]
    await store.add(key, bytes((PLAIN_HEADER,)) + orjson.dumps(body), time.time() + 60)
    with pytest.raises(ValueError) as seen:
        await predict(1)
    assert seen.value.args == ("old",) and not runs
    await cache.aclose()
