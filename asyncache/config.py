"""Configuration from the environment: ``DecisionCache.from_env()``.

A deployment changes the store, the ttl or switches the cache off without
touching code. Every variable is optional; see the configuration page for the
table of names and defaults.
"""

from __future__ import annotations

import difflib
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .errors import ConfigurationError

__all__ = ["ENVIRONMENT", "OTHER_VARIABLES", "Setting", "near_misses", "settings_from_env"]

logger = logging.getLogger("asyncache")


@dataclass(frozen=True)
class Setting:
    """One environment variable: its name, the option it sets and its default."""

    variable: str
    option: str
    kind: str
    default: str
    meaning: str


ENVIRONMENT: tuple[Setting, ...] = (
    Setting("STORE_URL", "store", "url", "memory://", "where decisions live (open_store URL)"),
    Setting("ENABLED", "enabled", "bool", "true", "false computes every call, touches no store"),
    Setting("TTL", "ttl", "seconds", "none", "seconds a decision lives; none: no expiry"),
    Setting("RENEW_ON_HIT", "renew_on_hit", "bool", "false", "hits push the expiry out"),
    Setting("NAMESPACE", "namespace", "str", "", "prefix for every key's namespace"),
    Setting("FINGERPRINT", "fingerprint", "str", "", "pins the model fingerprint"),
    Setting("SECRET", "secret", "str", "", "HMAC key; unsigned entries are misses"),
    Setting("MAX_ENTRY_BYTES", "max_entry_bytes", "int", "1048576", "largest stored decision"),
    Setting("STORE_TIMEOUT", "store_timeout", "seconds", "1.0", "a slower store call is a miss"),
    Setting(
        "STORE_WAIT",
        "store_wait",
        "seconds",
        "0",
        "with leases: how long a miss waits for an unreachable store; 0 computes at once",
    ),
    Setting("COALESCE", "coalesce", "bool", "true", "identical misses share one computation"),
    Setting("COALESCE_TIMEOUT", "coalesce_timeout", "seconds", "300", "longest wait on a flight"),
    Setting(
        "STALE_WHILE_REVALIDATE",
        "stale_while_revalidate",
        "seconds",
        "0",
        "after the ttl: served at once while one refresh runs",
    ),
    Setting(
        "STALE_IF_ERROR",
        "stale_if_error",
        "seconds",
        "0",
        "after that: served when a computation fails",
    ),
    Setting("JITTER", "jitter", "float", "0", "fraction: ttls drawn from [ttl*(1-j), ttl]"),
    Setting(
        "CACHE_ERRORS",
        "cache_errors",
        "errors",
        "",
        "exception types remembered (comma-separated, module.Name)",
    ),
    Setting("ERROR_TTL", "error_ttl", "seconds", "5.0", "seconds a cached error is raised"),
    Setting(
        "MODE",
        "mode",
        "mode",
        "live",
        "live, shadow, record (compute, replace) or replay (store only)",
    ),
)
_MODES = ("live", "shadow", "record", "replay")

OTHER_VARIABLES = frozenset({"MODEL_DIR", "DEMO_LOG"})
"""Other ``ASYNCACHE_*`` variables of the project (the demo's): not settings, not misspelled."""

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


def _parse(setting: Setting, name: str, raw: str) -> Any:
    text = raw.strip()
    if setting.kind in ("str", "url"):
        return text or None
    if setting.kind == "mode":
        if text.lower() not in _MODES:
            raise ConfigurationError(f"{name}={raw!r}: expected one of {', '.join(_MODES)}")
        return text.lower()
    if setting.kind == "bool":
        if text.lower() in _TRUE:
            return True
        if text.lower() in _FALSE:
            return False
        raise ConfigurationError(f"{name}={raw!r}: expected true or false")
    if setting.kind == "errors":
        names = [part.strip() for part in text.split(",")]
        return tuple(_exception_type(name, dotted) for dotted in names if dotted)
    if setting.kind == "seconds" and text.lower() in ("none", ""):
        return None
    try:
        number = int(text) if setting.kind == "int" else float(text)
    except ValueError:
        raise ConfigurationError(f"{name}={raw!r}: expected a number") from None
    if setting.kind == "int" and number <= 0:
        raise ConfigurationError(f"{name}={raw!r}: expected a positive number")
    return number


def _exception_type(variable: str, dotted: str) -> type[BaseException]:
    """The exception type ``dotted`` names (``module.Name``; a builtin by its bare name)."""
    import builtins
    import importlib

    module_name, _, name = dotted.rpartition(".")
    try:
        found = getattr(importlib.import_module(module_name) if module_name else builtins, name)
    except (ImportError, AttributeError):
        raise ConfigurationError(f"{variable}: no exception type {dotted!r}") from None
    if not (isinstance(found, type) and issubclass(found, Exception)):
        raise ConfigurationError(f"{variable}: {dotted!r} is not an Exception subclass")
    return found


def settings_from_env(
    environ: Mapping[str, str] | None = None, *, prefix: str = "ASYNCACHE_"
) -> dict[str, Any]:
    """Read the ``ASYNCACHE_*`` variables into ``DecisionCache`` options.

    Unset variables take their defaults. The store URL is returned under
    ``store`` as a string; the caller opens it.

    Raises:
        ConfigurationError: a variable's value cannot be parsed.
    """
    env = os.environ if environ is None else environ
    for name, meant in near_misses(env, prefix=prefix):
        logger.warning(
            "asyncache: %s is not a setting and is ignored; did you mean %s?", name, meant
        )
    options: dict[str, Any] = {}
    for setting in ENVIRONMENT:
        name = prefix + setting.variable
        raw = env.get(name)
        options[setting.option] = _parse(setting, name, setting.default if raw is None else raw)
    return options


def near_misses(environ: Mapping[str, str], *, prefix: str = "ASYNCACHE_") -> list[tuple[str, str]]:
    """``(variable, the setting it is close to)`` for each ``prefix*`` variable that is
    not a setting but nearly spells one (``ASYNCACHE_STORE``: ``ASYNCACHE_STORE_URL``)."""
    known = [prefix + setting.variable for setting in ENVIRONMENT]
    others = {prefix + name for name in OTHER_VARIABLES}
    found = []
    for name in sorted(environ):
        if not name.startswith(prefix) or name in known or name in others:
            continue
        close = difflib.get_close_matches(name, known, n=1, cutoff=0.8)
        if close:
            found.append((name, close[0]))
    return found
