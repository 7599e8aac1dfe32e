"""Cached functions and methods type-check as the user wrote them, under mypy and pyright.

``tests/typechecks/usage.py`` calls them right and wrong; each checker must report
exactly the lines marked ``# wrong:``, no fewer (a wrong call slipping through)
and no more (a false error on a right one, as a method's ``self`` once was).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

from ..support import require

ROOT = Path(__file__).resolve().parents[2]
USAGE = ROOT / "tests" / "typechecks" / "usage.py"


def _wrong_lines() -> set[int]:
    lines = USAGE.read_text().splitlines()
    marked = {number for number, line in enumerate(lines, 1) if "# wrong:" in line}
    assert len(marked) >= 5
    return marked


def _tool(name: str) -> str:
    path = Path(sys.executable).parent / name
    found = str(path) if path.exists() else shutil.which(name)
    require(found is not None, f"needs {name} (the test dependency group)")
    assert found is not None
    return found


def test_mypy_strict_reports_exactly_the_wrong_calls() -> None:
    result = subprocess.run(
        [_tool("mypy"), "--strict", "--no-incremental", "--cache-dir=/dev/null", str(USAGE)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    pattern = re.compile(rf"^{re.escape(str(USAGE.relative_to(ROOT)))}:(\d+): error:")
    reported = {int(m.group(1)) for m in map(pattern.match, result.stdout.splitlines()) if m}
    assert reported == _wrong_lines(), result.stdout


def test_pyright_reports_exactly_the_wrong_calls() -> None:
    result = subprocess.run(
        [_tool("pyright"), "--outputjson", "--pythonpath", sys.executable, str(USAGE)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    report = json.loads(result.stdout)
    errors = [d for d in report["generalDiagnostics"] if d["severity"] == "error"]
    reported = {d["range"]["start"]["line"] + 1 for d in errors}
    assert reported == _wrong_lines(), json.dumps(errors, indent=1)
