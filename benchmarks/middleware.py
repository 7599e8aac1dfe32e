"""DecisionCacheMiddleware: a hit beside the bare routes and a fastapi-cache2 hit.

Run: ``.venv/bin/python benchmarks/middleware.py`` (``--quick`` for a short run,
``--no-server`` to skip the loopback part).

Part 1, in process: raw ASGI calls (no server, no client), POST with a
140-character JSON body, an instant model. Rounds of every case are
interleaved so that drift on a shared machine hits them all alike; the table
shows the best round (other work on the machine only ever adds time).

Part 2, real server: uvicorn (httptools and uvloop when installed) in a child
process on a free loopback port, driven by ``wrk`` (or, without it, an asyncio
client in another process, which is then the bottleneck). Every request of the
cached app is a hit: one warm-up request stores the answer first.

Part 2 also serves a constant response (a raw ASGI app that reads the request
and answers, byte for byte, what a hit answers: the fastest any in-process
cache could answer), over uvicorn and over granian (when installed), and
compares the cached app's hit throughput with it on the same server. Every
server is up for the whole part and the rounds drive them in turn.

Part 3, side by side (``side_by_side``): runs in turn compare moments as much
as apps on a shared machine, so the ratio to the constant response is measured
with the constant response, a second one (the control), one dict lookup by the
request (``lookup_app``: what keying alone costs) and the hit sharing one CPU
under load at the same time. The control's ratio shows how exact that is.

Targets: in-process hit <= 0.6x the bare Starlette route and <= 0.15x a
fastapi-cache2 hit; real-server hit throughput >= 1.3x the bare app, and
>= 0.9x the constant response's on the same server, side by side.
"""

import argparse
import asyncio
import contextlib
import http.client
import importlib.util
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

# Importing _common also puts the checkout's root on sys.path, for asyncache.
from _common import machine as describe_machine

# Where a server imports asyncache from, when not this checkout (--before): ahead of
# the checkout _common put first (here, at import: a granian worker imports this module).
_TREE = "ASYNCACHE_BENCH_TREE"
if os.environ.get(_TREE):
    sys.path.insert(0, os.environ[_TREE])

ASGIApp = Callable[[dict[str, Any], Any, Any], Awaitable[None]]

TEXT = "the service was quick and the staff were friendly, would book again"
BODY = (
    b'{"text": "the service was quick and the staff were friendly, would book again",'
    b' "model": "sentiment-small", "top_k": 3, "lang": "en"}'
)
BODY = BODY + b" " * (140 - len(BODY))  # a 140-character body, as the issue asks
assert len(BODY) == 140, len(BODY)
ANSWER = {"label": "positive", "score": 0.98, "model": "sentiment-small"}
# A larger answer (about 1 KiB of JSON): its entry is big enough to be zlib-compressed.
LARGE_ANSWER = {**ANSWER, "scores": [round(i / 97, 6) for i in range(110)]}


def model(text: str) -> dict[str, Any]:
    """The instant model: every variant calls it, so only the framework costs differ."""
    return ANSWER


def large_model(text: str) -> dict[str, Any]:
    return LARGE_ANSWER


# -- the apps ---------------------------------------------------------------


def starlette_app(large: bool = False) -> Any:
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    answer = large_model if large else model

    async def predict(request: Request) -> JSONResponse:
        data = await request.json()
        return JSONResponse(answer(data["text"]))

    return Starlette(routes=[Route("/predict", predict, methods=["POST"])])


def fastapi_app() -> Any:
    from fastapi import FastAPI
    from pydantic import BaseModel

    class Query(BaseModel):
        text: str
        model: str
        top_k: int = 1
        lang: str = "en"

    app = FastAPI()

    @app.post("/predict")
    async def predict(query: Query) -> dict[str, Any]:
        return model(query.text)

    return app


def fastapi_cache2_app() -> Any:
    from fastapi import FastAPI
    from fastapi_cache import FastAPICache
    from fastapi_cache.backends.inmemory import InMemoryBackend
    from fastapi_cache.decorator import cache

    app = FastAPI()

    @app.get("/predict")
    @cache(expire=600)
    async def predict(text: str, model_name: str = "sentiment-small") -> dict[str, Any]:
        return model(text)

    FastAPICache.init(InMemoryBackend(), prefix="bench")
    return app


def cached(app: Any, *, defaults: bool = False, **options: Any) -> Any:
    from asyncache import DecisionCache
    from asyncache.middleware import DecisionCacheMiddleware

    # Without Server-Timing: its value differs on every response, and the side-by-side
    # part checks that the hit sends the constant response's very bytes. ``defaults``:
    # the middleware as it comes (Server-Timing on), for what that costs.
    if not defaults:
        options.setdefault("server_timing", False)
    return DecisionCacheMiddleware(app, cache=DecisionCache(), routes=["/predict"], **options)


CONSTANT_BODY = json.dumps(ANSWER, separators=(",", ":")).encode()
# What a hit's start message holds, in its order: the limits send these very headers.
CONSTANT_HEADERS = [
    (b"content-length", str(len(CONSTANT_BODY)).encode()),
    (b"content-type", b"application/json"),
    (b"x-cache", b"hit"),
]


# What a hit with the default settings adds: a Server-Timing header (of a typical length).
TIMING_HEADER = (b"server-timing", b"cache;desc=hit;dur=0.012")


def constant_app(headers: list[tuple[bytes, bytes]] = CONSTANT_HEADERS) -> ASGIApp:
    """The limit: a raw ASGI app that reads the request and answers one constant response.

    No routing, no parsing, no cache: the fastest any in-process cache could
    answer over the same server. It still reads the body, as a cache must,
    and it sends the very bytes a hit sends (its headers, in its order, with
    ``X-Cache: hit``), so that the server and the client do the same work
    for both and the ratio measures only the finding of the answer.
    """
    start = {
        "type": "http.response.start",
        "status": 200,
        "headers": headers,
    }
    body = {"type": "http.response.body", "body": CONSTANT_BODY}

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        while (await receive()).get("more_body"):
            pass
        await send(start)
        await send(body)

    return app


def lookup_app() -> ASGIApp:
    """The least a cache keyed by the request does: one dict lookup, then the answer.

    It reads the body and looks the answer up by the request's headers, path
    and body, which a server hands over as fresh objects every time, so they
    are hashed every time, as a cache must; it sends fresh messages, as a
    cache must (what is in front may change them), with the constant
    response's bytes. No method or route check, no store, no expiry, no
    counter: the hit's distance from this row is what those cost, and this
    row's distance from the constant response is what keying alone costs.
    """
    answers: dict[tuple[Any, ...], bytes] = {}  # one request in this benchmark: one entry

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        chunks = []
        while True:
            message = await receive()
            chunks.append(message.get("body", b""))
            if not message.get("more_body"):
                break
        body = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        request = (tuple(scope["headers"]), scope["path"], body)
        answer = answers.get(request)
        if answer is None:
            answer = answers[request] = CONSTANT_BODY
        await send({"type": "http.response.start", "status": 200, "headers": [*CONSTANT_HEADERS]})
        await send({"type": "http.response.body", "body": answer, "more_body": False})

    return app


def granian_target() -> Any:
    """What a granian worker serves (``factory=True``): the app ``--serve`` named."""
    return serve_app(os.environ["ASYNCACHE_BENCH_APP"])


def serve_app(kind: str) -> Any:
    if kind == "constant":
        return constant_app()
    if kind == "constant+timing":
        return constant_app([*CONSTANT_HEADERS, TIMING_HEADER])
    if kind == "lookup":
        return lookup_app()
    if kind == "starlette":
        return starlette_app()
    if kind == "fastapi":
        return fastapi_app()
    if kind == "starlette+asyncache":
        return cached(starlette_app())
    if kind == "starlette+asyncache+defaults":
        return cached(starlette_app(), defaults=True)
    if kind == "fastapi+asyncache":
        return cached(fastapi_app())
    if kind == "starlette+asyncache+defaults+bound":
        return engine_bound(cached(starlette_app(), defaults=True))
    raise SystemExit(f"unknown app {kind!r}")


def engine_bound(app: Any) -> Any:
    """A cached app whose engine's hit step, once it has hit, is one dict lookup.

    No store read, no expiry, no memo check, no count: a cache nobody could
    ship (it never sees a replaced or dropped entry), measured only as the
    bound of the middleware's hit, what it would cost with an engine that
    cost nothing. The middleware's own steps (route, head, body, key,
    headers, Server-Timing, counting the outcome) are all still taken.
    """
    from asyncache.engine import MISS

    engine = app.cache.engine
    step = engine.hit_now
    answers: dict[bytes, Any] = {}

    def first_hit(key: bytes, made: Any = None) -> Any:
        value = step(key, made)
        if value is not MISS:
            answers[key] = value
            # (key, made): the key is there from now on, so made is never what is returned.
            engine.hit_now = answers.get
        return value

    engine.hit_now = first_hit
    return app


# -- part 1: in process ----------------------------------------------------


def scope_for(method: str, query: bytes = b"") -> dict[str, Any]:
    headers = [(b"host", b"bench"), (b"user-agent", b"bench/1"), (b"accept", b"*/*")]
    if method == "POST":
        headers += [(b"content-type", b"application/json"), (b"content-length", b"140")]
    return {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.4"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": "/predict",
        "raw_path": b"/predict",
        "query_string": query,
        "root_path": "",
        "headers": headers,
        "server": ("127.0.0.1", 8000),
        "client": ("127.0.0.1", 50000),
        "state": {},
    }


class Exchange:
    """One request's receive and send, as a server provides them (kept minimal)."""

    __slots__ = ("body", "headers", "sent", "status")

    def __init__(self, body: bytes) -> None:
        self.body: bytes | None = body
        self.sent: list[bytes] = []
        self.status = 0
        self.headers: list[tuple[bytes, bytes]] = []

    async def receive(self) -> dict[str, Any]:
        if self.body is not None:
            body, self.body = self.body, None
            return {"type": "http.request", "body": body, "more_body": False}
        await asyncio.sleep(3600)  # a real server answers http.disconnect when the client goes
        return {"type": "http.disconnect"}

    async def send(self, message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            self.status = message["status"]
            self.headers = list(message.get("headers", ()))
        elif message["type"] == "http.response.body":
            self.sent.append(message.get("body", b""))


async def call(app: ASGIApp, scope: dict[str, Any], body: bytes) -> Exchange:
    exchange = Exchange(body)
    await app(dict(scope), exchange.receive, exchange.send)
    return exchange


async def timed(app: ASGIApp, scope: dict[str, Any], body: bytes, count: int) -> float:
    """Microseconds per call over ``count`` sequential calls."""
    started = time.perf_counter()
    for _ in range(count):
        exchange = Exchange(body)
        await app(dict(scope), exchange.receive, exchange.send)
    return (time.perf_counter() - started) / count * 1e6


async def in_process(rounds: int, count: int) -> dict[str, float]:
    post = scope_for("POST")
    get = scope_for("GET", b"text=" + TEXT.replace(" ", "+").encode() + b"&model_name=small")
    cases: dict[str, tuple[ASGIApp, dict[str, Any], bytes]] = {
        "bare Starlette route (POST)": (starlette_app(), post, BODY),
        "bare FastAPI route (POST, pydantic)": (fastapi_app(), post, BODY),
        "fastapi-cache2 hit (GET)": (fastapi_cache2_app(), get, b""),
        "asyncache hit over Starlette (POST)": (cached(starlette_app()), post, BODY),
        "asyncache hit over FastAPI (POST)": (cached(fastapi_app()), post, BODY),
        "bare Starlette route, 1 KiB answer": (starlette_app(large=True), post, BODY),
        "asyncache hit over Starlette, 1 KiB answer": (cached(starlette_app(True)), post, BODY),
    }
    for name, (app, scope, body) in cases.items():
        # Warm up, and make sure each case answers 200 (and the cached ones hit).
        for _ in range(3):
            exchange = await call(app, scope, body)
        assert exchange.status == 200, (name, exchange.status, exchange.sent)
        if "asyncache" in name:
            assert (b"x-cache", b"hit") in exchange.headers, (name, exchange.headers)
        if "fastapi-cache2" in name:
            assert (b"x-fastapi-cache", b"HIT") in exchange.headers, (name, exchange.headers)
        await timed(app, scope, body, count // 4)
    samples: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(rounds):
        for name, (app, scope, body) in cases.items():
            samples[name].append(await timed(app, scope, body, count))
    # The best round: on a shared machine, other work only ever adds time.
    return {name: min(values) for name, values in samples.items()}


# -- part 2: a real server ---------------------------------------------------


def server_stack() -> tuple[str, str]:
    http = "httptools" if importlib.util.find_spec("httptools") else "h11"
    loop = "uvloop" if importlib.util.find_spec("uvloop") else "asyncio"
    return http, loop


def request_bytes() -> bytes:
    head = (
        "POST /predict HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(BODY)}\r\n\r\n"
    )
    return head.encode() + BODY


def answer(port: int) -> tuple[int, list[tuple[str, str]], bytes]:
    """The status, headers (without ``date``) and body a server answers the benchmark's request."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        connection.request("POST", "/predict", BODY, {"Content-Type": "application/json"})
        response = connection.getresponse()
        body = response.read()
        headers = [(name.lower(), value) for name, value in response.getheaders()]
        return response.status, [item for item in headers if item[0] != "date"], body
    finally:
        connection.close()


def probe(port: int) -> tuple[int, str | None]:
    status, headers, _ = answer(port)
    return status, dict(headers).get("x-cache")


def pinned(cpus: set[int] | None) -> Callable[[], None] | None:
    """A ``preexec_fn`` that keeps a child, and every process it starts, on ``cpus``."""
    if cpus is None:
        return None
    return lambda: os.sched_setaffinity(0, cpus)


@contextlib.contextmanager
def server(
    kind: str, software: str = "uvicorn", cpus: set[int] | None = None, tree: Path | None = None
) -> Iterator[int]:
    """A server of ``kind`` on a free port; ``tree``: with asyncache from that checkout."""
    from tests.support import free_port

    port = free_port()
    env = dict(os.environ)
    if tree is not None:
        env[_TREE] = str(tree)
    process = subprocess.Popen(
        [sys.executable, __file__, "--serve", kind, "--server", software, "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        preexec_fn=pinned(cpus),
        env=env,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                status, _ = probe(port)
                break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    _, err = process.communicate(timeout=5)
                    raise RuntimeError(f"{kind} did not start: {err.decode()[-2000:]}") from None
                time.sleep(0.1)
        assert status == 200, status
        yield port
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def run_wrk(port: int, seconds: int, connections: int, cpus: set[int] | None = None) -> float:
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as script:
        body = BODY.decode().replace("\\", "\\\\").replace('"', '\\"')
        script.write(
            'wrk.method = "POST"\n'
            f'wrk.body = "{body}"\n'
            'wrk.headers["Content-Type"] = "application/json"\n'
        )
    try:
        out = subprocess.run(
            [
                "wrk",
                "-t1",
                f"-c{connections}",
                f"-d{seconds}s",
                "-s",
                script.name,
                f"http://127.0.0.1:{port}/predict",
            ],
            check=True,
            capture_output=True,
            text=True,
            preexec_fn=pinned(cpus),
        ).stdout
    finally:
        os.unlink(script.name)
    if "Non-2xx" in out:
        raise RuntimeError(f"wrk saw errors:\n{out}")
    match = re.search(r"Requests/sec:\s+([0-9.]+)", out)
    assert match is not None, out
    return float(match.group(1))


async def _client_connection(port: int, payload: bytes, stop: float, counts: list[int]) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    done = 0
    try:
        while time.monotonic() < stop:
            writer.write(payload)
            head = await reader.readuntil(b"\r\n\r\n")
            length = int(re.search(rb"(?i)content-length: *([0-9]+)", head).group(1))  # type: ignore[union-attr]
            await reader.readexactly(length)
            done += 1
    finally:
        counts.append(done)
        writer.close()


def asyncio_client(port: int, seconds: int, connections: int) -> float:
    """Requests per second from keep-alive connections in this (separate) process."""

    async def main() -> float:
        counts: list[int] = []
        stop = time.monotonic() + seconds
        started = time.monotonic()
        payload = request_bytes()
        await asyncio.gather(
            *(_client_connection(port, payload, stop, counts) for _ in range(connections))
        )
        return sum(counts) / (time.monotonic() - started)

    return asyncio.run(main())


def real_server(seconds: int, rounds: int, connections: int) -> tuple[dict[str, float], str]:
    """Requests/s per app ("app@granian": on granian): its best run of ``rounds`` rounds.

    Every server runs from the start to the end, idle but for its turn, and
    each round drives each of them in turn: a slow spell of this shared
    machine then falls on neighbouring runs alike (other work only ever
    lowers a run, so the best run is the app's own speed).
    """
    kinds = ["constant", "starlette", "starlette+asyncache", "fastapi", "fastapi+asyncache"]
    if importlib.util.find_spec("granian") is not None:
        kinds += ["constant@granian", "starlette+asyncache@granian"]
    use_wrk = shutil.which("wrk") is not None
    generator = f"wrk -t1 -c{connections}" if use_wrk else f"asyncio client, {connections} conns"
    load = run_wrk if use_wrk else asyncio_client
    results: dict[str, list[float]] = {kind: [] for kind in kinds}
    with contextlib.ExitStack() as servers:
        ports = {}
        for kind in kinds:
            app, _, software = kind.partition("@")
            ports[kind] = servers.enter_context(server(app, software or "uvicorn"))
            if "asyncache" in kind:
                status, outcome = probe(ports[kind])
                assert (status, outcome) == (200, "hit"), (status, outcome)
                limit = "constant" + kind[kind.index("@") :] if "@" in kind else "constant"
                # The limit sends the very bytes a hit sends: only finding the answer differs.
                assert answer(ports[kind]) == answer(ports[limit]), (kind, answer(ports[kind]))
            load(ports[kind], 1, connections)  # warm-up
        for _ in range(rounds):
            for kind in kinds:
                results[kind].append(load(ports[kind], seconds, connections))
    return {kind: max(values) for kind, values in results.items()}, generator


SIDE_BY_SIDE = ("constant", "constant (control)", "lookup", "starlette+asyncache")


def side_by_side(
    software: str,
    seconds: int,
    rounds: int,
    connections: int,
    kinds: tuple[str, ...] = SIDE_BY_SIDE,
    before: Path | None = None,
) -> dict[str, list[float]]:
    """Each round's throughput of the others in ``SIDE_BY_SIDE`` over the constant response's.

    Runs one after another compare moments as much as apps: on this shared
    machine the same server's throughput moves by a quarter between two runs
    of two seconds. Here the servers share one CPU and are driven at the same
    time (by one ``wrk`` each, on the other CPUs), so a slow spell falls on
    all of them at once, and the scheduler's fair share gives each the same
    CPU time: their throughputs stand as the inverse of each request's cost.
    The second constant response is the control: its ratio says how exact
    the method is (1.00 when it is). The lookup (``lookup_app``) shows what
    keying a request alone costs. Needs ``wrk`` and two CPUs.
    """
    available = os.sched_getaffinity(0)
    servers_cpu = {min(available)}
    load_cpus = available - servers_cpu
    ratios: dict[str, list[float]] = {kind: [] for kind in kinds[1:]}
    with contextlib.ExitStack() as servers:
        ports = {
            kind: servers.enter_context(
                server(
                    kind.split()[0], software, servers_cpu, before if "(before)" in kind else None
                )
            )
            for kind in kinds
        }
        for kind in kinds:
            if "asyncache" in kind:
                assert probe(ports[kind]) == (200, "hit"), kind
        for kind in kinds[1:]:  # the same bytes from all: only finding them differs
            got = _without_timing(answer(ports[kind]))
            assert got == answer(ports["constant"]), (kind, got)
        with ThreadPoolExecutor(len(kinds)) as pool:
            for round_ in range(rounds + 1):
                runs = pool.map(
                    lambda kind: run_wrk(ports[kind], seconds, connections, load_cpus),
                    kinds,
                )
                done = dict(zip(kinds, runs, strict=True))
                if round_ == 0:
                    continue  # the first round warms the servers up
                for kind in ratios:
                    ratios[kind].append(done[kind] / done["constant"])
    return ratios


def ratio_head(described: str) -> None:
    """Prints a side-by-side table's description and head (``ratio_row`` prints its rows)."""
    print(described)
    print()
    print("| app | server | median ratio | lowest | highest |")
    print("|---|---|---:|---:|---:|")


def ratio_row(label: str, software: str, values: list[float]) -> dict[str, Any]:
    """One side-by-side row (the rounds' ratios ``values``), printed, for the JSON table."""
    middle, low, high = statistics.median(values), min(values), max(values)
    print(f"| {label} | {software} | {middle:.3f}x | {low:.3f}x | {high:.3f}x |")
    return {
        "app": label,
        "server": software,
        "median_ratio": round(middle, 3),
        "lowest": round(low, 3),
        "highest": round(high, 3),
    }


def _without_timing(
    answered: tuple[int, list[tuple[str, str]], bytes],
) -> tuple[int, list[tuple[str, str]], bytes]:
    status, headers, body = answered
    return status, [item for item in headers if item[0] != "server-timing"], body


TIMING = (
    "constant",
    "constant (control)",
    "constant+timing",
    "starlette+asyncache",
    "starlette+asyncache+defaults",
    "starlette+asyncache+defaults+bound",
)


async def timing_in_process(rounds: int, count: int) -> dict[str, float]:
    """Microseconds per in-process hit, Server-Timing off and on (best of interleaved rounds)."""
    post = scope_for("POST")
    cases = {
        "server_timing=False": cached(starlette_app()),
        "default settings": cached(starlette_app(), defaults=True),
        "default settings, the engine's step one dict lookup (the bound)": engine_bound(
            cached(starlette_app(), defaults=True)
        ),
    }
    for app in cases.values():
        await call(app, post, BODY)  # the miss that stores the answer
        assert (b"x-cache", b"hit") in (await call(app, post, BODY)).headers
        await timed(app, post, BODY, count // 4)
    samples: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(rounds):
        for name, app in cases.items():
            samples[name].append(await timed(app, post, BODY, count))
    return {name: min(values) for name, values in samples.items()}


def timing_side_by_side(seconds: int, rounds: int, before: Path | None) -> dict[str, Any]:
    """The hit with the default settings (Server-Timing on) and without it, side by side
    with the constant response; with ``before``, the same two from that checkout too."""
    kinds = TIMING
    if before is not None:
        kinds += ("starlette+asyncache (before)", "starlette+asyncache+defaults (before)")
    softwares = ["uvicorn"] + (["granian"] if importlib.util.find_spec("granian") else [])
    described = (
        f"Side by side, as above ({rounds} rounds of {seconds}s): the hit with the default "
        "settings (Server-Timing on) and with server_timing=False, and the bound of the "
        "first: the same hit with the engine's step one dict lookup (engine_bound)"
        + (f", the two hits each from this checkout and from {before}" if before else "")
        + "; each round's throughput over the constant response's (which sends no "
        "Server-Timing)"
    )
    inside = asyncio.run(timing_in_process(7, 5000))
    print("In process (raw ASGI calls, best of 7 interleaved rounds of 5000), this checkout:")
    for name, micros in inside.items():
        print(f"- hit, {name}: {micros:.2f} us")
    print()
    ratio_head(described)
    rows = []
    for software in softwares:
        ratios = side_by_side(software, seconds, rounds, 32, kinds, before)
        for kind, values in ratios.items():
            label = (
                kind.replace("+bound", ", the engine's step one dict lookup (the bound)")
                .replace("+defaults", ", default settings")
                .replace("starlette+asyncache", "starlette+asyncache hit")
            )
            if kind.split()[0] == "starlette+asyncache":
                label = label.replace("hit", "hit, server_timing=False", 1)
            rows.append(ratio_row(label, software, values))
        derived = {
            "Server-Timing's share kept (default settings / server_timing=False, per round)": [
                on / off
                for on, off in zip(
                    ratios["starlette+asyncache+defaults"],
                    ratios["starlette+asyncache"],
                    strict=True,
                )
            ],
            "default-settings hit over a constant response with the same Server-Timing": [
                on / limit
                for on, limit in zip(
                    ratios["starlette+asyncache+defaults"], ratios["constant+timing"], strict=True
                )
            ],
        }
        for label, values in derived.items():
            rows.append(ratio_row(label, software, values))
    return {
        "description": described,
        "rows": rows,
        "columns": list(rows[0]),
        "in_process_us": inside,
    }


# -- the table ---------------------------------------------------------------


def side_by_side_table(report: dict[str, Any], seconds: int, rounds: int) -> dict[str, Any]:
    """Prints the side-by-side part, puts its targets in ``report`` and returns its table."""
    softwares = ["uvicorn"] + (["granian"] if importlib.util.find_spec("granian") else [])
    described = (
        f"Side by side: on each server, the constant response, a second constant response "
        f"(the control), one dict lookup by the request (the least a keyed cache does) "
        f"and the hit share one CPU and are driven at once (wrk -t1 -c32 "
        f"each, on the other CPUs), {rounds} rounds of {seconds}s; each round's throughput "
        f"over the constant response's in that round"
    )
    print()
    ratio_head(described)
    rows = []
    for software in softwares:
        ratios = side_by_side(software, seconds, rounds, connections=32)
        for kind, values in ratios.items():
            label = {
                "constant (control)": "second constant response (the control)",
                "lookup": "one dict lookup by the request (the least a keyed cache does)",
            }.get(kind, f"{kind} (every request a hit)")
            rows.append(ratio_row(label, software, values))
        hit = statistics.median(ratios["starlette+asyncache"])
        control = statistics.median(ratios["constant (control)"])
        report[f"server_lookup_vs_constant_{software}"] = round(
            statistics.median(ratios["lookup"]), 3
        )
        report[f"server_hit_vs_constant_{software}"] = round(hit, 3)
        report[f"server_control_vs_constant_{software}"] = round(control, 3)
    print()
    for software in softwares:
        hit = report[f"server_hit_vs_constant_{software}"]
        print(
            f"target: hit throughput over {software} >= 0.9x the constant response, side by "
            f"side: {hit:.3f}x, control {report[f'server_control_vs_constant_{software}']:.3f}x "
            f"({'met' if hit >= 0.9 else 'NOT met'})"
        )
    return {"description": described, "rows": rows, "columns": list(rows[0])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="short rounds")
    parser.add_argument("--no-server", action="store_true", help="skip the real-server part")
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    parser.add_argument(
        "--timing",
        action="store_true",
        help="only the side-by-side part for the default settings (Server-Timing on)",
    )
    parser.add_argument("--before", type=Path, help="with --timing: a checkout to compare")
    parser.add_argument("--rounds", type=int, help="with --timing: side-by-side rounds (10)")
    parser.add_argument("--serve", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--server", default="uvicorn", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.timing:
        rounds = args.rounds or (4 if args.quick else 10)
        table = timing_side_by_side(2, rounds, args.before)
        if args.json:
            Path(args.json).write_text(json.dumps({"timing_side_by_side": table}, indent=2))
        return
    if args.serve and args.server == "granian":
        from granian import Granian  # type: ignore[attr-defined]

        os.environ["ASYNCACHE_BENCH_APP"] = args.serve
        Granian(
            "middleware:granian_target",
            address="127.0.0.1",
            port=args.port,
            interface="asgi",  # type: ignore[arg-type]
            workers=1,
            loop="uvloop" if server_stack()[1] == "uvloop" else "asyncio",  # type: ignore[arg-type]
            websockets=False,
            factory=True,
            log_enabled=False,
        ).serve()
        return
    if args.serve:
        import uvicorn

        http, loop = server_stack()
        uvicorn.run(
            serve_app(args.serve),
            host="127.0.0.1",
            port=args.port,
            http=http,  # type: ignore[arg-type]
            loop=loop,  # type: ignore[arg-type]
            ws="none",
            lifespan="off",
            log_level="warning",
            access_log=False,
        )
        return

    rounds, count = (3, 2000) if args.quick else (7, 5000)
    machine = describe_machine(platform.machine())
    report: dict[str, Any] = {"title": "DecisionCacheMiddleware", "machine": machine}
    print(f"# DecisionCacheMiddleware benchmark ({machine})")
    print()
    described = f"In process: raw ASGI calls, best of {rounds} interleaved rounds of {count} calls"
    print(described)
    print()
    timings = asyncio.run(in_process(rounds, count))
    starlette = timings["bare Starlette route (POST)"]
    fc2 = timings["fastapi-cache2 hit (GET)"]
    large = timings["bare Starlette route, 1 KiB answer"]
    rows = []
    print("| case | µs/request | vs bare Starlette (same answer) | vs fastapi-cache2 hit |")
    print("|---|---:|---:|---:|")
    for name, micros in timings.items():
        bare = large if "1 KiB" in name else starlette
        print(f"| {name} | {micros:.1f} | {micros / bare:.2f}x | {micros / fc2:.2f}x |")
        rows.append(
            {
                "case": name,
                "us_per_request": round(micros, 2),
                "vs_bare_starlette": round(micros / bare, 3),
                "vs_fastapi_cache2_hit": round(micros / fc2, 3),
            }
        )
    hit = timings["asyncache hit over Starlette (POST)"]
    report["in_process"] = {"description": described, "rows": rows, "columns": list(rows[0])}
    report["hit_vs_bare_starlette"] = round(hit / starlette, 3)
    report["hit_vs_fastapi_cache2_hit"] = round(hit / fc2, 3)
    print()
    print(
        f"target: hit <= 0.6x bare Starlette: {hit / starlette:.2f}x "
        f"({'met' if hit / starlette <= 0.6 else 'NOT met'}); "
        f"hit <= 0.15x fastapi-cache2 hit: {hit / fc2:.2f}x "
        f"({'met' if hit / fc2 <= 0.15 else 'NOT met'})"
    )
    if not args.no_server:
        seconds, server_rounds = (2, 2) if args.quick else (2, 10)
        http, loop = server_stack()
        print()
        load = os.getloadavg()[0]
        throughput, generator = real_server(seconds, server_rounds, connections=32)
        described = (
            f"Real server: uvicorn ({http}, {loop}), 1 worker, loopback, {generator}, "
            f"{seconds}s per run, best of {server_rounds} interleaved rounds, every server "
            f"up throughout (load average before: {load:.1f})"
        )
        print(described)
        print()
        print("| app | server | requests/s | vs its bare app | vs constant response |")
        print("|---|---|---:|---:|---:|")
        rows = []
        for kind, rps in throughput.items():
            app, _, software = kind.partition("@")
            software = software or "uvicorn"
            limit = throughput["constant" + (f"@{software}" if software != "uvicorn" else "")]
            bare = None if app == "constant" else throughput.get(app.split("+")[0])
            if app == "constant":
                label = "constant response (raw ASGI, the limit)"
            else:
                label = f"{app} (every request a hit)" if "+" in app else f"{app} (bare)"
            versus = "-" if bare is None or software != "uvicorn" else f"{rps / bare:.2f}x"
            print(f"| {label} | {software} | {rps:,.0f} | {versus} | {rps / limit:.2f}x |")
            rows.append(
                {
                    "app": label,
                    "server": software,
                    "requests_per_s": round(rps),
                    "vs_bare_app": "-" if bare is None or versus == "-" else round(rps / bare, 3),
                    "vs_constant_response": round(rps / limit, 3),
                }
            )
        ratio = throughput["starlette+asyncache"] / throughput["starlette"]
        report["real_server"] = {"description": described, "rows": rows, "columns": list(rows[0])}
        report["server_hit_vs_bare_starlette"] = round(ratio, 3)
        print()
        print(
            f"target: hit throughput >= 1.3x the bare app: {ratio:.2f}x "
            f"({'met' if ratio >= 1.3 else 'NOT met'})"
        )
        pinnable = hasattr(os, "sched_getaffinity")  # Linux: pins processes to CPUs
        if shutil.which("wrk") is None or not pinnable or len(os.sched_getaffinity(0)) < 2:
            print("\nside by side: skipped (it needs wrk, Linux and two CPUs)")
        else:
            report["side_by_side"] = side_by_side_table(report, seconds, server_rounds)
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
