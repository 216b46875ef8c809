#!/usr/bin/env bash
# configs/converged.yaml on one CUDA GPU, seed by seed, where torch with CUDA is already installed (no setup):
#   bash scripts/gpu_converged.sh [OUT] [SEED...]        (default: OUT gpu-converged/, seeds 1 2)
# Needs the main job's prepared data in data/prepared/bible-k-l (nmt prepare configs/quick.yaml; the GPU
# machine needs no internet then, nor the 278 MB data/cache). eflomal is not needed there either: run
#   bash scripts/gpu_converged.sh --align
# first on a machine that has it (pip install eflomal; 1-3 min on a CPU), which caches the links of the
# attention checks' test sample in data/prepared/bible-k-l/alignments/; without them the experiment runs the
# perturbation checks only and its report says so.
# Each seed: `nmt experiment configs/converged.yaml --set training.seed=N --out WORK/seedN` under a time limit
# (TIMEOUT_S, default 600: 10 minutes a seed; Ctrl-C first, so that the runs save a checkpoint and the same
# command resumes them), its output in OUT/seedN.log, then OUT/seedN.tar.gz: the report folder (report.md,
# results.json, timings.json, the plots, learning_curve.*, attention_checks.*, the test translations) and each
# run's summary.json, config.yaml, environment.json, log.jsonl and output (runs/NAME.log), never a checkpoint (a run that fails, a
# CUDA error say, fails alone: the others are reported and packed, the seed's exit status then 2). Two files
# a seed in OUT, and OUT/gpu.log (nvidia-smi every 15 s: utilisation and memory while the seeds train).
# The seeds run one after the other (SIDE_BY_SIDE=0, the default: each seed's timings.json is its own time);
# SIDE_BY_SIDE=1 runs them side by side on the one GPU, each timings.json then an upper bound on its time alone
# (the seven runs of one seed already share the GPU; two seeds halve each run's share, so more runs end at their
# time limit). So that the report is written within the limit whatever the GPU's speed, each run's training
# stops at TRAIN_MINUTES (training.max_minutes, 0 = none; default: the limit less 5 minutes, 5 at 600 s) if
# early stopping has not ended it, and the report says which runs it stopped; the 5 minutes are for start-up,
# the translations of the evaluation (beam 5) and the learning curves (greedy), which each run's process makes
# once its run stops, the scoring, and the attention checks (an estimate from the H200's decoding rates, not yet
# measured). The limit sends Ctrl-C (each run saves) and kills 15 s later, so that a
# 540-s limit ends within a 600-s call; should the call be cut all the same, seedN.tar.gz is packed every PACK_EVERY
# seconds (default 30) while the seed runs, so that what was written by then comes back. NMT_COMMIT (the commit given to the copy, which has no .git) is
# written to OUT/commit.txt. JOBS (default 7: every run at once, so that the time limit bounds the whole training
# phase; 0 = min(runs, 4) on a GPU) is each experiment's --jobs. WORK
# (default /tmp/gpu-converged) keeps the checkpoints. NMT_SETS adds --set overrides to every seed
# (space-separated KEY=VALUE; on a CPU, e.g. NMT_SETS="training.max_steps=20 ..." shrinks the runs to try it).
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
python=${PYTHON:-python3}
config=configs/converged.yaml
read -r -a sets <<< "${NMT_SETS:-}"
overrides=()
for set in "${sets[@]}"; do overrides+=(--set "$set"); done

if [ "${1:-}" = "--align" ]; then  # on a machine with eflomal, before the prepared folder is carried to the GPU
    exec "$python" -c "
import sys
from nmt.compare.attention_checks import cache_experiment_links
from nmt.config import load_config
from nmt.data.prepare import prepare
config = load_config('$config', sys.argv[1:])
prepare(config.data)
print('links cached in', cache_experiment_links(config))
" "${sets[@]}"
fi

out=${1:-gpu-converged}
shift || true
seeds=("${@:-1 2}")
read -r -a seeds <<< "${seeds[*]}"
work=${WORK:-/tmp/gpu-converged}
limit=${TIMEOUT_S:-600}
train_minutes=${TRAIN_MINUTES:-$(awk -v limit="$limit" 'BEGIN { m = (limit - 300) / 60; print (m < 1 ? 1 : m) }')}
mkdir -p "$out" "$work"
echo "${NMT_COMMIT:-unknown}" > "$out/commit.txt"
nvidia-smi -L 2>/dev/null || echo "no nvidia-smi: $("$python" -c 'import torch; print("CUDA" if torch.cuda.is_available() else "no CUDA")')"
"$python" -c "
import sys
from nmt.compare.attention_checks import experiment_links_cached
from nmt.config import load_config
path = experiment_links_cached(load_config('$config', sys.argv[1:]))
print(f'eflomal links of the attention checks\' sample: {path}' if path else 'no cached eflomal links of the attention '
      'checks\' sample: the alignment check will be skipped (run bash scripts/gpu_converged.sh --align where eflomal is)')
" "${sets[@]}"
pack() {  # OUT/seedN.tar.gz of the report folder as it is now, without checkpoints, tokenizer copies or caches
    local seed=$1 dir=$work/seed$1 status
    [ -d "$dir" ] || return 0
    (cd "$dir" && find . -maxdepth 1 -type f \
        \( -name '*.md' -o -name '*.json' -o -name '*.png' -o -name '*.txt' -o -name '*.yaml' -o -name '*.tsv' \) \
        -print0; [ ! -d runs ] || find ./runs -maxdepth 2 -type f \( -name summary.json -o -name config.yaml \
        -o -name environment.json -o -name log.jsonl -o -name '*.log' \) -print0) \
        | tar -czf "$out/.seed$seed.tar.gz" --warning=no-file-changed -C "$dir" --null -T -
    status=${PIPESTATUS[1]}
    # tar's 1 is "file changed as we read it": a log the runs still write, packed as far as it was read
    if [ "$status" -le 1 ]; then mv "$out/.seed$seed.tar.gz" "$out/seed$seed.tar.gz"; fi
}
run_seed() {  # train, evaluate and report one seed, then pack its report folder
    local seed=$1 dir=$work/seed$1 started status packer stop=$work/.seed$1.packed
    started=$(date +%s)
    # packed every PACK_EVERY seconds meanwhile: should the device call be cut before the seed ends, what it
    # had written comes back all the same (the logs, the runs' summaries, the reports written so far); stopped by
    # a file, not a signal, so that no tar of it is left running beside the last one
    rm -f "$stop"
    (n=0; while [ ! -e "$stop" ]; do sleep 1; n=$((n + 1)); [ $((n % ${PACK_EVERY:-30})) = 0 ] && pack "$seed"; done) &
    packer=$!
    timeout -s INT -k 15 "$limit" "$python" -m nmt experiment "$config" --set "training.seed=$seed" \
        --set "training.max_minutes=$train_minutes" "${overrides[@]}" --jobs "${JOBS:-7}" --out "$dir" \
        > "$out/seed$seed.log" 2>&1
    status=$?
    touch "$stop"
    wait "$packer"
    echo "seed $seed: exit $status after $(( $(date +%s) - started )) s (limit $limit s)" | tee -a "$out/seed$seed.log"
    tail -n 5 "$out/seed$seed.log"
    [ -d "$dir" ] || { echo "seed $seed: no experiment folder $dir"; return; }
    pack "$seed"
    ls -l "$out/seed$seed.tar.gz"
}

if command -v nvidia-smi > /dev/null; then
    nvidia-smi --query-gpu=timestamp,utilization.gpu,memory.used --format=csv -l 15 > "$out/gpu.log" 2>&1 &
    monitor=$!
fi
if [ "${SIDE_BY_SIDE:-0}" = 1 ]; then
    pids=()
    for seed in "${seeds[@]}"; do run_seed "$seed" & pids+=($!); done
    wait "${pids[@]}"
else
    for seed in "${seeds[@]}"; do run_seed "$seed"; done
fi
[ -n "${monitor:-}" ] && kill "$monitor" 2> /dev/null
exit 0
