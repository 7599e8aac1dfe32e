"""Redis URLs and options for ``RedisStore.from_url``: parse, validate, build the client."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple, TypeAlias
from urllib.parse import parse_qsl, unquote, urlsplit

from redis.asyncio import Redis
from redis.asyncio.cluster import ClusterNode, RedisCluster
from redis.asyncio.connection import (
    Connection,
    ConnectionPool,
    SSLConnection,
    UnixDomainSocketConnection,
)
from redis.asyncio.retry import Retry
from redis.backoff import EqualJitterBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisClusterException, RedisError

from ...errors import ConfigurationError
from ...redact import redact_text, redact_url
from .driver import TOPOLOGY_REFRESH, Cluster, cluster_options

__all__ = [
    "DEFAULT_BACKOFF_BASE",
    "DEFAULT_BACKOFF_CAP",
    "DEFAULT_CONNECT_TIMEOUT",
    "DEFAULT_MAX_CONNECTIONS",
    "DEFAULT_PREFIX",
    "DEFAULT_RETRIES",
    "DEFAULT_SOCKET_TIMEOUT",
    "OPTIONS",
    "SCHEMES",
    "TOPOLOGY_REFRESH",
    "Client",
    "Cluster",
    "Connected",
    "connect",
    "parse_options",
]

Client: TypeAlias = "Redis | RedisCluster"

DEFAULT_PREFIX = "asyncache:"
DEFAULT_SOCKET_TIMEOUT = 2.0
DEFAULT_CONNECT_TIMEOUT = 1.0
DEFAULT_MAX_CONNECTIONS = 64
DEFAULT_RETRIES = 2
DEFAULT_BACKOFF_BASE = 0.01
DEFAULT_BACKOFF_CAP = 0.25
SCHEMES = ("redis", "rediss", "unix", "redis+cluster", "rediss+cluster")


class Connected(NamedTuple):
    """What a URL opens: the client and the store's own settings."""

    client: Client
    prefix: str
    max_connections: int
    pool_timeout: float


def _positive_float(value: object) -> float:
    number = float(value)  # type: ignore[arg-type]
    if not number > 0 or math.isinf(number):
        raise ValueError("must be a positive number")
    return number


def _non_negative_float(value: object) -> float:
    number = float(value)  # type: ignore[arg-type]
    if not number >= 0 or math.isinf(number):
        raise ValueError("must be zero or a positive number")
    return number


def _integer(value: object) -> int:
    if isinstance(value, bool | float):
        raise ValueError("must be an integer")
    return int(value)  # type: ignore[call-overload, no-any-return]


def _positive_int(value: object) -> int:
    number = _integer(value)
    if number <= 0:
        raise ValueError("must be a positive integer")
    return number


def _non_negative_int(value: object) -> int:
    number = _integer(value)
    if number < 0:
        raise ValueError("must be zero or a positive integer")
    return number


def _boolean(value: object) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off"):
        return False
    raise ValueError("must be true or false")


def _cert_reqs(value: object) -> str:
    text = str(value).lower()
    if text not in ("none", "optional", "required"):
        raise ValueError("must be none, optional or required")
    return text


def _prefix(value: object) -> str:
    text = value.decode() if isinstance(value, bytes) else str(value)
    if not text:
        raise ValueError("must not be empty: clear() would drop every key in the database")
    return text


OPTIONS: Mapping[str, Callable[[object], object]] = {
    "prefix": _prefix,
    "socket_timeout": _positive_float,
    "socket_connect_timeout": _positive_float,
    "max_connections": _positive_int,
    "pool_timeout": _positive_float,
    "retries": _non_negative_int,
    "backoff_base": _positive_float,
    "backoff_cap": _positive_float,
    "health_check_interval": _non_negative_float,
    "client_name": str,
    "db": _non_negative_int,
    "ssl_cert_reqs": _cert_reqs,
    "ssl_ca_certs": str,
    "ssl_certfile": str,
    "ssl_keyfile": str,
    "ssl_check_hostname": _boolean,
}


def parse_options(url: str, query: str, overrides: Mapping[str, object]) -> dict[str, Any]:
    """The URL's query options with ``overrides`` on top, each validated."""
    given: dict[str, object] = {}
    for name, text in parse_qsl(query, keep_blank_values=True):
        if name in given:
            raise ConfigurationError(f"option {name!r} is given twice in {redact_url(url)!r}")
        given[name] = text
    given.update(overrides)
    unknown = sorted(set(given) - set(OPTIONS))
    if unknown:
        raise ConfigurationError(
            f"unknown RedisStore option(s) {unknown}; known: {sorted(OPTIONS)}"
        )
    parsed: dict[str, Any] = {}
    for name, value in given.items():
        try:
            parsed[name] = OPTIONS[name](value)
        except (TypeError, ValueError, UnicodeDecodeError) as exc:
            raise ConfigurationError(f"RedisStore option {name}={value!r}: {exc}") from None
    return parsed


def connect(url: str, overrides: Mapping[str, object | None]) -> Connected:
    """Build the client ``url`` names, with timeouts, a bounded pool and retries.

    Args:
        url: the Redis URL; its query holds options.
        overrides: options that win over the URL's; ``None`` values are left out.

    Raises:
        ConfigurationError: the URL or an option is invalid.
    """
    given = {name: value for name, value in overrides.items() if value is not None}
    try:
        return _build(url, given)
    except ConfigurationError:
        raise
    except (RedisError, RedisClusterException, ValueError, TypeError) as exc:
        # The driver's words may quote the URL or a part of it (a host list, a password).
        raise ConfigurationError(
            f"cannot open {redact_url(url)!r}: {redact_text(str(exc), [url])}"
        ) from None


def _build(url: str, overrides: Mapping[str, object]) -> Connected:
    scheme, sep, _ = url.partition("://")
    scheme = scheme.lower()
    if not sep or scheme not in SCHEMES:
        raise ConfigurationError(
            f"not a Redis URL: {redact_url(url)!r}; use redis://, rediss://, unix://, "
            "redis+cluster://host:port,... or rediss+cluster://"
        )
    # urlsplit would reject a cluster's comma-separated hosts: split by hand.
    rest = url[len(scheme) + 3 :].partition("#")[0]
    location, _, query = rest.partition("?")
    netloc, slash, path = location.partition("/")
    options = parse_options(url, query, overrides)
    tls = scheme.startswith("rediss")
    ssl_options = {name: options.pop(name) for name in list(options) if name.startswith("ssl_")}
    if ssl_options and not tls:
        raise ConfigurationError(f"{sorted(ssl_options)} need rediss:// or rediss+cluster://")
    socket_timeout = options.pop("socket_timeout", DEFAULT_SOCKET_TIMEOUT)
    backoff = EqualJitterBackoff(
        cap=options.pop("backoff_cap", DEFAULT_BACKOFF_CAP),
        base=options.pop("backoff_base", DEFAULT_BACKOFF_BASE),
    )
    # Exponential backoff (base * 2**n, capped) with jitter, so that a fleet does
    # not reconnect in step. Connection errors only: a timed-out command retried
    # would double the wait, and a slow server stays slow.
    retry = Retry(
        backoff, options.pop("retries", DEFAULT_RETRIES), supported_errors=(RedisConnectionError,)
    )
    username, password, hostinfo = _userinfo(netloc)
    common: dict[str, Any] = {
        "socket_timeout": socket_timeout,
        "socket_connect_timeout": options.pop("socket_connect_timeout", DEFAULT_CONNECT_TIMEOUT),
        "retry": retry,
        "health_check_interval": options.pop("health_check_interval", 0),
        "client_name": options.pop("client_name", None),
        "username": username,
        "password": password,
        "decode_responses": False,
    }
    prefix: str = options.pop("prefix", DEFAULT_PREFIX)
    max_connections: int = options.pop("max_connections", DEFAULT_MAX_CONNECTIONS)
    pool_timeout: float = options.pop("pool_timeout", socket_timeout)
    db: int | None = options.pop("db", None)
    if db is None and path.strip("/") and scheme != "unix":
        try:
            db = _non_negative_int(unquote(path.strip("/")))
        except ValueError:
            raise ConfigurationError(
                f"the path of {redact_url(url)!r} must be a database number"
            ) from None
    # The store admits max_connections commands at a time; one more connection
    # is for the lease listener's subscription (and on one server, one more for lone
    # gets: loops.Bound.get).
    pool_size = max_connections + 1

    if scheme.endswith("+cluster"):
        if db:
            raise ConfigurationError("Redis Cluster has only database 0")
        nodes = [ClusterNode(host, port) for host, port in _hosts(hostinfo, url)]
        tls_options: dict[str, Any] = {"ssl": True, **ssl_options} if tls else {}
        cluster = Cluster(
            startup_nodes=nodes,
            max_connections=pool_size,
            **cluster_options(),
            **common,
            **tls_options,
        )
        return Connected(cluster, prefix, max_connections, pool_timeout)

    pool_kwargs: dict[str, Any] = {**common, "db": db or 0}
    if scheme == "unix":
        socket_path = unquote("/" + path if slash else path)
        if hostinfo or not socket_path.strip("/"):
            raise ConfigurationError(
                f"a unix URL is unix:///path/to/socket, not {redact_url(url)!r}"
            )
        pool_kwargs.update(connection_class=UnixDomainSocketConnection, path=socket_path)
    else:
        hosts = _hosts(hostinfo or "localhost", url)
        if len(hosts) != 1:
            raise ConfigurationError(
                f"{redact_url(url)!r} names several hosts; use redis+cluster:// for a cluster"
            )
        host, port = hosts[0]
        connection_class = SSLConnection if tls else Connection
        pool_kwargs.update(connection_class=connection_class, host=host, port=port, **ssl_options)
    # A plain pool, bounded: the store's own gate makes callers wait for a free
    # connection, which costs nothing while one is free (BlockingConnectionPool
    # takes an asyncio.Condition on every command, ~10 us of a ~50 us hit).
    pool = ConnectionPool(max_connections=pool_size + 1, **pool_kwargs)
    return Connected(Redis.from_pool(pool), prefix, max_connections, pool_timeout)


def _userinfo(netloc: str) -> tuple[str | None, str | None, str]:
    userinfo, at, hostinfo = netloc.rpartition("@")
    if not at:
        return None, None, netloc
    user, colon, password = userinfo.partition(":")
    return (unquote(user) or None), (unquote(password) if colon else None), hostinfo


def _hosts(hostinfo: str, url: str) -> list[tuple[str, int]]:
    hosts: list[tuple[str, int]] = []
    for item in hostinfo.split(","):
        # urlsplit parses and checks one host:port (or [v6]:port).
        parts = urlsplit(f"//{item.strip()}")
        try:
            port = parts.port or 6379
        except ValueError:
            raise ConfigurationError(f"bad port in {redact_url(url)!r}") from None
        if not parts.hostname:
            raise ConfigurationError(f"a host is missing in {redact_url(url)!r}")
        hosts.append((parts.hostname, port))
    return hosts
