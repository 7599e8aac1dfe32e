"""The peer-suite machinery itself: the wrapper is really in front, verify catches differences.

``scripts/peer`` is only worth something if its plugin puts the middleware in
front of every TestClient app (else "wrapped" would be a second bare run),
hides its own status header, and if verify mode fails on a hit that differs
from its miss. The runner's verdict (expected effect, unexplained, verify) is
what CI acts on.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from . import asyncache_peer as peer
from . import runner
from .expected import explanation

HERE = Path(__file__).resolve().parent

PEER_TEST = """
from starlette.testclient import TestClient

calls = []
# Content-Length last: a hit writes its own there.
HEADERS = [(b"x-n", b"1"), (b"content-length", b"1")]


async def app(scope, receive, send):
    assert scope["type"] == "http"
    calls.append(scope["path"])
    await send({"type": "http.response.start", "status": 200, "headers": HEADERS})
    await send({"type": "http.response.body", "body": str(len(calls)).encode()})


def test_identical_requests_run_the_app_once():
    client = TestClient(app)
    first = client.get("/a")
    second = client.get("/a")
    assert (first.text, second.text) == ("1", "1")
    assert "x-asyncache-peer" not in second.headers
    assert second.headers["x-n"] == "1"
    assert client.get("/b").text == "2"
"""


def run_peer_test(tmp_path: Path, mode: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "test_peer_sample.py").write_text(PEER_TEST, encoding="utf-8")
    env = dict(os.environ)
    env["ASYNCACHE_PEER_MODE"] = mode
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE), env.get("PYTHONPATH")]))
    env.pop("ASYNCACHE_PEER_REPORT", None)
    command = [sys.executable, "-m", "pytest", *runner.PYTEST_OPTIONS]
    return subprocess.run(
        [*command, "test_peer_sample.py"], cwd=tmp_path, env=env, capture_output=True, text=True
    )


@pytest.mark.parametrize("mode", ["wrapped", "verify"])
def test_the_plugin_puts_the_cache_in_front_of_every_test_client(tmp_path: Path, mode: str) -> None:
    done = run_peer_test(tmp_path, mode)
    assert done.returncode == 0, done.stdout + done.stderr


def test_bare_runs_the_app_for_every_request(tmp_path: Path) -> None:
    done = run_peer_test(tmp_path, "bare")
    assert done.returncode == 1
    assert "('1', '2') == ('1', '1')" in done.stdout


TEXT_HEADERS = [(b"x-k", b"v"), (b"content-length", b"3")]


async def text_app(scope: Any, receive: Any, send: Any) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": TEXT_HEADERS})
    await send({"type": "http.response.body", "body": b"abc"})


def http_scope() -> dict[str, Any]:
    return {
        "type": "http",
        "method": "GET",
        "path": "/p",
        "raw_path": b"/p",
        "query_string": b"",
        "headers": [(b"host", b"testserver")],
        "scheme": "http",
        "server": ("testserver", 80),
        "http_version": "1.1",
    }


async def test_verify_passes_a_hit_identical_to_its_miss() -> None:
    wrapper = peer.PeerCache(text_app, verify=True)
    identical, stored = peer.VERIFY["replayed_identical"], peer.VERIFY["stored_misses"]
    await wrapper(http_scope(), miss_receive, discard)  # a stored miss, then its replay
    assert peer.VERIFY["stored_misses"] == stored + 1
    assert peer.VERIFY["replayed_identical"] == identical + 1
    assert not wrapper.forbidden.called
    assert peer.DIFFERENCES == []


async def test_verify_reports_a_hit_that_differs_from_its_miss() -> None:
    wrapper = peer.PeerCache(text_app, verify=False)
    await wrapper(http_scope(), miss_receive, discard)  # now stored
    wrapper.verifier = peer._middleware(wrapper.forbidden, wrapper.cache)
    miss = peer.Exchanged()
    miss.status, miss.headers, miss.body = 200, TEXT_HEADERS, [b"abd"]
    peer.DIFFERENCES.clear()
    try:
        await wrapper.verify(http_scope(), miss)
        assert len(peer.DIFFERENCES) == 1
        assert "body: miss b'abd' != hit b'abc'" in peer.DIFFERENCES[0]
        assert not wrapper.forbidden.called
        await wrapper.cache.store.clear()
        await wrapper.verify(http_scope(), miss)
        assert "the app was called for a stored miss" in peer.DIFFERENCES[1]
    finally:
        peer.DIFFERENCES.clear()


async def miss_receive() -> dict[str, Any]:
    return {"type": "http.request", "body": b"", "more_body": False}


async def discard(message: Any) -> None:
    pass


def report(mode: str, outcomes: dict[str, str], verify_failed: dict[str, list[str]]) -> Any:
    return {
        "mode": mode,
        "outcomes": outcomes,
        "messages": {},
        "verify": {
            "stored_misses": 3,
            "replayed_identical": 3 - len(verify_failed),
            "differences": len(verify_failed),
            "extension_notes": 0,
        },
        "verify_parts": {"body": len(verify_failed)} if verify_failed else {},
        "verify_failed": verify_failed,
        "extension_notes": {},
    }


def test_the_runner_fails_only_on_unexplained_regressions_and_differing_hits(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(runner.EXPECTED, "starlette", {"t.py::cached": "runs the handler twice"})
    bare = report("bare", {"t.py::ok[asyncio]": "passed", "t.py::cached[trio]": "passed"}, {})
    wrapped = report("verify", {"t.py::ok[asyncio]": "passed", "t.py::cached[trio]": "failed"}, {})
    assert runner.compare("starlette", bare, wrapped) == 0
    bare["outcomes"]["t.py::new[trio]"] = "passed"
    wrapped["outcomes"]["t.py::new[trio]"] = "failed"
    assert runner.compare("starlette", bare, wrapped) == 1
    wrapped["verify_failed"]["t.py::ok[asyncio]"] = ["asyncache-peer verify: GET /: body: ..."]
    assert runner.compare("starlette", bare, wrapped) == 2
    out = capsys.readouterr().out
    assert "UNEXPLAINED t.py::new[trio]" in out
    assert "expected  t.py::cached[trio]: runs the handler twice" in out
    assert "trio         2 /     0 /   1 /   1" in out


def test_expected_entries_match_ids_bases_and_patterns_with_literal_brackets() -> None:
    expected = {
        "t.py::exact[trio]": "one",
        "t.py::base": "every parameter",
        "u.py::fail_fast[*Header]": "a pattern",
        "v/test_*.py::crud": "a pattern on the base",
    }
    assert explanation(expected, "t.py::exact[trio]") == "one"
    assert explanation(expected, "t.py::exact[asyncio]") is None
    assert explanation(expected, "t.py::base[asyncio-x]") == "every parameter"
    assert explanation(expected, "u.py::fail_fast[True-1-Header]") == "a pattern"
    assert explanation(expected, "u.py::fail_fast[True-1-Query]") is None
    assert explanation(expected, "v/test_a.py::crud[tutorial001]") == "a pattern on the base"
    assert explanation(expected, "v/test_a.py::crudx") is None
