"""Tags on decisions, and what forgetting them needs: labels, the door's context, tombstones.

A door (the decorator, the middleware) knows which tags a decision carries and
under which scope it is stored; the store, which writes it, does not: a key is
a digest. The door says so in ``DECISION_TAGS`` around the calls that may
store (``tagging``), as ``ENTRY_SCOPE`` does for memory budgets. A store with
the ``Forgetting`` capability reads it in its writes (``tagging_of(key)``) and
indexes the key under each of the decision's *labels*: one per tag and one for
its scope, each within the cache's namespace (``tag_label``, ``scope_label``).
Everything else (the engine, its flights, leases) passes the context through
untouched: a flight's task is made in its leader's context.

``forget(labels)`` drops every key indexed under any of the labels, and leaves
a *tombstone* per label: the time up to which computations are refused. A write
whose computation began (``Tagging.since``) at or before a label's tombstone
stores nothing, so nothing computed before a forget is stored after it, in any
process. The tombstone is ``MARGIN`` past the forget's end, which covers the
clock skew between hosts; it is kept ``TOMBSTONE_SECONDS``, longer than any
computation is expected to run.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar, Token
from typing import Any

import orjson

from .keys import canonical

__all__ = [
    "DECISION_TAGS",
    "MARGIN",
    "TOMBSTONE_SECONDS",
    "Tagging",
    "forget_labels",
    "parse_tag_header",
    "push_tags",
    "scope_label",
    "tag_label",
    "tag_source",
    "tagging",
    "tagging_of",
]

MARGIN = 0.5
"""Seconds past a forget's end that its tombstone still refuses (clock skew between hosts)."""

TOMBSTONE_SECONDS = 24 * 3600.0
"""How long a forgotten label's tombstone is kept: longer than any computation runs."""

FORGETTING_SECONDS = 600.0
"""How long a tombstone of a forget in progress lives if its forgetter dies midway."""


def _scope_text(scope: Any) -> str:
    """A scope as labels name it: a string as it is, anything else canonically encoded."""
    return scope if type(scope) is str else canonical(scope).decode()


def tag_label(namespace: str | None, tag: str) -> bytes:
    """The label of ``tag`` within ``namespace`` (the cache's)."""
    if type(tag) is not str or not tag:
        raise TypeError(f"a tag must be a non-empty str, got {tag!r}")
    return orjson.dumps(["t", namespace or "", tag])


def scope_label(namespace: str | None, scope: Any) -> bytes:
    """The label every decision stored under ``scope`` within ``namespace`` carries."""
    return orjson.dumps(["s", namespace or "", _scope_text(scope)])


def forget_labels(
    namespace: str | None, tags: Iterable[str] = (), scope: Any = None
) -> list[bytes]:
    """The labels ``forget(tags=..., scope=...)`` drops, in order, without repeats.

    Raises:
        TypeError: ``tags`` is a single string, or holds something other than strings.
    """
    if isinstance(tags, (str, bytes)):
        raise TypeError("tags= takes an iterable of tags (a list), not one string")
    labels = [tag_label(namespace, tag) for tag in tags]
    if scope is not None:
        labels.append(scope_label(namespace, scope))
    return list(dict.fromkeys(labels))


def parse_tag_header(value: str) -> list[str]:
    """The tags of a ``Cache-Tag`` header value: comma-separated, spaces trimmed."""
    return [tag.strip() for tag in value.split(",") if tag.strip()]


_NONE_REFUSED: set[bytes] = set()  # shared, never added to: ``refuse`` makes each its own

TagSource = Callable[[], "Iterable[str] | Awaitable[Iterable[str]]"]


class Tagging:
    """What a door says about a decision it may store: its labels, and when it began.

    ``since`` is when the call began (Unix seconds): a forget of any of the
    labels at or after it refuses the write. Tags from ``source`` (the user's
    ``tags=`` function, called only when the decision is written) and from
    ``add`` (the middleware's ``Cache-Tag``) are labelled within ``namespace``.
    A store that refuses a write notes the key in ``refused`` (a tier in front
    then keeps no copy).
    """

    __slots__ = ("_labels", "extra", "namespace", "refused", "scope", "since", "source")

    def __init__(
        self,
        namespace: str | None,
        *,
        scope: Any = None,
        source: TagSource | None = None,
        since: float | None = None,
    ) -> None:
        self.namespace = namespace
        self.scope = scope
        self.source = source
        self.since = time.time() if since is None else since
        self.extra: list[str] | None = None
        self.refused: set[bytes] = _NONE_REFUSED
        self._labels: tuple[bytes, ...] | None = None

    def add(self, tags: Iterable[str]) -> None:
        """More tags for the decision (the app's ``Cache-Tag``), before it is written."""
        if self.extra is None:
            self.extra = []
        self.extra.extend(tags)
        self._labels = None

    def refuse(self, key: bytes) -> None:
        """A store refused to write ``key``'s decision (a forget came after it began)."""
        if self.refused is _NONE_REFUSED:
            self.refused = set()
        self.refused.add(key)

    async def labels(self) -> tuple[bytes, ...]:
        """The decision's labels; the tag function runs once, when first asked.

        Raises:
            TypeError: the tag function returned something other than strings.
        """
        if self._labels is None:
            tags: list[str] = []
            if self.source is not None:
                made = self.source()
                if inspect.isawaitable(made):
                    made = await made
                if isinstance(made, (str, bytes)):
                    raise TypeError("tags= must return an iterable of tags, not one string")
                tags.extend(made)
                self.source = None
            tags.extend(self.extra or ())
            labels = [tag_label(self.namespace, tag) for tag in tags]
            if self.scope is not None:
                labels.append(scope_label(self.namespace, self.scope))
            self._labels = tuple(dict.fromkeys(labels))
        return self._labels


def tag_source(
    tags: Callable[..., Any] | None, args: Sequence[Any], kwargs: Mapping[str, Any]
) -> TagSource | None:
    """The user's ``tags=`` function, to be called with this call's arguments when needed."""
    if tags is None:
        return None
    return lambda: tags(*args, **kwargs)


DECISION_TAGS: ContextVar[Mapping[bytes, Tagging] | None] = ContextVar(
    "asyncache_decision_tags", default=None
)
"""By key, what the door says about the decisions written in this context."""


@contextmanager
def tagging(tags: Mapping[bytes, Tagging]) -> Iterator[None]:
    """Within it, decisions written under these keys carry these labels (``DECISION_TAGS``)."""
    token = push_tags(tags)
    try:
        yield
    finally:
        DECISION_TAGS.reset(token)


def push_tags(tags: Mapping[bytes, Tagging]) -> Token[Mapping[bytes, Tagging] | None]:
    """``tagging`` without the context manager (the decorator's miss path): reset the token."""
    outer = DECISION_TAGS.get()
    return DECISION_TAGS.set(tags if outer is None else {**outer, **tags})


def tagging_of(key: bytes) -> Tagging | None:
    """What the door said about the decision under ``key``, if anything (stores call it)."""
    tags = DECISION_TAGS.get()
    return None if tags is None else tags.get(key)


async def labels_of(key: bytes) -> tuple[Tagging, tuple[bytes, ...]] | None:
    """``key``'s tagging and labels, or ``None`` when the decision carries none."""
    tags = DECISION_TAGS.get()
    if tags is None:
        return None
    found = tags.get(key)
    if found is None:
        return None
    labels = await found.labels()
    return (found, labels) if labels else None


def refused(tombstones: Mapping[bytes, float], labels: Sequence[bytes], since: float) -> bool:
    """Whether a write that began at ``since`` with ``labels`` is refused by ``tombstones``."""
    return any(tombstones.get(label, -1.0) >= since for label in labels)
