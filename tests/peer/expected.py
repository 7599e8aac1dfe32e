"""The expected caching effects: peer tests that pass bare and may fail behind the cache.

Each entry is a test id without its parameters (it covers every backend and
parameter) or with them (only that one), and one line of why the cache is
right to change what the test sees. Anything else that passes bare and fails
wrapped is an unexplained regression and fails ``scripts/peer``.
"""

from __future__ import annotations

STARLETTE: dict[str, str] = {
    "tests/test_routing.py::test_lifespan_state_async_cm": (
        "GETs / twice and asserts the handler ran twice (state.items == [1, 1]); "
        "the second, identical GET is a hit"
    ),
    "tests/test_testclient.py::test_use_testclient_as_contextmanager": (
        "GETs /loop_id repeatedly and expects a fresh handler run (a new event loop id) each time"
    ),
}

FASTAPI: dict[str, str] = {}

EXPECTED: dict[str, dict[str, str]] = {"starlette": STARLETTE, "fastapi": FASTAPI}


def explanation(expected: dict[str, str], nodeid: str) -> str | None:
    """Why ``nodeid`` may fail behind the cache, or ``None`` when it may not."""
    found = expected.get(nodeid)
    if found is None:
        found = expected.get(nodeid.partition("[")[0])
    return found
