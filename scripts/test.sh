#!/usr/bin/env bash
# The test command: set up .venv, lint, run the whole test suite (CI runs exactly this).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/ruff check nmt tests scripts
.venv/bin/python -m pytest -q "$@"
