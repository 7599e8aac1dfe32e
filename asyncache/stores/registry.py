"""Store URLs: ``open_store(url)`` and ``register_store(scheme, factory)``.

The registry sits above the stores it names: it holds each scheme's factory as
a ``"module:attribute"`` path and imports the module on first use, so the
protocol never imports an implementation and ``import asyncache`` loads no
database driver. A third-party store plugs in with ``register_store``.
"""

from __future__ import annotations

from collections.abc import Callable

from ..errors import ConfigurationError
from ..redact import redact_url
from .protocol import DecisionStore

__all__ = ["open_store", "register_store"]

StoreFactory = Callable[[str], DecisionStore]

# scheme -> factory, or "module:attribute" of one, imported on first use.
_FACTORIES: dict[str, StoreFactory | str] = {
    "memory": "asyncache.stores.memory:MemoryStore.from_url",
    "sqlite": "asyncache.stores.sqlite:SQLiteStore.from_url",
    "redis": "asyncache.stores.redis:RedisStore.from_url",
    "rediss": "asyncache.stores.redis:RedisStore.from_url",
    "redis+cluster": "asyncache.stores.redis:RedisStore.from_url",
    "rediss+cluster": "asyncache.stores.redis:RedisStore.from_url",
    "unix": "asyncache.stores.redis:RedisStore.from_url",
}


def register_store(scheme: str, factory: StoreFactory | str) -> None:
    """Let ``open_store`` open ``scheme://...`` URLs with ``factory(url)``.

    Args:
        scheme: the URL scheme, matched without regard to case (``"mystore"``).
        factory: called with the whole URL; returns the store. A string
            ``"package.module:attribute"`` is imported on first use.

    Raises:
        ValueError: the scheme is empty, holds ``://``, or starts with ``tiered+``
            (a tier works over any registered scheme already).
    """
    scheme = scheme.lower()
    if not scheme or "://" in scheme or scheme.startswith("tiered+"):
        raise ValueError(f"not a store scheme: {scheme!r}")
    _FACTORIES[scheme] = factory


def _factory(scheme: str, url: str) -> StoreFactory:
    found = _FACTORIES.get(scheme)
    if found is None:
        known = ", ".join(f"{name}://" for name in sorted(_FACTORIES))
        raise ConfigurationError(
            f"unknown store scheme {scheme!r} in {redact_url(url)!r}; "
            f"use {known} or tiered+<one of those>"
        )
    if isinstance(found, str):
        import importlib

        module_name, _, path = found.partition(":")
        target: object = importlib.import_module(module_name)
        for part in path.split("."):
            target = getattr(target, part)
        found = target  # type: ignore[assignment]
        assert callable(found)
    return found


def open_store(url: str) -> DecisionStore:
    """Open a store from a URL.

    Accepts ``memory://``, ``sqlite:///path``, ``redis://``, ``rediss://``,
    ``redis+cluster://``, the schemes given to ``register_store``, and
    ``tiered+<any of those>``; query parameters are the store's options
    (``memory://?max_entries=1000``).

    Raises:
        ConfigurationError: the URL's scheme or options are not understood.
        ImportError: the store needs an extra that is not installed.
    """
    scheme, sep, _rest = url.partition("://")
    if not sep:
        raise ConfigurationError(
            f"not a store URL: {redact_url(url)!r} (expected e.g. memory:// or sqlite:///path)"
        )
    scheme = scheme.lower()
    if scheme.startswith("tiered+"):
        from .memory import MemoryStore, memory_options
        from .tiered import TieredStore

        l2_url, l1 = _split_l1_options(url[len("tiered+") :])
        # Absent means TieredStore's default (60 s), not "no cap"; l1_ttl= (empty) is no cap.
        ttl_option = l1.pop("ttl", None)
        l1_ttl = 60.0 if ttl_option is None else _float_option(ttl_option, "l1_ttl")
        return TieredStore(MemoryStore(**memory_options(l1)), open_store(l2_url), l1_ttl=l1_ttl)
    return _factory(scheme, url)(url)


def _split_l1_options(url: str) -> tuple[str, dict[str, str]]:
    """Take the ``l1_*`` query options off a tiered URL; the rest stays with L2 as written.

    The query is split on ``&`` and only the ``l1_*`` items are decoded and
    removed: the others reach L2 byte for byte, so that ``prefix=a%2Bb:``
    means to a tier's L2 what it means to the same store opened alone.
    """
    from urllib.parse import unquote_plus  # here: it costs `import asyncache` 2 ms

    base, question, rest = url.partition("?")
    if not question:
        return url, {}
    query, hash_mark, fragment = rest.partition("#")
    l1: dict[str, str] = {}
    kept: list[str] = []
    for item in query.split("&"):
        if not item:
            continue
        raw_name, _, raw_value = item.partition("=")
        name = unquote_plus(raw_name)
        if name.startswith("l1_"):
            l1[name[3:]] = unquote_plus(raw_value)
        else:
            kept.append(item)
    query = "&".join(kept)
    tail = hash_mark + fragment
    return (f"{base}?{query}{tail}" if query else f"{base}{tail}"), l1


def _float_option(value: str | None, name: str) -> float | None:
    if value is None or value == "":
        return None
    try:
        return float(value)
    except ValueError:
        raise ConfigurationError(f"store option {name}={value!r} is not a number") from None
