#!/usr/bin/env bash
# The checks that need a CUDA GPU, in one command, where torch with CUDA is already installed (no setup):
#   [PARTS="bench compile tests rest"] bash scripts/gpu_check.sh [OUT]
# PARTS (default all four, in this order, the GPU measurements wanted most first) picks what runs, so that a
# short device session can run what fits (each part's time limit is below; all four take up to ~20 min):
#   bench   scripts/benchmark.py on the GPU at configs/converged.yaml's 8,000-token batches (the batch the GPU
#           speed goals are set at): Transformer-50, RNNsearch-50 and RNNencdec-50, eagerly (240 s);
#   compile the Transformer-50 and RNNsearch-50 with training.compile (the Transformer's forward, RNNsearch's
#           decoder step; RNNencdec's RNNs are cuDNN calls on CUDA, so it would train eagerly; compiling is
#           warm-up, not timed) (420 s);
#   tests   the tests that skip without CUDA (cuDNN's RNNs against the CPU's step loops in float64, bf16 / fp16
#           autocast against fp32, search on the GPU against the CPU, resume onto a GPU in fp16, fused Adam against
#           unfused Adam and resumed from a CPU run's state, the Transformer and RNNsearch trained through
#           torch.compile against eager, a training step that never waits for the device) (420 s);
#   rest    the rest of those test files, whose trainings and decodings then run on the GPU (device auto) (90 s).
#   decode  not in the default: beam-5 and greedy decoding of the whole test split with converged weights, runs
#           trained earlier on this machine by scripts/gpu_converged.sh (TRAINED, default its WORK's
#           /tmp/gpu-converged/seed1/runs): Transformer-50, RNNsearch-50 and RNNencdec-50 at DECODE_BATCH sentences a
#           batch (default 1024), and 48 of the sentences again one at a time, whose translations must not change
#           (scripts/benchmark.py --decode-only) (240 s); then the kernel launches of one step of search, the
#           model's and search's own, with tiny models (scripts/search_ops.py --device cuda) (60 s).
# The benchmarks need the main job's data/prepared/bible-k-l (nmt prepare configs/quick.yaml) or internet.
# Writes OUT (default gpu-check/): benchmark.log, benchmark-gpu.json, benchmark-compile.log, benchmark-compile.json,
# tests-cuda.log, tests-rest.log; decode: benchmark-decode.json, benchmark-decode.log, search-ops.log.
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
    tests/test_compiling.py tests/test_host_waits.py tests/test_transfer.py)
converged=(--device cuda --config configs/converged.yaml)
for part in ${PARTS:-bench compile tests rest}; do
    case $part in
        bench) timeout 240 "$python" scripts/benchmark.py "${converged[@]}" --runs transformer-50 rnnsearch-50 \
                   rnnencdec-50 --out "$out/benchmark-gpu.json" 2>&1 | tee "$out/benchmark.log" ;;
        # 420 s: inductor compiles RNNsearch's step (forward and backward) while it warms up, besides the Transformer
        compile) timeout 420 "$python" scripts/benchmark.py "${converged[@]}" --runs transformer-50 rnnsearch-50 \
                     --set training.compile=true --out "$out/benchmark-compile.json" 2>&1 \
                     | tee "$out/benchmark-compile.log" ;;
        # 420 s: the compiled tests (a Transformer, RNNsearch GRU and LSTM, fp32 and bf16) compile with inductor
        tests) timeout 420 "$python" -m pytest -q -p no:cacheprovider -rs -k cuda "${tests[@]}" 2>&1 \
                   | tee "$out/tests-cuda.log" ;;
        rest) timeout 90 "$python" -m pytest -q -p no:cacheprovider -rs -k "not cuda" "${tests[@]}" 2>&1 \
                  | tee "$out/tests-rest.log" ;;
        decode) timeout 240 "$python" scripts/benchmark.py --decode-only --trained "${TRAINED:-/tmp/gpu-converged/seed1/runs}" \
                    "${converged[@]}" --runs transformer-50 rnnsearch-50 rnnencdec-50 --sentences 3011 \
                    --set "decoding.batch_size=${DECODE_BATCH:-1024}" --out "$out/benchmark-decode.json" 2>&1 \
                    | tee "$out/benchmark-decode.log"
                timeout 60 "$python" scripts/search_ops.py --device cuda 2>&1 | tee "$out/search-ops.log" ;;
        *) echo "unknown part $part (bench, compile, tests, rest, decode)" >&2; exit 2 ;;
    esac
done
