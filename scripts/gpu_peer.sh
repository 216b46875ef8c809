#!/usr/bin/env bash
# OpenNMT-py 3.0.4 and ours, back to back on one GPU, the same Transformer and GRU models at the same token
# batch size. Two steps:
#   bash scripts/gpu_peer.sh --prepare      here, with PyPI: writes .peer/ (git-ignored, about 27 MB), all the GPU
#                                           machine needs for the peer without internet: wheels/ (OpenNMT-py,
#                                           configargparse, pyonmttok for cp310-cp312 in one wheel, rapidfuzz's
#                                           pure-Python part; see scripts/gpu_peer.py), peers/ (a copy of
#                                           ../shared/peers' yaml files and peer_data.py), data.tar.gz (the peer's
#                                           pieces and vocabulary of data/prepared/bible-k-l), MANIFEST.txt
#   bash scripts/gpu_peer.sh [OUT] [STEPS]  on the GPU machine (carry .peer and data/prepared/bible-k-l; python3
#                                           with CUDA torch, sentencepiece, sacrebleu, pyyaml there, no internet)
# The second: a venv (--system-site-packages: the image's own torch; OpenNMT-py's torch pin is never installed)
# in WORK (default /tmp/gpu-peer), `pip install --no-index --no-deps` of the wheels, opennmt.sh's one-line fix of
# onmt/utils/loss.py (found through python), then, model by model, the peer's training (onmt_train for STEPS
# steps, default 400, or until its time is up: `gpu_ranks: [0]` and `model_dtype: fp16`, OpenNMT-py's mixed
# precision on CUDA, 3.0.4 has no bf16) and ours right after (scripts/benchmark.py --runs transformer, then
# rnnsearch: bf16 autocast on CUDA), both at BATCH_TOKENS (default 8000, configs/converged.yaml's; 3000 is
# quick.yaml's and the CPU comparisons'). Writes OUT (default gpu-peer/): gpu_peer.json (per model the peer's
# target tok/s, mean of its last three report lines, ours, the ratio, peak GPU memory; the GPU, torch, whether the
# peer installed and ran, or what stopped it), gpu_peer.log (all printed, the install's output included),
# peer-transformer.log, peer-gru.log, ours-transformer.json, ours-rnnsearch.json, ours.log. Prints one comparison
# line per model. If the peer cannot be installed or run it says why, runs ours anyway and exits 0.
# Time: each step under `timeout` (INSTALL_S 60 for the venv and for pip, PEER_S 40 and OURS_S 80 per model) and
# all of them within TOTAL_S (default 240; typically about 3 minutes on a GPU). PYTHON (default python3: the
# image's), PEER_DIR (default .peer), WORK, SENTENCES (ours' decoding sample: 100, on a CPU 4). DEVICE (default:
# cuda if torch sees one, else cpu: no gpu_ranks, fp32, ours with --quick) and REPORT_EVERY (default 10 steps)
# let it be tried on a CPU:
#   OMP_NUM_THREADS=1 DEVICE=cpu BATCH_TOKENS=1000 REPORT_EVERY=5 bash scripts/gpu_peer.sh /tmp/peer-cpu 20
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
python=${PYTHON:-python3}
peer=${PEER_DIR:-$PWD/.peer}
onmt_version=3.0.4 configargparse_version=1.9.0 pyonmttok_version=1.38.1 rapidfuzz_version=3.14.5

prepare() {  # with internet: everything the GPU machine needs for the peer, into $peer
    local venv_py=python3 shared prep dl=$peer/download v
    [ -x .venv/bin/python ] && venv_py=.venv/bin/python  # sentencepiece and nmt, for the peer's data
    for shared in "${PEERS:-}" ../shared/peers \
        "$(dirname "$(git rev-parse --path-format=absolute --git-common-dir 2>/dev/null)")/../shared/peers"; do
        [ -n "$shared" ] && [ -f "$shared/onmt_transformer.yaml" ] && break
    done
    [ -f "$shared/onmt_transformer.yaml" ] || { echo "no ../shared/peers (set PEERS=DIR)" >&2; return 1; }
    rm -rf "$peer" && mkdir -p "$peer/wheels" "$peer/peers" "$dl" || return 1
    local download=("$python" -m pip download --no-deps --only-binary=:all: --progress-bar off --dest "$dl")
    "${download[@]}" "OpenNMT-py==$onmt_version" "configargparse==$configargparse_version" || return 1
    mv "$dl"/*.whl "$peer/wheels/"
    for v in 3.10 3.11 3.12 3.13; do  # pyonmttok: onmt.inputters imports it (its Vocab); a binary wheel
        "${download[@]}" --python-version "$v" --implementation cp --abi "cp${v/./}" \
            --platform manylinux2014_x86_64 "pyonmttok==$pyonmttok_version" > "$dl/pip-$v.log" 2>&1 \
            || echo "pyonmttok $pyonmttok_version: no wheel for cp${v/./} (the peer cannot run on Python $v)"
    done
    "$python" scripts/gpu_peer.py fatten "$peer/wheels" "$dl"/pyonmttok-*.whl || return 1
    "${download[@]}" --python-version 3.12 --implementation cp --platform manylinux_2_28_x86_64 \
        "rapidfuzz==$rapidfuzz_version" > "$dl/pip-rapidfuzz.log" 2>&1 || { cat "$dl/pip-rapidfuzz.log"; return 1; }
    "$python" scripts/gpu_peer.py purepy "$peer/wheels" "$dl"/rapidfuzz-*.whl || return 1
    rm -rf "$dl"
    cp "$shared"/onmt_gru.yaml "$shared"/onmt_transformer.yaml "$shared"/peer_data.py "$peer/peers/" || return 1
    prep=$("$venv_py" -c 'from nmt.config import load_config; print(load_config("configs/bench.yaml", []).data.dir)')
    [ -f "$prep/train.src" ] || "$venv_py" -m nmt prepare configs/bench.yaml > /dev/null || return 1
    mkdir -p "$peer/data" && "$venv_py" "$peer/peers/peer_data.py" "$prep" "$peer/data" || return 1
    tar -czf "$peer/data.tar.gz" -C "$peer/data" . && rm -rf "$peer/data"
    (cd "$peer" && find . -type f ! -name MANIFEST.txt | sort | xargs sha256sum > MANIFEST.txt)
    ls -l "$peer/wheels" "$peer/data.tar.gz"
    du -sh "$peer"
}

if [ "${1:-}" = "--prepare" ]; then
    prepare || { echo "gpu_peer.sh --prepare failed" >&2; exit 1; }
    exit 0
fi

steps=${2:-400}
batch=${BATCH_TOKENS:-8000}
report_every=${REPORT_EVERY:-10}
deadline=$(( $(date +%s) + ${TOTAL_S:-240} ))
out=${1:-gpu-peer} work=${WORK:-/tmp/gpu-peer}
mkdir -p "$out" "$work" || exit 1
out=$(cd "$out" && pwd) work=$(cd "$work" && pwd)  # absolute: the peer runs in its run folder
peer=$(cd "$peer" 2> /dev/null && pwd || echo "$peer")
rm -f "$out"/gpu_peer.json "$out"/peer-*.log "$out"/ours-*.json "$out"/ours.log
exec > >(tee "$out/gpu_peer.log") 2>&1
tee_pid=$!

allot() {  # seconds for the next step: its own limit, or what is left of TOTAL_S when that is less
    local left=$(( deadline - $(date +%s) ))
    echo $(( $1 < left ? $1 : left ))
}

device=${DEVICE:-$("$python" -c 'import torch; print("cuda" if torch.cuda.is_available() else "cpu")' 2>/dev/null || echo cpu)}
gpu=$("$python" -c 'import torch; print(torch.cuda.get_device_name() if torch.cuda.is_available() else "")' 2>/dev/null)
torch_version=$("$python" -c 'import torch; print(torch.__version__)' 2>/dev/null)
nvidia-smi -L 2>/dev/null || true
echo "python $("$python" -c 'import sys; print(sys.version.split()[0])'), torch ${torch_version:-none}, device $device${gpu:+ ($gpu)}, batch_tokens $batch, peer steps $steps"
if [ "$device" = cuda ]; then
    peer_precision="fp16 (OpenNMT-py's model_dtype: fp16, torch.cuda.amp autocast + GradScaler; 3.0.4 has no bf16)"
    quick=() sentences=${SENTENCES:-100}
else
    peer_precision=fp32 quick=(--quick) sentences=${SENTENCES:-4}
fi

peer_py="" peer_path=""
no_wheel() {  # after a failed pip install: which Pythons the carried wheels serve
    echo "pip install failed on Python $("$python" -c 'import sys; print(sys.version.split()[0])'); the wheels carried: $(ls "$peer/wheels" | tr '\n' ' ')(pyonmttok has no cp313 wheel)"
}
install_peer() {  # a venv over the image's python with the carried wheels, no index; prints PEER_INSTALLED
    local site loss install_s=${INSTALL_S:-60}
    [ -d "$peer/wheels" ] || { echo "no $peer/wheels: run bash scripts/gpu_peer.sh --prepare where PyPI can be reached and carry .peer"; return 1; }
    rm -rf "$work/venv" "$work/site" "$work/data"
    # no index, no configuration: only the carried wheels (a pip.conf's or PIP_* variables' indexes and
    # find-links are left out), and no dependencies (OpenNMT-py's torch pin and unused requirements)
    local pip_args=(install --no-index --no-deps --disable-pip-version-check --only-binary=:all:
        --find-links "$peer/wheels" "OpenNMT-py==$onmt_version" "configargparse==$configargparse_version"
        "pyonmttok==$pyonmttok_version" "rapidfuzz==$rapidfuzz_version")
    local pip=(env -u PIP_FIND_LINKS -u PIP_INDEX_URL -u PIP_EXTRA_INDEX_URL -u PIP_CONSTRAINT -u PIP_REQUIRE_VIRTUALENV
        PIP_CONFIG_FILE=/dev/null timeout "$(allot "$install_s")")
    if timeout "$(allot "$install_s")" "$python" -m venv --system-site-packages "$work/venv"; then
        peer_py=$work/venv/bin/python
        site=$("$peer_py" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])') || return 1
        # the image's python may itself be a venv, whose packages --system-site-packages does not reach
        "$python" -c 'import site; print("\n".join(site.getsitepackages() + [site.getusersitepackages()]))' \
            > "$site/_image_site_packages.pth"
        "${pip[@]}" "$peer_py" -m pip "${pip_args[@]}" || { no_wheel; return 1; }
    else
        echo "python -m venv failed (no ensurepip?): installing with the image's pip into $work/site instead"
        peer_py=$python peer_path=$work/site
        "${pip[@]}" "$python" -m pip "${pip_args[@]}" --target "$work/site" || { no_wheel; return 1; }
    fi
    PYTHONPATH=$peer_path${peer_path:+:}$PYTHONPATH "$peer_py" -c '
import onmt, onmt.bin.train, pyonmttok, torch
print("OpenNMT-py", onmt.__version__, "from", onmt.__file__)
print("torch", torch.__version__, "from", torch.__file__, "cuda", torch.cuda.is_available())' || return 1
    # 3.0.4 raises on global_attention none (a .view of a non-contiguous tensor); opennmt.sh's one-line fix
    loss=$(PYTHONPATH=$peer_path${peer_path:+:}$PYTHONPATH "$peer_py" -c 'import onmt.utils.loss as m; print(m.__file__)') || return 1
    sed -i 's/return _v\.view(-1, _v\.size(2))/return _v.reshape(-1, _v.size(2))/' "$loss"
    grep -q 'return _v.reshape(-1, _v.size(2))' "$loss" || { echo "the loss.py fix did not apply to $loss"; return 1; }
    mkdir -p "$work/data" && tar -xzf "$peer/data.tar.gz" -C "$work/data" || return 1
    echo PEER_INSTALLED
}

run_peer() {  # OpenNMT-py's model $1 (transformer | gru): its config from ../shared/peers' yaml, then its training
    local m=$1 run=$work/run-$1 limit
    rm -rf "$run" && mkdir -p "$run"
    case $m in
        transformer) sed -e "s#@DATA@#$work/data#g; s#@RUN@#$run#g; s#@RELPOS@#0#; s#@ABSPOS@#true#; s#@STEPS@#$steps#" \
            "$peer/peers/onmt_transformer.yaml" ;;
        gru) sed -e "s#@DATA@#$work/data#g; s#@RUN@#$run#g; s#@ATT@#mlp#; s#@STEPS@#$steps#" "$peer/peers/onmt_gru.yaml" ;;
    esac | sed -e "s/^batch_size: .*/batch_size: $batch/; s/^report_every: .*/report_every: $report_every/" > "$run/config.yaml"
    [ "$device" = cuda ] && printf 'gpu_ranks: [0]\nmodel_dtype: fp16\n' >> "$run/config.yaml"
    limit=$(allot "${PEER_S:-40}")
    if [ "$limit" -lt 15 ]; then echo "OpenNMT-py $m: skipped, under 15 s left for it (PEER_S, TOTAL_S)" | tee "$out/peer-$m.log"; return; fi
    echo "[$(date +%T)] OpenNMT-py $m: onmt_train for $steps steps or $limit s"
    (cd "$run" && PYTHONPATH=$peer_path${peer_path:+:}$PYTHONPATH timeout -s INT -k 15 "$limit" \
        "$peer_py" "$OLDPWD/scripts/gpu_peer.py" train config.yaml > "$out/peer-$m.log" 2>&1)
    echo "  exit $?; $(grep -cE 'tok/s' "$out/peer-$m.log") report lines; last: $(grep -E 'tok/s' "$out/peer-$m.log" | tail -n 1 | sed 's/.*Step/Step/')"
}

run_ours() {  # our run $1 of configs/bench.yaml (transformer | rnnsearch) through scripts/benchmark.py
    local limit
    limit=$(allot "${OURS_S:-80}")
    if [ "$limit" -lt 15 ]; then echo "ours $1: skipped, under 15 s left for it (OURS_S, TOTAL_S)" | tee -a "$out/ours.log"; return; fi
    echo "[$(date +%T)] ours $1: scripts/benchmark.py, at most $limit s"
    timeout -s INT -k 15 "$limit" "$python" scripts/benchmark.py --device "$device" --runs "$1" \
        --set "training.batch_tokens=$batch" --sentences "$sentences" ${quick[@]+"${quick[@]}"} --out "$out/ours-$1.json" \
        >> "$out/ours.log" 2>&1
    echo "  exit $?; $(grep -E "^ *$1 " "$out/ours.log" | head -n 1)"
}

echo "[$(date +%T)] installing OpenNMT-py $onmt_version from $peer (no index)"
install_peer > "$work/install.log" 2>&1
grep -v -E "FutureWarning|^  @custom_(fwd|bwd)$" "$work/install.log"  # torch 2.4+ warns about 3.0.4's torch.cuda.amp decorators
if grep -q PEER_INSTALLED "$work/install.log"; then
    run_peer transformer; run_ours transformer
    run_peer gru; run_ours rnnsearch
else
    echo "OpenNMT-py could not be installed (above); ours alone"
    run_ours transformer; run_ours rnnsearch
fi
"$python" scripts/gpu_peer.py report "$out" --install-log "$work/install.log" --device "$device" --gpu "$gpu" \
    --torch-version "$torch_version" --batch-tokens "$batch" --steps "$steps" --peer-precision "$peer_precision"
echo "written: $(ls "$out" | tr '\n' ' ')"
exec >&- 2>&-
wait "$tee_pid" 2> /dev/null  # gpu_peer.log whole before the command returns
exit 0
