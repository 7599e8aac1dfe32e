"""The demo's service: a MiniLM decision endpoint behind both front doors.

``POST /decide`` with ``{"state": "...", "questions": ["refund", ...]}``
answers yes/no questions about a support message. ``DecisionCacheMiddleware``
answers repeated requests without calling the endpoint; behind it,
``@cached_prediction`` micro-batches the misses into forward passes on a
thread and keeps each decision, so a request that bypasses the HTTP cache
(``Cache-Control: no-store``) still skips the model. ``GET /stats`` reports
both caches and the model's counters.

Run by ``asyncache demo`` as ``python -m asyncache.demo.service --port N``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator, Sequence
from typing import Any

from ..cache import DecisionCache
from ..decorator import cached_prediction
from ..offload import ThreadOffload
from ..stores.registry import open_store

__all__ = ["create_app"]


class _CountingModel:
    """The decision model, counting its forward passes and the decisions they made."""

    def __init__(self, backend: str) -> None:
        from .minilm import MiniLMDecider

        self.model = MiniLMDecider(backend)  # type: ignore[arg-type]
        self.fingerprint = self.model.fingerprint
        self.forward_passes = 0
        self.items = 0
        self._lock = threading.Lock()

    def predict_batch(self, requests: Sequence[tuple[str, Sequence[str]]]) -> list[Any]:
        answers = self.model.predict_batch(requests)
        with self._lock:
            self.forward_passes += 1
            self.items += len(requests)
        return answers


def create_app(store_url: str, backend: str = "onnx", *, fresh: bool = False) -> Any:
    """The demo's Starlette app over the store at ``store_url``."""
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    from ..middleware import DecisionCacheMiddleware

    model = _CountingModel(backend)
    store = open_store(store_url)
    # One store, two caches: HTTP responses and decisions live side by side.
    decisions = DecisionCache(store, fingerprint=model.fingerprint, namespace="decisions")
    responses = DecisionCache(store, fingerprint=model.fingerprint, namespace="http")
    pool = ThreadOffload(max_workers=1)
    state: dict[str, int] = {"store_entries": 0}

    @cached_prediction(
        decisions,
        namespace="decide",
        offload=pool,
        batch=True,
        max_batch_size=32,
        max_wait_ms=4,
    )
    def decide(requests: list[tuple[str, list[str]]]) -> list[Any]:
        return model.predict_batch(requests)

    async def decide_endpoint(request: Request) -> JSONResponse:
        try:
            body = await request.json()
            item = (str(body["state"]), [str(q) for q in body["questions"]])
        except (ValueError, KeyError, TypeError):
            return JSONResponse({"detail": "expected {state: str, questions: [str]}"}, 422)
        try:
            answers = await decide(item)
        except KeyError as exc:
            return JSONResponse({"detail": str(exc)}, 422)
        return JSONResponse({"answers": dict(zip(item[1], answers, strict=True))})

    async def stats_endpoint(request: Request) -> JSONResponse:
        return JSONResponse(
            {
                "store_entries": state["store_entries"],
                "store_entries_now": await store.count(),
                "http": responses.stats(),
                "decisions": decisions.stats(),
                "model": {"forward_passes": model.forward_passes, "items": model.items},
            },
            headers={"Cache-Control": "no-store"},
        )

    @contextlib.asynccontextmanager
    async def lifespan(app: Any) -> AsyncIterator[None]:
        if fresh:
            await store.clear()
        state["store_entries"] = await store.count()
        try:
            yield
        finally:
            await pool.aclose()
            await decisions.aclose()  # closes the shared store
            await responses.aclose()

    app = Starlette(
        routes=[
            Route("/decide", decide_endpoint, methods=["POST"]),
            Route("/stats", stats_endpoint, methods=["GET"]),
        ],
        lifespan=lifespan,
    )
    return DecisionCacheMiddleware(app, cache=responses, paths=["/decide"])


def main(argv: list[str] | None = None) -> None:
    """Serve the demo app with uvicorn on 127.0.0.1."""
    import uvicorn

    parser = argparse.ArgumentParser(prog="python -m asyncache.demo.service")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--store", required=True)
    parser.add_argument("--backend", default="onnx")
    parser.add_argument("--fresh", action="store_true")
    args = parser.parse_args(argv)
    app = create_app(args.store, args.backend, fresh=args.fresh)
    # uvloop and httptools when installed (uvicorn's "auto"), no access log: the
    # demo measures the cache, not the server's logging.
    config = uvicorn.Config(
        app, host="127.0.0.1", port=args.port, log_level="warning", access_log=False
    )
    asyncio.run(uvicorn.Server(config).serve())


if __name__ == "__main__":
    main()
