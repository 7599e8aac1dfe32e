"""The expected caching effects: peer tests that pass bare and may fail behind the cache.

Each entry is a test id without its parameters (it covers every backend and
parameter), with them (only that one) or an ``fnmatch`` pattern (``*``), and
one line of why the cache is right to change what the test sees. Anything
else that passes bare and fails wrapped is an unexplained regression and fails ``scripts/peer``.
"""

# ruff: noqa: E501 (test ids are as long as they are)
from __future__ import annotations

import fnmatch

STARLETTE: dict[str, str] = {
    "tests/test_routing.py::test_lifespan_state_async_cm": (
        "GETs / twice and asserts the handler ran twice (state.items == [1, 1]); "
        "the second, identical GET is a hit"
    ),
    "tests/test_testclient.py::test_use_testclient_as_contextmanager": (
        "GETs /loop_id repeatedly and expects a fresh handler run (a new event loop id) each time"
    ),
}

# The key holds no request header but the credentials (the wrapper configures no vary=):
# an endpoint that reads another header answers every header value alike behind it.
_HEADER = (
    "the endpoint reads a request header (Header(), APIKeyHeader) that the key does not "
    "hold and the response has no Vary; identical requests but for that header share"
)
_OVERRIDES = (
    "the test changes app.dependency_overrides between identical requests to one client; "
    "the app changed, the request did not"
)
_RERUN = "counts handler or dependency runs across identical requests; the repeats are hits"
_ROUTES = "adds routes after the first identical request (a stored 404 or schema answers)"

FASTAPI: dict[str, str] = {
    "tests/test_header_cookie_alias_choices.py::*": _HEADER,
    "tests/test_header_cookie_optional_models.py::*": _HEADER,
    "tests/test_request_params/test_header/*": _HEADER,
    "tests/test_request_params/test_nullable_and_defaults.py::*Header*": _HEADER,
    "tests/test_request_params/test_field_options.py::test_fail_fast[*Header]": _HEADER,
    "tests/test_multiple_parameter_models.py::test_composed_parameter_models_allow_extras": _HEADER,
    "tests/test_multiple_parameter_models.py::test_header_conversion_is_per_model_and_does_not_mutate_cached_fields": _HEADER,
    "tests/test_security_api_key_header*.py::test_security_api_key_no_key": _HEADER,
    "tests/test_tutorial/test_testing/test_main_b.py::test_app": _HEADER + " (X-Token)",
    "tests/test_dependency_overrides.py::*": _OVERRIDES,
    "tests/test_dependency_security_overrides.py::*": _OVERRIDES,
    "tests/test_forms_multiple_models.py::test_dependency_override_adds_a_form_parameter": _OVERRIDES,
    "tests/test_route_handler_wrapping.py::test_cached_handler_uses_live_dependency_overrides_and_route_additions": _OVERRIDES,
    "tests/test_tutorial/test_testing_dependencies/test_tutorial001.py::test_normal_app": _OVERRIDES,
    "tests/test_dependency_cache.py::*": _RERUN + " (dependency counters)",
    "tests/test_forms_optional_models.py::test_defaults_factories_and_validators": _RERUN
    + " (default_factory calls)",
    "tests/test_query_optional_models.py::test_defaults_factories_and_validators": _RERUN
    + " (default_factory calls)",
    "tests/test_telemetry/test_tracer.py::test_cached_tracer_follows_provider_changes": _RERUN
    + " (spans per request)",
    "tests/test_telemetry/test_tracer.py::test_tracer_lookup_preserves_warning_deduplication": _RERUN
    + " (warnings per request)",
    "tests/test_router_include_context.py::*": _ROUTES,
    "tests/test_frontend.py::test_low_priority_cache_updates_after_route_added_to_included_router": _ROUTES,
    "tests/test_tutorial/test_sql_databases/test_tutorial00*.py::test_crud_app": (
        "GETs /heroes/ before and after POSTs and DELETEs change the database; the second GET is a hit"
    ),
}

EXPECTED: dict[str, dict[str, str]] = {"starlette": STARLETTE, "fastapi": FASTAPI}


def explanation(expected: dict[str, str], nodeid: str) -> str | None:
    """Why ``nodeid`` may fail behind the cache, or ``None`` when it may not."""
    found = expected.get(nodeid)
    if found is None:
        found = expected.get(nodeid.partition("[")[0])
    if found is None:
        base = nodeid.partition("[")[0]
        for entry, why in expected.items():
            pattern = entry.replace("[", "[[]")  # brackets in test ids are literal
            if "*" in entry and any(fnmatch.fnmatchcase(n, pattern) for n in (nodeid, base)):
                return why
    return found
