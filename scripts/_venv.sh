# Sourced by scripts/demo and scripts/test: make .venv and install what is asked.
# Usage: ensure_venv EXTRAS [GROUP...]
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${ASYNCACHE_VENV:-$ROOT/.venv}"
PY="$VENV/bin/python"

ensure_venv() {
    local extras="$1"
    shift
    if [ ! -x "$PY" ]; then
        echo "creating $VENV"
        python3 -m venv "$VENV"
    fi
    # pip >= 25.1 understands --group (PEP 735 dependency groups).
    "$PY" -m pip install --quiet --disable-pip-version-check --upgrade "pip>=25.1"
    # torch first and pinned: 2.13.0 is the CPU build on disk; anything else
    # would pull gigabytes of CUDA wheels.
    "$PY" -m pip install --quiet --disable-pip-version-check "torch==2.13.0"
    local groups=()
    for group in "$@"; do groups+=(--group "$group"); done
    "$PY" -m pip install --quiet --disable-pip-version-check -e "$ROOT[$extras]" "${groups[@]}"
}
