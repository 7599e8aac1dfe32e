"""Is the demo's load client the bottleneck? It against wrk, on the same server's hits.

Run: ``.venv/bin/python benchmarks/load_client.py`` (``--seconds``, ``--connections``).

One uvicorn process serves ``benchmarks/fleet_replica.py`` over a memory
store; one request warms the entry, then for ``--seconds`` each: the
``asyncache.demo.client.LoadClient`` the demo and the fleet harness use (one
process, ``--connections`` keep-alive connections), and ``wrk`` (one thread,
the same connections) with a Lua script posting the same body. Every answer
is a hit; the ratio says how much of the server's rate the client shows.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import ROOT, machine

from tests.support import free_port

BODY = b'{"input":1}'


async def _load_client(port: int, connections: int, seconds: float) -> dict[str, float]:
    from asyncache.demo.client import LoadClient

    done = hits = 0
    stop = time.monotonic() + seconds
    async with LoadClient("127.0.0.1", port, connections=connections) as client:

        async def worker() -> None:
            nonlocal done, hits
            while time.monotonic() < stop:
                reply = await client.post_json("/predict", BODY)
                done += 1
                hits += reply.headers.get("x-cache") == "hit"

        started = time.monotonic()
        cpu = time.process_time()
        await asyncio.gather(*(worker() for _ in range(connections)))
        elapsed = time.monotonic() - started
        cpu = time.process_time() - cpu
    return {"requests/s": done / elapsed, "hit share": hits / max(1, done), "client CPU s": cpu}


def _wrk(port: int, connections: int, seconds: float, workdir: Path) -> float:
    script = workdir / "post.lua"
    script.write_text(
        'wrk.method = "POST"\n'
        f"wrk.body = '{BODY.decode()}'\n"
        'wrk.headers["Content-Type"] = "application/json"\n'
    )
    out = subprocess.run(
        [
            "wrk",
            "-t1",
            f"-c{connections}",
            f"-d{seconds:g}s",
            "-s",
            str(script),
            f"http://127.0.0.1:{port}/predict",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    match = re.search(r"Requests/sec:\s+([\d.]+)", out)
    assert match is not None, out
    return float(match.group(1))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--json", metavar="PATH")
    args = parser.parse_args(argv)
    if shutil.which("wrk") is None:
        raise SystemExit("needs wrk on PATH (apt-get install wrk)")
    with tempfile.TemporaryDirectory(prefix="asyncache-load-client-") as tmp:
        workdir = Path(tmp)
        port = free_port()
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "benchmarks")]),
            "FLEET_STORE": "memory://",
            "FLEET_RUNS": str(workdir / "runs"),
        }
        server = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "uvicorn",
                "fleet_replica:app",
                "--port",
                str(port),
                "--log-level",
                "warning",
                "--no-access-log",
            ],
            cwd=ROOT / "benchmarks",
            env=env,
        )
        try:
            deadline = time.monotonic() + 60
            while True:
                try:
                    asyncio.run(_load_client(port, 1, 0.01))
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.1)
            ours = asyncio.run(_load_client(port, args.connections, args.seconds))
            theirs = _wrk(port, args.connections, args.seconds, workdir)
        finally:
            server.terminate()
            server.wait(timeout=10)
    document = {
        "command": " ".join(
            ["python benchmarks/load_client.py", *(sys.argv[1:] if argv is None else argv)]
        ),
        "machine": machine(),
        "connections": args.connections,
        "LoadClient hits/s": round(ours["requests/s"]),
        "LoadClient hit share": round(ours["hit share"], 4),
        "LoadClient CPU s": round(ours["client CPU s"], 2),
        "wrk hits/s": round(theirs),
        "LoadClient / wrk": round(ours["requests/s"] / theirs, 3),
    }
    print(json.dumps(document, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(document, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
