"""A misspelled ``ASYNCACHE_*`` variable is noticed: a warning names the setting it nearly is."""

from __future__ import annotations

import logging

import pytest

from asyncache import DecisionCache
from asyncache.config import near_misses, settings_from_env


def test_the_old_store_variable_names_the_right_one(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="asyncache"):
        options = settings_from_env({"ASYNCACHE_STORE": "sqlite:///decisions.db"})
    assert options["store"] == "memory://"  # still ignored: but no longer silently
    assert [r.getMessage() for r in caplog.records] == [
        "asyncache: ASYNCACHE_STORE is not a setting and is ignored; "
        "did you mean ASYNCACHE_STORE_URL?"
    ]


@pytest.mark.parametrize(
    ("variable", "meant"),
    [
        ("ASYNCACHE_TTLS", "ASYNCACHE_TTL"),
        ("ASYNCACHE_ENABLE", "ASYNCACHE_ENABLED"),
        ("ASYNCACHE_SECERT", "ASYNCACHE_SECRET"),
        ("ASYNCACHE_COALESCE_TIMEOUTS", "ASYNCACHE_COALESCE_TIMEOUT"),
    ],
)
def test_near_misses(variable: str, meant: str) -> None:
    assert near_misses({variable: "1", "ASYNCACHE_TTL": "5"}) == [(variable, meant)]


def test_settings_and_the_projects_other_variables_are_not_misses() -> None:
    environ = {
        "ASYNCACHE_STORE_URL": "memory://",
        "ASYNCACHE_TTL": "60",
        "ASYNCACHE_MODEL_DIR": "/models",
        "ASYNCACHE_DEMO_LOG": "info",
        "ASYNCACHE_SOMETHING_ELSE": "x",  # not close to any setting
        "PATH": "/bin",
    }
    assert near_misses(environ) == []


def test_from_env_warns_too(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="asyncache"):
        cache = DecisionCache.from_env({"ASYNCACHE_TTl": "60"}, prefix="ASYNCACHE_")
    assert cache.ttl is None
    assert "did you mean ASYNCACHE_TTL?" in caplog.text
