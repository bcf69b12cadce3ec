#!/usr/bin/env bash
# Sets up .venv if needed, then trains int8-actor DQN on CartPole-v1 locally.
# Extra arguments go to local_main, e.g. --seed 1 --num_actors 2.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
exec .venv/bin/python -m binaries.local_main "$@"
