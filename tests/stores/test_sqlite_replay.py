"""Replay of a SQLite recording: read-only, creating nothing (issue 33, item 14).

A recording is often replayed from a CI checkout: the file and its folder
read-only, the user not root. Replay opens it read-only (``immutable`` when it
was closed cleanly), so it answers there, and it leaves no ``-wal`` or
``-shm`` file beside the recording anywhere.

Run as root (as here), the read-only replay drops to the unprivileged
``nobody`` user in its own process, after importing what it needs as the
user that runs the suite: root writes through any mode bits.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from asyncache import DecisionCache, cached_prediction, open_store

ROOT = Path(__file__).resolve().parents[2]
NOBODY = 65534
TEXTS = ["a", "b", "c"]

# Replays TEXTS from argv[1] (as ``nobody`` with argv[3] == "drop"), after a replay of
# argv[2] as the user that started it, so that every module is imported by then.
REPLAY = """
import asyncio, json, os, sys
from asyncache import DecisionCache, cached_prediction, open_store

calls = []


async def replay(path):
    cache = DecisionCache(open_store(f"sqlite:///{path}"), mode="replay")

    @cached_prediction(cache, namespace="verdict", fingerprint="f")
    async def predict(text: str) -> str:
        calls.append(text)
        return text.upper()

    answers = []
    for text in TEXTS:
        try:
            answers.append(await predict(text))
        except Exception as exc:
            answers.append(f"{type(exc).__name__}: {exc}")
    await cache.aclose()
    return answers


TEXTS = json.loads(sys.argv[4])
asyncio.run(replay(sys.argv[2]))
if sys.argv[3] == "drop":
    os.setgroups([])
    os.setgid(NOBODY)
    os.setuid(NOBODY)
answers = asyncio.run(replay(sys.argv[1]))
print(json.dumps({"answers": answers, "calls": calls}), flush=True)
""".replace("NOBODY", str(NOBODY))


async def record(path: Path) -> None:
    cache = DecisionCache(open_store(f"sqlite:///{path}"), mode="record")

    @cached_prediction(cache, namespace="verdict", fingerprint="f")
    async def predict(text: str) -> str:
        return text.upper()

    assert [await predict(text) for text in TEXTS] == [t.upper() for t in TEXTS]
    await cache.aclose()


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def checkout() -> Iterator[Path]:
    """A folder anyone may read, under the system's temporary folder (pytest's is private)."""
    folder = Path(tempfile.mkdtemp(prefix="asyncache-checkout-"))
    try:
        yield folder
    finally:
        folder.chmod(0o755)
        shutil.rmtree(folder)


def test_a_read_only_recording_replays_as_another_user(checkout: Path, tmp_path: Path) -> None:
    recording = checkout / "decisions.sqlite"
    asyncio.run(record(recording))
    warm = tmp_path / "warm.sqlite"
    shutil.copy(recording, warm)
    before = digest(recording)
    # What a checkout gives: the file and its folder readable and not writable.
    recording.chmod(0o444)
    checkout.chmod(0o555)

    drop = os.geteuid() == 0
    if drop:
        probe = subprocess.run(
            [sys.executable, "-c", f"import os; os.setuid({NOBODY})"], capture_output=True
        )
        if probe.returncode != 0:
            pytest.skip("cannot switch to the nobody user here")
    ended = subprocess.run(
        [
            *(sys.executable, "-c", REPLAY, str(recording), str(warm)),
            *("drop" if drop else "stay", json.dumps(TEXTS)),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert ended.returncode == 0, ended.stderr
    assert json.loads(ended.stdout) == {"answers": [t.upper() for t in TEXTS], "calls": []}
    assert sorted(os.listdir(checkout)) == ["decisions.sqlite"]
    assert digest(recording) == before
    assert stat.S_IMODE(recording.stat().st_mode) == 0o444


async def test_replay_creates_no_file_beside_the_recording(tmp_path: Path) -> None:
    recording = tmp_path / "decisions.sqlite"
    await record(recording)
    assert sorted(os.listdir(tmp_path)) == ["decisions.sqlite"]  # closed: the WAL folded in
    before = digest(recording)

    cache = DecisionCache(open_store(f"sqlite:///{recording}"), mode="replay")
    calls: list[str] = []

    @cached_prediction(cache, namespace="verdict", fingerprint="f")
    async def predict(text: str) -> str:
        calls.append(text)
        return text.upper()

    assert [await predict(text) for text in TEXTS] == [t.upper() for t in TEXTS]
    assert sorted(os.listdir(tmp_path)) == ["decisions.sqlite"]  # while it is open, too
    await cache.aclose()
    assert calls == []
    assert sorted(os.listdir(tmp_path)) == ["decisions.sqlite"]
    assert digest(recording) == before
