"""Golden key vectors: the inputs, and a generator for ``keys.json``.

``tests/test_keys.py`` imports ``cases()`` and checks that ``make_key`` still
gives the hex keys recorded in ``keys.json``. Run this script only when the key
format changes on purpose, together with a bump of ``asyncache.keys.KEY_VERSION``:

    .venv/bin/python tests/golden/make_keys.py          # print the vectors
    .venv/bin/python tests/golden/make_keys.py --write  # rewrite keys.json
"""

from __future__ import annotations

import datetime
import decimal
import json
import sys
import uuid
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
if not __package__:  # run as a script: the repository root makes ``tests`` importable
    sys.path.insert(0, str(HERE.parents[1]))

from tests.support.inputs import Color, Level, Point, Query  # noqa: E402

GOLDEN = HERE / "keys.json"


def cases() -> list[tuple[str, dict[str, Any]]]:
    """Every golden case: a name and ``make_key``'s four arguments."""
    import numpy
    import torch

    def call(
        inputs: Any, *, namespace: str = "golden", fingerprint: Any = "model@1", scope: Any = None
    ) -> dict[str, Any]:
        return {
            "namespace": namespace,
            "fingerprint": fingerprint,
            "scope": scope,
            "inputs": inputs,
        }

    return [
        ("plain text", call({"text": "is this spam?"})),
        ("plain nested", call({"text": "hi", "options": {"top_k": 3, "lang": "en"}, "ok": True})),
        ("int", call({"x": 1})),
        ("float", call({"x": 1.0})),
        ("negative zero", call({"x": -0.0})),
        ("none", call({"x": None})),
        ("nan", call({"x": float("nan")})),
        ("inf", call({"x": float("inf")})),
        ("-inf", call({"x": float("-inf")})),
        ("text x", call({"x": "x"})),
        ("bytes x", call({"x": b"x"})),
        ("long bytes", call({"x": bytes(range(256)) * 2})),
        ("big int", call({"x": 2**70})),
        ("big negative int", call({"x": -(2**70)})),
        ("string of a big int", call({"x": str(2**70)})),
        ("nul string", call({"x": "\x00bytes"})),
        ("nul key", call({"\x00x": 1})),
        ("tag-like list", call(["\x00c", 1])),
        ("tuple", call({"x": (1, 2)})),
        ("non-string keys", call({"x": {1: "a", "1": "b"}})),
        ("set", call({"x": {3, 1, 2}})),
        ("null in text", call({"text": "null and void", "n": 0})),
        ("datetime", call({"x": datetime.datetime(2024, 5, 1, 12, 30, tzinfo=datetime.UTC)})),
        ("date", call({"x": datetime.date(2024, 5, 1)})),
        ("time", call({"x": datetime.time(12, 30, 5)})),
        ("timedelta", call({"x": datetime.timedelta(minutes=90)})),
        ("decimal", call({"x": decimal.Decimal("1.10")})),
        ("uuid", call({"x": uuid.UUID("12345678-1234-5678-1234-567812345678")})),
        ("dataclass", call({"x": Point(1, 2.5)})),
        ("enum", call({"x": Color.RED})),
        ("int enum", call({"x": Level.HIGH})),
        ("pydantic", call({"x": Query(text="hello")})),
        ("ndarray float32", call({"x": numpy.arange(6, dtype=numpy.float32).reshape(2, 3)})),
        ("ndarray 0-d", call({"x": numpy.array(1.5)})),
        ("numpy scalar", call({"x": numpy.int64(7)})),
        ("tensor", call({"x": torch.arange(6, dtype=torch.int64).reshape(3, 2)})),
        ("scoped", call({"text": "is this spam?"}, scope="tenant-a")),
        ("fingerprint mapping", call({"x": 1}, fingerprint={"id": "m", "revision": 2})),
        ("no fingerprint", call({"x": 1}, fingerprint=None)),
        ("other namespace", call({"x": 1}, namespace="other")),
    ]


def vectors() -> list[dict[str, Any]]:
    """The golden file's content: each case's name, canonical inputs and hex key."""
    from asyncache.keys import canonical, make_key

    rows = []
    for name, args in cases():
        rows.append(
            {
                "name": name,
                # For a reader of a diff: what the inputs encode to.
                "canonical": canonical(args["inputs"]).decode(),
                "key": make_key(**args).hex(),
            }
        )
    return rows


def main() -> None:
    from asyncache.keys import KEY_VERSION

    text = json.dumps({"key_version": KEY_VERSION, "vectors": vectors()}, indent=1) + "\n"
    if "--write" in sys.argv[1:]:
        GOLDEN.write_text(text)
        print(f"wrote {len(cases())} vectors to {GOLDEN}")
    else:
        print(text, end="")


if __name__ == "__main__":
    main()
