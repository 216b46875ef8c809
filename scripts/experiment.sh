#!/usr/bin/env bash
# The main job: set up .venv, then run the RNNencdec vs RNNsearch comparison on the Bible corpus.
# Extra arguments go to `nmt experiment` (e.g. --set training.max_steps=100 --out experiments/try).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
unset PYTHONDONTWRITEBYTECODE  # keep the byte code of what is imported (setup.sh installs without it)
.venv/bin/nmt experiment configs/quick.yaml "$@"
