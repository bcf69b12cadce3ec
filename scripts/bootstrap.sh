#!/usr/bin/env bash
# Creates .venv with Python 3.11 and the pinned requirements, once; later
# calls only reinstall when the requirements, constraints or packaging
# change.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON="${PYTHON:-$(command -v python3.11 || true)}"
if [[ -z "$PYTHON" ]] || ! "$PYTHON" -c 'import sys; assert sys.version_info[:2] == (3, 11)' 2>/dev/null; then
  echo "error: Python 3.11 is required (dm-reverb 0.14 has no wheels for other versions); set PYTHON=/path/to/python3.11" >&2
  exit 1
fi

stamp_value="$(cat requirements.txt requirements-test.txt constraints.txt setup.py pyproject.toml | sha256sum | cut -d' ' -f1)"
stamp_file=.venv/.actorq_requirements
if [[ -f "$stamp_file" && "$(cat "$stamp_file")" == "$stamp_value" ]]; then
  exit 0
fi

echo "Setting up .venv (Python 3.11, pinned requirements)..." >&2
"$PYTHON" -m venv .venv
.venv/bin/python -m pip install --quiet --disable-pip-version-check --upgrade "pip==24.0"
.venv/bin/python -m pip install --quiet --disable-pip-version-check -r requirements.txt -r requirements-test.txt -c constraints.txt
.venv/bin/python -m pip install --quiet --disable-pip-version-check --no-deps --no-build-isolation -e .
echo "$stamp_value" > "$stamp_file"
