#!/usr/bin/env bash
# The checks that need a CUDA GPU, in one command, where torch with CUDA is already installed (no setup):
#   bash scripts/gpu_check.sh [OUT]
# 1. the tests that skip without CUDA (cuDNN's RNNs against the CPU's step loops in float64, bf16 / fp16
#    autocast against fp32, search on the GPU against the CPU, resume onto a GPU in fp16, fused Adam against
#    unfused Adam and resumed from a CPU run's state);
# 2. scripts/benchmark.py on the GPU (RNNsearch, RNNencdec, the Transformer), which needs
#    data/prepared/bible-k-l (nmt prepare configs/bench.yaml) or internet;
# 3. the rest of those test files, whose trainings and decodings then run on the GPU (device auto).
# Writes OUT (default gpu-check/): tests-cuda.log, benchmark.log, benchmark-gpu.json, tests-rest.log.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:-gpu-check}
mkdir -p "$out"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
python=${PYTHON:-python3}
nvidia-smi -L
"$python" -c "import sys, torch; print(sys.version.split()[0], torch.__version__, torch.cuda.get_device_name())"
tests=(tests/test_encoder.py tests/test_decoder.py tests/test_seq2seq.py tests/test_transformer.py
    tests/test_precision.py tests/test_loading.py tests/test_search.py tests/test_resume.py tests/test_optim.py)
timeout 150 "$python" -m pytest -q -p no:cacheprovider -rs -k cuda "${tests[@]}" 2>&1 | tee "$out/tests-cuda.log"
timeout 240 "$python" scripts/benchmark.py --device cuda --runs rnnsearch rnnencdec transformer \
    --out "$out/benchmark-gpu.json" 2>&1 | tee "$out/benchmark.log"
timeout 90 "$python" -m pytest -q -p no:cacheprovider -rs -k "not cuda" "${tests[@]}" 2>&1 | tee "$out/tests-rest.log"
