"""URLs without their secrets, for messages, logs and tables: ``redact_url``.

A store URL may carry a password (``redis://:secret@host/0``) or a secret
option (``?password=...``, ``?token=...``). Whatever shows a URL to a person
(an exception message, a log line, a table title) shows ``redact_url(url)``:
the whole user information becomes ``***`` (a user name alone may be a token)
and so does the value of every query option whose name looks like a secret.

``redact_text`` cleans free text that may hold such a URL, or its secrets on
their own (an error a driver raised with the password in it), given the URLs.

The one redactor: the CLI, the stores' URL errors (``open_store``,
``RedisStore.from_url``, ``SQLiteStore.from_url``) and their messages all
go through it. Standard library only: anything may import this module.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from urllib.parse import unquote, unquote_plus

__all__ = ["REDACTED", "SECRET_WORDS", "is_secret_name", "redact_text", "redact_url", "url_secrets"]

REDACTED = "***"
"""What stands in for a secret."""

SECRET_WORDS = frozenset(
    {
        "apikey",
        "auth",
        "credential",
        "credentials",
        "key",
        "pass",
        "passwd",
        "password",
        "pwd",
        "secret",
        "sig",
        "signature",
        "token",
    }
)
"""Words of an option name (split at ``_``, ``-``, ``.``) that make its value a secret."""

# Parts of a name that make it a secret wherever they stand (``sslpassword``, ``authToken``).
_SECRET_PARTS = ("password", "passwd", "secret", "token", "apikey", "api_key", "credential")
# One host of an authority: a name or [IPv6], and an optional numeric port.
_HOST = re.compile(r"(\[[^\]/?#@]*\]|[^:@\[\]/?#,]*)(:[0-9]*)?")
# Secrets shorter than this are not replaced inside free text: doing so would garble it.
_SHORTEST_SCRUBBED = 3


def is_secret_name(name: str) -> bool:
    """Whether a query option called ``name`` holds a secret (``password``, ``ssl_password``...)."""
    lowered = unquote_plus(name).strip().lower()
    if any(part in lowered for part in _SECRET_PARTS):
        return True
    return any(word in SECRET_WORDS for word in re.split(r"[^a-z0-9]+", lowered))


def redact_url(url: str) -> str:
    """``url`` with its user information and secret query values replaced by ``***``.

    ``redis://user:secret@host:6379/0?prefix=a:&password=x`` becomes
    ``redis://***@host:6379/0?prefix=a:&password=***``. Works on malformed
    URLs too (a password with an unescaped ``/``, ``?``, ``#`` or ``@`` in
    it), erring on the side of hiding more; the rest is kept as written.
    """
    scheme, userinfo, rest = _split(url)
    head = f"{scheme}{REDACTED}@" if userinfo is not None else scheme
    location, mark, query = rest.partition("?")
    if not mark:
        location, mark, query = rest.partition("#")
    return head + location + mark + _redact_query(query)


def url_secrets(url: str) -> list[str]:
    """The secrets ``url`` holds, as written and percent-decoded, longest first.

    The user information (whole, and its password part), and the values of
    the query options ``is_secret_name`` picks; empty values are left out.
    """
    _, userinfo, rest = _split(url)
    found: set[str] = set()
    if userinfo is not None:
        found.add(userinfo)
        _, colon, password = userinfo.partition(":")
        if colon:
            found.add(password)
    query = rest.partition("?")[2] or rest.partition("#")[2]
    for part in re.split(r"[&#]", query):
        name, equals, value = part.partition("=")
        if equals and is_secret_name(name):
            found.add(value)
    decoded = {unquote(text) for text in found} | {unquote_plus(text) for text in found}
    return sorted((found | decoded) - {""}, key=lambda text: (-len(text), text))


def redact_text(text: str, urls: Iterable[str]) -> str:
    """``text`` with every one of ``urls`` redacted, and their secrets wherever they appear.

    Each URL as written becomes ``redact_url(url)``; then every secret of at
    least three characters (``url_secrets``) still in the text becomes ``***``.
    """
    given = [url for url in urls if url]
    for url in sorted(given, key=len, reverse=True):
        text = text.replace(url, redact_url(url))
    secrets = {secret for url in given for secret in url_secrets(url)}
    for secret in sorted(secrets, key=lambda s: (-len(s), s)):
        if len(secret) >= _SHORTEST_SCRUBBED:
            text = text.replace(secret, REDACTED)
    return text


def _split(url: str) -> tuple[str, str | None, str]:
    """``(scheme and "://", user information or None, the rest)`` of ``url``."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        scheme, rest = "", url
    else:
        scheme += sep
    if not rest or rest[0] in "/?#":
        return scheme, None, rest  # no authority: sqlite:///path, unix:///socket
    query_at = min((i for i in (rest.find("?"), rest.find("#")) if i >= 0), default=len(rest))
    # The last "@" before the query: a password may hold an unescaped "@" or "/".
    at = rest.rfind("@", 0, query_at)
    if at < 0 and "@" in rest:
        # An "@" only after a "?" or "#": a password with one of those in it, when
        # what precedes them is no host list (``redis://:ab?cd@host``).
        authority = re.split(r"[/?#]", rest, maxsplit=1)[0]
        if not all(_HOST.fullmatch(item.strip()) for item in authority.split(",")):
            at = rest.rfind("@")
    if at < 0:
        return scheme, None, rest
    return scheme, rest[:at], rest[at + 1 :]


def _redact_query(query: str) -> str:
    """The query (and fragment) with the values of secret options replaced."""
    query, mark, fragment = query.partition("#")
    parts = []
    for part in query.split("&"):
        name, equals, _ = part.partition("=")
        parts.append(f"{name}={REDACTED}" if equals and is_secret_name(name) else part)
    redacted = "&".join(parts)
    return redacted + mark + (_redact_query(fragment) if mark else "")
