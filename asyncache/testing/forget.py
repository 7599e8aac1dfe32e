"""``ForgetContract``: the tests of the optional ``Forgetting`` capability (``forget``)."""

from __future__ import annotations

import time
from typing import Any

import pytest

from ..stores.protocol import DecisionStore, Entry, Forgetting
from ..tags import MARGIN, Tagging, scope_label, tag_label, tagging

__all__ = ["ForgetContract"]

HOUR = 3600.0
NAMESPACE = "contract"


def _key(n: int) -> bytes:
    return n.to_bytes(16, "big")


def _tagged(
    *tags: str, scope: Any = None, since: float | None = None, namespace: str = NAMESPACE
) -> Tagging:
    return Tagging(namespace, scope=scope, source=lambda: list(tags), since=since)


def _label(tag: str) -> bytes:
    return tag_label(NAMESPACE, tag)


class ForgetContract:
    """The ``Forgetting`` capability, as tests of a store the subclass provides.

    Use it as ``StoreContract`` (a ``store`` fixture yielding a fresh, empty
    store). A store has it when ``add``, ``add_many`` and ``replace`` index the
    keys the door tagged (``asyncache.tags.tagging``) and ``forget(labels)``
    drops them: these tests tag writes the way the decorator and the
    middleware do, and check that a forget drops what it should, keeps the
    rest, and refuses a write that began before it.
    """

    pytestmark = pytest.mark.asyncio

    async def test_is_forgetting(self, store: DecisionStore) -> None:
        """The store has ``forget`` (``Forgetting``)."""
        assert isinstance(store, Forgetting)

    async def test_forget_a_tag_drops_its_decisions_only(self, store: DecisionStore) -> None:
        """Decisions with the tag go, and are counted; those without it stay."""
        assert isinstance(store, Forgetting)
        expires_at = time.time() + HOUR
        with tagging(
            {
                _key(1): _tagged("doc:42"),
                _key(2): _tagged("doc:42", "policy:7"),
                _key(3): _tagged("doc:7"),
            }
        ):
            for n in (1, 2, 3):
                await store.add(_key(n), b"v%d" % n, expires_at)
        await store.add(_key(4), b"untagged", expires_at)
        assert await store.forget([_label("doc:42")]) == 2
        assert await store.get(_key(1)) is None
        assert await store.get(_key(2)) is None
        assert await store.get(_key(3)) == Entry(b"v3", expires_at)
        assert await store.get(_key(4)) == Entry(b"untagged", expires_at)
        assert await store.forget([_label("doc:42")]) == 0

    async def test_forget_a_scope(self, store: DecisionStore) -> None:
        """A decision's scope is a label of its own: acme's go, globex's stay."""
        assert isinstance(store, Forgetting)
        with tagging({_key(1): _tagged(scope="acme"), _key(2): _tagged(scope="globex")}):
            await store.add(_key(1), b"acme", None)
            await store.add(_key(2), b"globex", None)
        assert await store.forget([scope_label(NAMESPACE, "acme")]) == 1
        assert await store.get(_key(1)) is None
        assert await store.get(_key(2)) == Entry(b"globex", None)

    async def test_labels_are_per_namespace(self, store: DecisionStore) -> None:
        """The same tag in another namespace is another label."""
        assert isinstance(store, Forgetting)
        with tagging({_key(1): _tagged("doc:1", namespace="other")}):
            await store.add(_key(1), b"other", None)
        assert await store.forget([_label("doc:1")]) == 0
        assert await store.get(_key(1)) == Entry(b"other", None)

    async def test_a_write_that_began_before_a_forget_is_refused(
        self, store: DecisionStore
    ) -> None:
        """A computation that began before the forget stores nothing after it."""
        assert isinstance(store, Forgetting)
        began = time.time()
        await store.forget([_label("doc:42")])
        late = _tagged("doc:42", since=began)
        with tagging({_key(1): late}):
            returned = await store.add(_key(1), b"late", None)
        assert returned == Entry(b"late", None)  # its callers still get their answer
        assert _key(1) in late.refused
        assert await store.get(_key(1)) is None

    async def test_a_write_that_began_after_a_forget_stores(self, store: DecisionStore) -> None:
        """A tombstone refuses only what began before it (plus the clock margin)."""
        assert isinstance(store, Forgetting)
        await store.forget([_label("doc:42")])
        later = _tagged("doc:42", since=time.time() + MARGIN + 1)
        with tagging({_key(1): later}):
            await store.add(_key(1), b"new", None)
        assert not later.refused
        assert await store.get(_key(1)) == Entry(b"new", None)
        assert await store.forget([_label("doc:42")]) == 1

    async def test_add_many_indexes_each_item(self, store: DecisionStore) -> None:
        """``add_many`` tags each item by its own key."""
        assert isinstance(store, Forgetting)
        with tagging({_key(1): _tagged("a"), _key(2): _tagged("b")}):
            await store.add_many([(_key(1), b"1", None), (_key(2), b"2", None)])
        assert await store.forget([_label("a")]) == 1
        assert await store.get_many([_key(1), _key(2)]) == [None, Entry(b"2", None)]

    async def test_replace_indexes_the_new_decision(self, store: DecisionStore) -> None:
        """A refresh (``replace``) of a tagged decision is forgotten like an add."""
        assert isinstance(store, Forgetting)
        replace = getattr(store, "replace", None)
        if not callable(replace):
            pytest.skip(f"{type(store).__name__} has no replace")
        await store.add(_key(1), b"old", None)
        with tagging({_key(1): _tagged("doc:1")}):
            await replace(_key(1), b"old", b"new", None)
        assert await store.get(_key(1)) == Entry(b"new", None)
        assert await store.forget([_label("doc:1")]) == 1
        assert await store.get(_key(1)) is None

    async def test_a_renewed_decision_stays_forgettable(self, store: DecisionStore) -> None:
        """A decision renewed past its first expiry (``renew_on_hit``) is still dropped."""
        assert isinstance(store, Forgetting)
        with tagging({_key(1): _tagged("doc:1"), _key(2): _tagged("doc:1")}):
            await store.add(_key(1), b"renewed", time.time() + 1.0)
            await store.add(_key(2), b"other", time.time() + HOUR)  # keeps the index in use
        assert await store.renew(_key(1), time.time() + HOUR)
        await _sleep(1.5)
        with tagging({_key(3): _tagged("doc:1")}):  # a write trims expired members
            await store.add(_key(3), b"later", time.time() + HOUR)
        await store.prune()
        assert await store.forget([_label("doc:1")]) == 3
        assert await store.get(_key(1)) is None

    async def test_a_refreshed_decision_stays_forgettable(self, store: DecisionStore) -> None:
        """A refresh (``replace``, without the door's tags) keeps the decision listed."""
        assert isinstance(store, Forgetting)
        replace = getattr(store, "replace", None)
        if not callable(replace):
            pytest.skip(f"{type(store).__name__} has no replace")
        with tagging({_key(1): _tagged("doc:1")}):
            await store.add(_key(1), b"old", time.time() + 1.0)
        await replace(_key(1), b"old", b"new", time.time() + HOUR)
        await _sleep(1.5)
        await store.prune()
        assert await store.forget([_label("doc:1")]) == 1
        assert await store.get(_key(1)) is None

    async def test_dry_run_counts_and_drops_nothing(self, store: DecisionStore) -> None:
        """``dry_run`` counts the live decisions, drops none and refuses nothing after."""
        assert isinstance(store, Forgetting)
        with tagging({_key(1): _tagged("doc:1"), _key(2): _tagged("doc:1")}):
            await store.add(_key(1), b"1", None)
            await store.add(_key(2), b"2", None)
        began = time.time()
        assert await store.forget([_label("doc:1")], dry_run=True) == 2
        assert await store.get(_key(1)) == Entry(b"1", None)
        with tagging({_key(3): _tagged("doc:1", since=began)}):
            await store.add(_key(3), b"3", None)
        assert await store.get(_key(3)) == Entry(b"3", None)

    async def test_expired_decisions_are_not_counted(self, store: DecisionStore) -> None:
        """A tagged decision past its expiry is gone already: not counted."""
        assert isinstance(store, Forgetting)
        with tagging({_key(1): _tagged("doc:1"), _key(2): _tagged("doc:1")}):
            await store.add(_key(1), b"short", time.time() + 0.2)
            await store.add(_key(2), b"long", time.time() + HOUR)
        await _sleep(0.4)
        assert await store.forget([_label("doc:1")]) == 1

    async def test_the_tag_function_runs_once_when_written(self, store: DecisionStore) -> None:
        """Tags are asked for when the decision is written, once."""
        calls: list[int] = []

        def tags() -> list[str]:
            calls.append(1)
            return ["doc:1"]

        marks = Tagging(NAMESPACE, source=tags)
        with tagging({_key(1): marks}):
            assert calls == []
            await store.add(_key(1), b"1", None)
        assert len(calls) <= 1
        assert isinstance(store, Forgetting)
        assert await store.forget([_label("doc:1")]) == 1


async def _sleep(seconds: float) -> None:
    import asyncio

    await asyncio.sleep(seconds)
