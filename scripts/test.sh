#!/usr/bin/env bash
# The test command: set up .venv, lint, run the tests (CI runs `bash scripts/test.sh`: every tier).
#   bash scripts/test.sh            every tier: the unit tests and tests/system/ (whole trainings, experiments,
#                                   the benchmark, torchrun, kills and resumes)
#   bash scripts/test.sh --unit     the developer's fast loop: tests/ outside tests/system/, minus tests marked
#                                   slow (under a minute on 2 idle cores); sets .venv up only if it is missing
#   bash scripts/test.sh --system   tests/system/ only
# Further arguments go to pytest, e.g. bash scripts/test.sh --unit -k scoring
set -euo pipefail
cd "$(dirname "$0")/.."
tier=(tests)
setup=always
case "${1:-}" in
    --unit) shift; tier=(tests --ignore=tests/system -m "not slow"); setup=if-missing ;;
    --system) shift; tier=(tests/system) ;;
esac
if [ "$setup" = always ] || [ ! -x .venv/bin/python ]; then
    bash scripts/setup.sh
fi
unset PYTHONDONTWRITEBYTECODE  # keep the byte code of what is imported (setup.sh installs without it)
.venv/bin/ruff check nmt tests scripts
# Two workers (pytest-xdist, one per core here), each test file whole on one of them, in its order (a file's
# torchrun tests never run at once). NMT_TEST_WORKERS=0 runs every test in this one process.
.venv/bin/python -m pytest -q -n "${NMT_TEST_WORKERS:-2}" --dist loadfile "${tier[@]}" "$@"
