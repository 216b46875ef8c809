#!/usr/bin/env bash
# Create .venv and install nmt with its test tools. Safe to re-run.
#   NMT_TORCH  pip requirement for torch (default torch==2.13.0, a CPU build on the
#              project's machines). Set NMT_TORCH=skip if you installed a CUDA build yourself.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
    "$PYTHON" -m venv .venv
fi
TORCH_SPEC=${NMT_TORCH:-torch==2.13.0}
# --no-compile: pip would byte-compile every file of torch and the rest (36 of the 62 s these two installs took
# on the 2-core AMD EPYC); Python compiles what is imported, at its first import, and keeps it (hence the unset,
# here and in test.sh and experiment.sh: else every process would compile torch's modules again)
unset PYTHONDONTWRITEBYTECODE
if [ "$TORCH_SPEC" != "skip" ] && ! .venv/bin/python -c "import torch" 2>/dev/null; then
    .venv/bin/pip install --quiet --no-compile "$TORCH_SPEC"
fi
.venv/bin/pip install --quiet --no-compile -e ".[dev]"
.venv/bin/python -c "import torch, nmt; print(f'nmt {nmt.__version__} ready: torch {torch.__version__}, CUDA available: {torch.cuda.is_available()}')"
