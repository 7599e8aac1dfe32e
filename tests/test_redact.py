"""One redactor for every URL the package shows: store errors, the registry, ``repr``.

Each URL below carries a secret and is wrong in some way, so that opening it
raises; the message (and every exception chained to it) must name what is
wrong without the secret, as written or percent-decoded.
"""

from __future__ import annotations

import pytest

from asyncache import open_store
from asyncache.errors import ConfigurationError
from asyncache.redact import redact_url

pytest.importorskip("redis")

from asyncache.stores.redis import RedisStore
from asyncache.stores.sqlite import SQLiteStore

# (url, the secrets it holds): each URL fails to open.
BROKEN_URLS = [
    # A password, and a port that is not a number.
    ("redis://:hunter2pw@cache.internal:x/0", ["hunter2pw"]),
    # A token alone in the user information (Upstash, some proxies).
    ("redis://tok3nAbc@cache.internal:x/0", ["tok3nAbc"]),
    ("rediss://tok3nAbc@cache.internal:70000/0", ["tok3nAbc"]),
    # A user name with an unescaped "@" in it, and a password.
    ("redis://ops@corp.example:s3cr3tpw@cache.internal:x/0", ["ops@corp.example", "s3cr3tpw"]),
    # Percent-encoded parts: the decoded secret must not appear either.
    ("redis://user%40corp:p%40ssw0rd%21@cache.internal:x/0", ["p%40ssw0rd%21", "p@ssw0rd!"]),
    # A secret in the query string.
    ("redis://cache.internal:x/0?password=qu3rysecret", ["qu3rysecret"]),
    ("redis://:hunter2pw@cache.internal/not-a-number", ["hunter2pw"]),
    ("redis://:hunter2pw@one,two/0", ["hunter2pw"]),
    ("redis://:hunter2pw@[::1/0", ["hunter2pw"]),
    ("unix://:hunter2pw@host/tmp/redis.sock", ["hunter2pw"]),
    ("redis+cluster://:hunter2pw@node1:x,node2:7001", ["hunter2pw"]),
    ("tiered+redis://:hunter2pw@cache.internal:x/0", ["hunter2pw"]),
    # Schemes the registry does not know, and a sqlite URL given a host.
    ("postgres://admin:pgs3cret@db.internal/app", ["pgs3cret"]),
    ("admin:n0schemepw@db.internal", ["n0schemepw"]),
    ("sqlite://admin:sqlit3pw@host/cache.db", ["sqlit3pw"]),
    ("sqlite:///cache.db?token=sqlit3tok&token=again", ["sqlit3tok"]),
]


def _messages(exc: BaseException) -> str:
    """The message of ``exc`` and of every exception chained to it."""
    seen: list[str] = []
    current: BaseException | None = exc
    while current is not None and len(seen) < 10:
        seen.append(f"{type(current).__name__}: {current}")
        current = current.__cause__ or current.__context__
    return "\n".join(seen)


@pytest.mark.parametrize(("url", "secrets"), BROKEN_URLS)
def test_open_store_errors_never_show_a_secret(url: str, secrets: list[str]) -> None:
    with pytest.raises(ConfigurationError) as raised:
        open_store(url)
    shown = _messages(raised.value)
    for secret in secrets:
        assert secret not in shown
    # Still useful: the message names the URL (redacted) or the option that is wrong.
    assert "***" in shown or "option" in shown


@pytest.mark.parametrize(
    ("url", "secrets"), [(url, secrets) for url, secrets in BROKEN_URLS if "redis" in url[:6]]
)
def test_redis_store_from_url_errors_never_show_a_secret(url: str, secrets: list[str]) -> None:
    with pytest.raises(ConfigurationError) as raised:
        RedisStore.from_url(url)
    shown = _messages(raised.value)
    for secret in secrets:
        assert secret not in shown


@pytest.mark.parametrize(
    "url", ["sqlite://admin:sqlit3pw@host/cache.db", "sqlite:///c.db?token=sqlit3pw&token=x"]
)
def test_sqlite_store_from_url_errors_never_show_a_secret(url: str) -> None:
    with pytest.raises(ConfigurationError) as raised:
        SQLiteStore.from_url(url)
    assert "sqlit3pw" not in _messages(raised.value)


def test_a_redis_store_shows_no_password_in_its_repr() -> None:
    store = RedisStore.from_url("redis://:hunter2pw@127.0.0.1:1/0")
    assert "hunter2pw" not in repr(store)


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("redis://tok3nAbc@h:x/0", "redis://***@h:x/0"),
        ("redis://ops@corp:s3cr3t@h/0", "redis://***@h/0"),
        ("redis://h/0?prefix=a:&password=s3cr3t", "redis://h/0?prefix=a:&password=***"),
        ("sqlite:///cache.db", "sqlite:///cache.db"),
    ],
)
def test_redact_url_keeps_what_is_not_secret(url: str, shown: str) -> None:
    assert redact_url(url) == shown
