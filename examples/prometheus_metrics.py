"""Prometheus: every stats() counter and a compute-time histogram, per cache."""

import asyncio

from prometheus_client import CollectorRegistry, generate_latest

from asyncache import DecisionCache, cached_prediction
from asyncache.adapters.prometheus import instrument


async def main() -> None:
    # In a service: instrument(cache) uses the default registry that
    # prometheus_client.start_http_server() or make_asgi_app() serve.
    registry = CollectorRegistry()
    cache = DecisionCache(namespace="sentiment")
    instrument(cache, registry=registry)

    @cached_prediction(cache)
    async def sentiment(text: str) -> str:
        await asyncio.sleep(0.02)
        return "positive" if "love" in text else "negative"

    for text in ["I love it", "I love it", "meh", "I love it"]:
        await sentiment(text)

    wanted = ("asyncache_hits_total", "asyncache_misses_total", "asyncache_compute_seconds_count")
    for line in generate_latest(registry).decode().splitlines():
        if line.startswith(wanted):
            print(line)
    await cache.aclose()


asyncio.run(main())
