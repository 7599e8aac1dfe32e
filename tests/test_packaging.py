"""The package as a user gets it: a wheel and an sdist build, and the wheel, installed into a
clean virtualenv outside the checkout, runs the quickstart and ``asyncache --version``.

Slow (a build and an install, about a minute); the installs come from the
package index pip is configured with.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tarfile
import tomllib
import zipfile
from pathlib import Path

import pytest

from .support import require, subprocess_env

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]


def _run(*command: str | Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    # Nothing of the checkout on the path: the installed package is what runs.
    env = subprocess_env("")
    env.pop("PYTHONPATH", None)
    env.pop("VIRTUAL_ENV", None)
    result = subprocess.run(
        [str(part) for part in command],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return result


def test_the_wheel_installs_outside_the_checkout_and_runs_the_quickstart(tmp_path: Path) -> None:
    try:
        import build  # noqa: F401
    except ImportError:
        require(False, "the build package is not installed (the test dependency group has it)")
    dist = tmp_path / "dist"
    _run(sys.executable, "-m", "build", "--wheel", "--sdist", "--outdir", dist, ROOT, cwd=tmp_path)
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    (wheel,) = dist.glob(f"asyncache_ml-{version}-py3-none-any.whl")
    (sdist,) = dist.glob(f"asyncache_ml-{version}.tar.gz")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        metadata = archive.read(f"asyncache_ml-{version}.dist-info/METADATA").decode()
    assert "asyncache/py.typed" in names and "asyncache/engine/_engine.py" in names
    assert not any(name.startswith(("tests/", "benchmarks/")) for name in names)
    # The interpreters CI runs the suite on are the ones the wheel says it supports: the
    # README's test command on the oldest one requires-python allows (3.11 on the CI
    # machine), and scripts/test-python on each version .ci/run names.
    ci = (ROOT / ".ci" / "run").read_text()
    others = re.search(r"^for version in ([\d. ]+); do\n\s+scripts/test-python ", ci, re.M)
    assert others is not None, "the .ci/run loop over scripts/test-python"
    tested = {"3.11", *others.group(1).split()}
    classified = {
        line.rsplit(":: ", 1)[1]
        for line in metadata.splitlines()
        if line.startswith("Classifier: Programming Language :: Python :: 3.")
    }
    assert classified == tested
    assert "Requires-Python: >=3.11" in metadata
    with tarfile.open(sdist) as archive:
        assert f"asyncache_ml-{version}/asyncache/cache.py" in archive.getnames()

    venv = tmp_path / "venv"
    _run(sys.executable, "-m", "venv", venv, cwd=tmp_path)
    python = venv / "bin" / "python"
    _run(python, "-m", "pip", "install", "--quiet", f"{wheel}[sqlite]", cwd=tmp_path)
    where = tmp_path / "user"
    where.mkdir()
    (where / "quickstart.py").write_text((ROOT / "examples" / "quickstart.py").read_text())
    out = _run(python, "quickstart.py", cwd=where).stdout.split()
    assert out == ["shipping", "shipping", "1"]
    imported = _run(python, "-c", "import asyncache; print(asyncache.__file__)", cwd=where)
    assert imported.stdout.startswith(str(venv))
    assert _run(venv / "bin" / "asyncache", "--version", cwd=where).stdout.strip() == (
        f"asyncache {version}"
    )
