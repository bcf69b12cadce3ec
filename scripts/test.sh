#!/usr/bin/env bash
# Sets up .venv if needed, then runs the test suite. Extra arguments go to
# pytest, e.g. -k export.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
exec .venv/bin/python -m pytest -p no:cacheprovider "$@"
