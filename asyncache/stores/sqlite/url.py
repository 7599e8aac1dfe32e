"""``sqlite:///`` URLs for ``SQLiteStore.from_url``: the path and the constructor's options."""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

from ...errors import ConfigurationError
from ...redact import redact_url

__all__ = ["OPTIONS", "parse_option", "parse_url"]

OPTIONS = ("busy_timeout", "max_bytes", "max_entries", "prune_interval", "synchronous")
"""The query options a URL may carry: the constructor's keyword arguments."""


def parse_url(url: str) -> tuple[str, dict[str, Any]]:
    """The path and the options of ``sqlite:///relative`` or ``sqlite:////absolute``.

    Raises:
        ConfigurationError: the URL is not a sqlite URL or an option is invalid.
    """
    parts = urlsplit(url)
    if parts.scheme.lower() != "sqlite":
        raise ConfigurationError(f"not a sqlite URL: {redact_url(url)!r}")
    if parts.netloc:
        raise ConfigurationError(
            f"sqlite URLs take no host ({redact_url(url)!r}); "
            "use sqlite:///relative/path or sqlite:////absolute/path"
        )
    path = unquote(parts.path)[1:]
    if not path:
        raise ConfigurationError(f"sqlite URL without a path: {redact_url(url)!r}")
    options: dict[str, Any] = {}
    for name, value in parse_qsl(parts.query, keep_blank_values=True):
        if name in options:
            raise ConfigurationError(f"sqlite option {name!r} given twice in {redact_url(url)!r}")
        options[name] = parse_option(name, value)
    return path, options


def parse_option(name: str, value: str) -> Any:
    """Parse one ``sqlite://`` query option into the constructor's type.

    Raises:
        ConfigurationError: the option is unknown or its value is not a number.
    """
    try:
        if name == "synchronous":
            return value
        if name in ("busy_timeout", "prune_interval"):
            if name == "prune_interval" and value.lower() in ("", "none", "off", "0"):
                return None
            return float(value)
        if name in ("max_entries", "max_bytes"):
            return None if value.lower() in ("", "none") else int(value)
    except ValueError:
        raise ConfigurationError(f"sqlite option {name}={value!r} is not a number") from None
    raise ConfigurationError(f"unknown sqlite option {name!r}; known: {', '.join(OPTIONS)}")
