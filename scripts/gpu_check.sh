#!/usr/bin/env bash
# The checks that need a CUDA GPU, in one command, where torch with CUDA is already installed (no setup):
#   bash scripts/gpu_check.sh [OUT]
# 1. the tests that skip without CUDA (cuDNN's RNNs against the CPU's step loops in float64, bf16 / fp16
#    autocast against fp32, search on the GPU against the CPU, resume onto a GPU in fp16, fused Adam against
#    unfused Adam and resumed from a CPU run's state);
#    the Transformer and RNNsearch (GRU, LSTM; its decoder step) trained through torch.compile against eager;
# 2. scripts/benchmark.py on the GPU at configs/converged.yaml's 8,000-token batches (the batch issue 42's goals
#    are set at): Transformer-50, RNNsearch-50 and RNNencdec-50 eagerly, then the three with training.compile (the
#    Transformer's forward, RNNsearch's decoder step compiled; RNNencdec's RNNs are cuDNN calls on CUDA, so it
#    trains eagerly and its JSON says compile false; compiling is warm-up, not timed). Needs the main job's
#    data/prepared/bible-k-l (nmt prepare configs/quick.yaml) or internet;
# 3. the rest of those test files, whose trainings and decodings then run on the GPU (device auto).
# Writes OUT (default gpu-check/): tests-cuda.log, benchmark.log, benchmark-gpu.json, benchmark-compile.log,
# benchmark-compile.json, tests-rest.log.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:-gpu-check}
mkdir -p "$out"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
python=${PYTHON:-python3}
nvidia-smi -L
"$python" -c "import sys, torch; print(sys.version.split()[0], torch.__version__, torch.cuda.get_device_name())"
tests=(tests/test_encoder.py tests/test_decoder.py tests/test_seq2seq.py tests/test_transformer.py
    tests/test_precision.py tests/test_loading.py tests/test_search.py tests/test_resume.py tests/test_optim.py
    tests/test_compiling.py)
# 420 s: the compiled tests (a Transformer, RNNsearch GRU and LSTM, fp32 and bf16) compile with inductor (their
# time on a GPU not yet measured)
timeout 420 "$python" -m pytest -q -p no:cacheprovider -rs -k cuda "${tests[@]}" 2>&1 | tee "$out/tests-cuda.log"
converged=(--device cuda --config configs/converged.yaml)
timeout 240 "$python" scripts/benchmark.py "${converged[@]}" --runs transformer-50 rnnsearch-50 rnnencdec-50 \
    --out "$out/benchmark-gpu.json" 2>&1 | tee "$out/benchmark.log"
# 420 s: inductor compiles RNNsearch's step (forward and backward) while it warms up, besides the Transformer
timeout 420 "$python" scripts/benchmark.py "${converged[@]}" --runs transformer-50 rnnsearch-50 rnnencdec-50 \
    --set training.compile=true \
    --out "$out/benchmark-compile.json" 2>&1 | tee "$out/benchmark-compile.log"
timeout 90 "$python" -m pytest -q -p no:cacheprovider -rs -k "not cuda" "${tests[@]}" 2>&1 | tee "$out/tests-rest.log"
