"""Run a peer's own test suite bare and behind DecisionCacheMiddleware, and compare.

Usage: ``python tests/peer/runner.py starlette|fastapi [--no-verify] [-- PYTEST_ARGS...]``
(``scripts/peer`` does this with the project's virtualenv).

1. The suite comes from the sdist of the installed version
   (``pip download --no-deps --no-binary :all: NAME==VERSION``), unpacked once
   under ``.asyncache/peer/NAME-VERSION/`` (ignored by git) without the
   package's own source, so that the installed package is what runs. A copy
   already unpacked is used as is; a failed download with no copy fails.
2. pytest runs the suite twice with the ``asyncache_peer`` plugin: ``bare``,
   then ``verify`` (wrapped, and every stored miss replayed as a hit that
   must be byte-identical); ``--no-verify`` runs ``wrapped`` instead.
3. Every test that passed bare must pass wrapped, unless ``expected.py``
   names it with the reason. Exit status 1 on an unexplained regression or a
   hit that differs from its miss; 0 otherwise.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
CACHE = ROOT / ".asyncache" / "peer"
sys.path.insert(0, str(HERE))

from expected import EXPECTED, explanation  # noqa: E402

# Plugins of asyncache's own test environment that the peers do not use (the
# peers run on anyio's plugin; pytest-asyncio would warn, and warnings are errors there).
VERIFY_SHOWN = int(os.environ.get("ASYNCACHE_PEER_SHOW", "20"))
PYTEST_OPTIONS = [
    "-p",
    "no:cacheprovider",
    "-p",
    "no:asyncio",
    "-p",
    "asyncache_peer",
    "-q",
    "--continue-on-collection-errors",
]


def unpacked_suite(name: str) -> Path:
    """The peer's sdist, unpacked without its package source; downloaded the first time."""
    version = importlib.metadata.version(name)
    target = CACHE / f"{name}-{version}"
    if (target / "tests").is_dir():
        return target
    with tempfile.TemporaryDirectory() as tmp:
        command = [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--quiet",
            "--disable-pip-version-check",
            "--no-deps",
            "--no-binary",
            ":all:",
            f"{name}=={version}",
            "-d",
            tmp,
        ]
        subprocess.run(command, check=True)
        (archive,) = Path(tmp).glob("*.tar.gz")
        staging = Path(tmp) / "unpacked"
        with tarfile.open(archive) as sdist:
            members = []
            for member in sdist.getmembers():
                parts = Path(member.name).parts
                # Leave the package's own source out: the installed copy is the one under test.
                if len(parts) > 1 and parts[1] != name:
                    members.append(member)
            sdist.extractall(staging, members=members, filter="data")
        (top,) = staging.iterdir()
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(target, ignore_errors=True)
        shutil.move(str(top), target)
    return target


def run_suite(suite: Path, mode: str, extra: list[str]) -> tuple[dict[str, Any], float]:
    """Run the suite once in ``mode``; its plugin report and the seconds it took."""
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        env = dict(os.environ)
        env["ASYNCACHE_PEER_MODE"] = mode
        env["ASYNCACHE_PEER_REPORT"] = str(report)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE), env.get("PYTHONPATH")]))
        command = [sys.executable, "-m", "pytest", *PYTEST_OPTIONS, *extra, "tests"]
        started = time.perf_counter()
        done = subprocess.run(command, cwd=suite, env=env, capture_output=True, text=True)
        seconds = time.perf_counter() - started
        if not report.exists():
            sys.stdout.write(done.stdout[-5000:] + done.stderr[-5000:])
            raise SystemExit(f"peer: the {mode} run of {suite.name} wrote no report")
        summary = done.stdout.strip().splitlines()[-1:] or [""]
        print(f"  {mode:8} {summary[0]}  ({seconds:.0f} s)")
        return json.loads(report.read_text(encoding="utf-8")), seconds


def backend(nodeid: str) -> str:
    """The anyio backend a test id names, or ``-`` when it names none."""
    for name in ("asyncio", "trio"):
        if f"[{name}" in nodeid or f"-{name}]" in nodeid or f"-{name}-" in nodeid:
            return name
    return "-"


def compare(name: str, bare: dict[str, Any], wrapped: dict[str, Any]) -> int:
    """Print the comparison; the number of unexplained differences."""
    expected = EXPECTED[name]
    passed = sorted(n for n, outcome in bare["outcomes"].items() if outcome == "passed")
    outcomes = wrapped["outcomes"]
    effects: list[str] = []
    unexplained: list[str] = []
    per_backend: dict[str, Counter[str]] = {}
    for nodeid in passed:
        counts = per_backend.setdefault(backend(nodeid), Counter())
        counts["bare"] += 1
        outcome = outcomes.get(nodeid, "missing")
        if outcome == "passed":
            counts["wrapped"] += 1
        elif explanation(expected, nodeid) is not None:
            counts["expected"] += 1
            effects.append(nodeid)
        else:
            counts["unexplained"] += 1
            message = wrapped["messages"].get(nodeid, "")
            unexplained.append(f"{nodeid} ({outcome}) {message}")
    print(f"{name}: bare passed / wrapped passed / expected effects / unexplained")
    rows = [*sorted(per_backend.items()), ("total", sum(per_backend.values(), Counter()))]
    for kind, c in rows:
        cells = f"{c['bare']:5} / {c['wrapped']:5} / {c['expected']:3} / {c['unexplained']:3}"
        print(f"  {kind:8} {cells}")
    for nodeid in effects:
        print(f"  expected  {nodeid}: {explanation(expected, nodeid)}")
    for line in unexplained:
        print(f"  UNEXPLAINED {line}")
    stale = [
        entry
        for entry in expected
        if not any(explanation({entry: ""}, nodeid) is not None for nodeid in effects)
    ]
    for entry in stale:
        print(f"  stale expected entry (passes wrapped now, or never ran): {entry}")
    failures = len(unexplained)
    verify = wrapped.get("verify", {})
    if wrapped["mode"] == "verify":
        print(
            f"  verify: {verify['stored_misses']} stored misses replayed as hits, "
            f"{verify['replayed_identical']} byte-identical, {verify['differences']} differ "
            f"(in {len(wrapped['verify_failed'])} tests); "
            f"{verify['extension_notes']} hits without the miss's extension messages (noted)"
        )
        parts = ", ".join(f"{part} {n}" for part, n in sorted(wrapped["verify_parts"].items()))
        print(f"  verify differences by part: {parts or 'none'}")
        shown = sorted(wrapped["verify_failed"].items())
        for nodeid, found in shown[:VERIFY_SHOWN]:
            print(f"  VERIFY {nodeid}: {found[0][:400]}")
        if len(shown) > VERIFY_SHOWN:
            more = len(shown) - VERIFY_SHOWN
            print(f"  ... and {more} more tests (ASYNCACHE_PEER_SHOW=N shows N)")
        failures += len(wrapped["verify_failed"])
    return failures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("peer", choices=sorted(EXPECTED))
    parser.add_argument("--no-verify", action="store_true", help="wrapped without replaying")
    parser.add_argument("--save", type=Path, help="keep both runs' reports in this folder")
    parser.add_argument("--reuse", type=Path, help="compare the reports --save kept; run nothing")
    parser.add_argument("pytest_args", nargs="*", help="more pytest arguments, after --")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    modes = ("bare", "wrapped" if args.no_verify else "verify")
    if args.reuse is not None:
        reports = [json.loads((args.reuse / f"{args.peer}-{m}.json").read_text()) for m in modes]
    else:
        suite = unpacked_suite(args.peer)
        where = subprocess.run(
            [sys.executable, "-c", "import asyncache; print(asyncache.__file__)"],
            capture_output=True,
            text=True,
            check=True,
            cwd=suite,  # where the suite runs: PYTHONPATH decides, as there
        ).stdout.strip()
        print(f"peer suite: {suite.name}; asyncache from {Path(where).parent}")
        reports = [run_suite(suite, mode, args.pytest_args)[0] for mode in modes]
        if args.save is not None:
            args.save.mkdir(parents=True, exist_ok=True)
            for mode, found in zip(modes, reports, strict=True):
                (args.save / f"{args.peer}-{mode}.json").write_text(json.dumps(found))
    failures = compare(args.peer, *reports)
    print(f"peer: {failures} unexplained in {time.perf_counter() - started:.0f} s")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
