"""A stalled primary's promotion, followed: issue 33's second attack, rerun.

Run: ``.venv/bin/python benchmarks/stalled_failover.py`` (``--stall`` seconds, 15 by default).

A private Redis Cluster of three primaries with a replica each
(``cluster-node-timeout`` 3 s, ``cluster-require-full-coverage no``), 60 keys
stored. One primary is stopped with ``SIGSTOP`` (not killed) for ``--stall``
seconds while every key is asked for through the store every 50 ms. Printed:
when its replica was promoted, and when the stalled node's keys hit again
(seconds from the stop). A stalled node answers with timeouts, not ``MOVED`` or
a refused connection: before issue 33's fix the client kept its old topology
and the keys hit again only once the node resumed (15.25 s in the issue, the
promotion at 3.5-4 s); now within about a second of the promotion.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path

from _common import ROOT  # noqa: F401 - puts the checkout on sys.path

from asyncache.stores.redis import RedisStore
from tests.servers import send_command, start_cluster

PREFIX = "stall:"


def _is_master(port: int, node_port: int) -> bool:
    for line in send_command(port, "CLUSTER", "NODES").decode().splitlines():
        fields = line.split()
        if fields[1].split("@")[0].endswith(f":{node_port}"):
            return "master" in fields[2] and "fail" not in fields[2]
    return False


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--stall", type=float, default=15.0)
    args = parser.parse_args()
    server, cli = shutil.which("redis-server"), shutil.which("redis-cli")
    if server is None or cli is None:
        sys.exit("needs redis-server and redis-cli")
    with tempfile.TemporaryDirectory() as workdir:
        cluster = start_cluster(
            server,
            cli,
            Path(workdir),
            replicas=1,
            node_timeout_ms=3000,
            extra_args=["--cluster-require-full-coverage", "no"],
        )
        store = RedisStore.from_url(
            f"{cluster.url}?socket_timeout=0.5&socket_connect_timeout=0.5", prefix=PREFIX
        )
        try:
            keys = [b"%016d" % n for n in range(60)]
            await store.add_many([(k, b"v" + k, None) for k in keys])
            client = store.client
            await client.initialize()  # type: ignore[union-attr]
            primaries = {node.port for node in client.get_primaries()}  # type: ignore[union-attr]
            victim = next(node for node in cluster.nodes if node.port in primaries)
            on = [
                k
                for k in keys
                if client.nodes_manager.get_node_from_slot(  # type: ignore[union-attr]
                    client.keyslot(PREFIX.encode() + k)  # type: ignore[union-attr]
                ).port
                == victim.port
            ]
            replica = next(
                node
                for node in cluster.nodes
                if node.port not in primaries
                and f"master_port:{victim.port}"
                in send_command(node.port, "INFO", "replication").decode()
            )
            await asyncio.sleep(1.0)  # replication is asynchronous
            assert victim.process is not None
            os.kill(victim.process.pid, signal.SIGSTOP)
            stopped = time.monotonic()
            promoted = served = None
            try:
                while time.monotonic() - stopped < args.stall:
                    got = await asyncio.gather(*(store.get(k) for k in on), return_exceptions=True)
                    now = time.monotonic() - stopped
                    if promoted is None and _is_master(replica.port, replica.port):
                        promoted = now
                    if served is None and all(
                        not isinstance(g, BaseException) and g is not None for g in got
                    ):
                        served = now
                        break
                    await asyncio.sleep(0.05)
            finally:
                os.kill(victim.process.pid, signal.SIGCONT)
            print(
                f"{len(on)} keys on the stalled primary; its replica promoted at "
                f"{promoted if promoted is None else round(promoted, 2)} s; its keys hit "
                f"again at {served if served is None else round(served, 2)} s "
                f"(the stall: {args.stall:g} s)",
                flush=True,
            )
        finally:
            await store.aclose()
            cluster.stop()


if __name__ == "__main__":
    asyncio.run(main())
