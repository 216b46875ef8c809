"""Training and decoding speed against this machine's own matmul peak.

    python scripts/benchmark.py [--config configs/bench.yaml] [--runs RUN ...] [--set k=v ...] [--out FILE] [--quick]
        [--device auto] [--sentences N] [--trained DIR [--decode-only]]

Each phase runs in a fresh child process, so that each phase's peak resident memory is its own:
training of each run of the config (configs/bench.yaml: RNNsearch, RNNencdec and OpenNMT-py's small
Transformer) on real Bible batches (the trainer's length-bucketed token
batches of the run's pairs, training.max_words applied; forward, loss, backward, clip, the optimiser's
step, fused on CUDA as in training; target tokens/s after warm-up), then greedy and
beam-5 decoding of test sentences. MFU = achieved FLOP/s / the matmul peak (fp32 at the same thread
count; bf16 on CUDA, where training runs in bf16) measured in the same child right before and after
the timed work, so that a machine whose load drifts during the run still gives a ratio of two
measurements taken together. The FLOPs are the analytic count of nmt/flops.py at the real lengths:
padding is not useful work; in beam search every hypothesis computed counts.

Decoding uses the weights the training phase ends with unless `--trained DIR` names trained runs
(DIR/RUN for each run of the config; `--decode-only` then skips training): output lengths, and so decoding
speed, depend on the weights, which is why the JSON records the hypothesis/reference length ratio. Each
decoding phase also decodes a spread of its sources again one at a time with beam 5 and counts the
translations that come out as they did in their batch (batch invariance: `beam5_batch1_*`). `--profile` prints torch.profiler's top
operators of a few steps of each phase, by time and by the memory they allocate.

Any config with runs will do: `--config configs/converged.yaml --runs transformer-50 rnnsearch-50 rnnencdec-50`
measures at that recipe's batch (8,000 tokens), and `--set training.batch_tokens=24000` (parsed as `nmt`'s
--set, so it changes every run) at another; each run's batch_tokens, precision and whether its Adam was
fused are in the JSON. `--set training.compile=true` trains through torch.compile as the trainer does (a model
that compiles: nmt/training/compiling.py); its warm-up goes on until a step traces no new graph, so that compiling
stays out of the timed steps, and each run's JSON records `compile`, its warm-up steps and the graphs traced
while timed (0 when no batch of the timed steps needed a new one).
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from nmt.config import Config, load_config
from nmt.data.subwords import Tokenizer
from nmt.environment import describe_environment
from nmt.errors import NMTError
from nmt.fileio import atomic_write_text

from flops import SearchFlopCounter, training_flops  # scripts/flops.py, beside this benchmark

MFU_NOTE = (
    "each phase's mfu divides by that phase's own measured peak (mfu_peak_gflops: the best of the peaks "
    "measured in its process around its timed work, in the dtype it computes in, mfu_peak_dtype: training's "
    "precision, decoding's fp32), not by peak_gflops, the highest over all phases"
)
# Steady state: a few warm-up steps, then at least min_steps and min_seconds of timed steps.
DEFAULT_PLAN: dict[str, Any] = {
    "warmup_steps": 3,
    "min_steps": 10,
    "min_seconds": 30.0,
    "peak_seconds": 1.5,
    "peak_scale": 1.0,  # the peak's square matrices, as a fraction of 2048 (CPU) or 8192 (CUDA)
    "decode_sentences": 500,
    "batch1_sentences": 48,  # decoded again one at a time: the same translations as in their batches?
}
MAX_COMPILE_WARMUP = 20  # a compiled run warms up until a step traces no new graph, at most this many steps
QUICK_PLAN: dict[str, Any] = {
    "warmup_steps": 1,
    "min_steps": 2,
    "min_seconds": 0.0,
    "peak_seconds": 0.3,
    "peak_scale": 0.25,  # a rough peak: one 2048 product alone takes 0.2 s on one AMD EPYC core
    "decode_sentences": 32,
    "batch1_sentences": 4,
}


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def measure_peak_gflops(
    device: torch.device, seconds: float, scale: float = 1.0, dtype: torch.dtype | None = None
) -> float:
    """Best matmul rate (GFLOP/s) of large square products in `dtype`, the one the measured phase computes in
    (None: bf16 on CUDA, fp32 on a CPU; search computes in fp32, without TF32); `scale` shrinks their size."""
    size = 8192 if device.type == "cuda" else 2048
    dtype = dtype or (torch.bfloat16 if device.type == "cuda" else torch.float32)
    size = int(size * scale)
    a = torch.randn(size, size, device=device, dtype=dtype)
    b = torch.randn(size, size, device=device, dtype=dtype)
    best = 0.0
    torch.mm(a, b)  # first call: allocation and kernel choice
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        _sync(device)
        start = time.perf_counter()
        for _ in range(4 if device.type == "cuda" else 1):
            torch.mm(a, b)
        _sync(device)
        elapsed = (time.perf_counter() - start) / (4 if device.type == "cuda" else 1)
        best = max(best, 2.0 * size**3 / elapsed / 1e9)
    return best


def _device_peak_mb(device: torch.device) -> float:
    """The most GPU memory torch's allocator has held since its last reset (MiB); 0 on a CPU."""
    return torch.cuda.max_memory_allocated(device) / 2**20 if device.type == "cuda" else 0.0


def _peak_rss_mb() -> float:
    """This process's peak resident set size (ru_maxrss is in KiB on Linux, bytes on macOS)."""
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss / 2**20 if sys.platform == "darwin" else rss / 1024


def _setup_child(threads: int, seed: int) -> None:
    torch.set_num_threads(threads)
    torch.manual_seed(seed)


def traced_graphs() -> int:
    """Graphs torch.compile has traced in this process so far (dynamo's count, recompiles included)."""
    from torch._dynamo.utils import counters

    return int(counters["stats"]["unique_graphs"])


def _profile(fn: Any, device: torch.device, title: str) -> None:
    """Print torch.profiler's top operators of running `fn()`: by self time, then by the memory they
    allocate (what holds the peak: the saved activations of the largest operators)."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with profile(activities=activities, profile_memory=True) as prof:
        fn()
    events = prof.key_averages()
    sort = "self_cuda_time_total" if device.type == "cuda" else "self_cpu_time_total"
    memory = "self_cuda_memory_usage" if device.type == "cuda" else "self_cpu_memory_usage"
    print(f"\n=== profile: {title} ===\n{events.table(sort_by=sort, row_limit=18)}", flush=True)
    print(f"\n=== memory: {title} ===\n{events.table(sort_by=memory, row_limit=12)}", flush=True)


# ---- training -------------------------------------------------------------------------------------
def training_batches(config: Config) -> tuple[Any, list[list[int]], list[list[int]], list[list[int]]]:
    """The tokenizer, the training pairs as piece ids (sources, targets) and epoch 1 of their batches, all
    read by the trainer's own code (one process): the pairs of at most training.max_words words (a -50
    run's longest batches are not those of all pairs), length-sorted pools cut to the token budget, in
    shuffled order."""
    from nmt.training.data import load_training_data
    from nmt.training.distributed import DistContext

    alone = DistContext(0, 1, torch.device("cpu"))  # the batches do not depend on the device
    data = load_training_data(config, alone)
    return data.tokenizer, data.src, data.tgt, [batch.indices for batch in data.epoch_batches(1, alone)]


def largest_first(batches: list[list[int]], src: list[list[int]], tgt: list[list[int]]) -> list[list[int]]:
    """`batches` with the largest (sentences x longest source x longest target, what attention's saved
    activations grow with) moved to the front, the others in their order: a peak RSS measured from the
    first step is then the whole epoch's, not that of whichever batches a machine's timed window reached."""

    def size(batch: list[int]) -> int:
        return len(batch) * max(len(src[i]) for i in batch) * max(len(tgt[i]) for i in batch)

    largest = max(range(len(batches)), key=lambda k: size(batches[k]))
    return [batches[largest]] + batches[:largest] + batches[largest + 1 :]


def train_phase(
    config: Config, device_name: str, threads: int, plan: dict[str, Any], weights_path: str, profile: bool
) -> dict[str, Any]:
    """Child process: train steps on real batches; tokens/s and FLOPs of the timed steps, the matmul
    peak just before and after them, peak RSS."""
    from nmt.data.batching import make_batch, padding_fraction
    from nmt.models import build_model
    from nmt.rundir.loading import resolve_device
    from nmt.training.compiling import compiles, training_module
    from nmt.training.distributed import DistContext
    from nmt.training.optim import build_optimizer
    from nmt.training.precision import autocast, resolve_precision
    from nmt.training.queued_steps import QueuedSteps
    from nmt.training.validation import batch_loss_sum

    _setup_child(threads, config.training.seed)
    device = resolve_device(device_name)
    tok, src, tgt, batches = training_batches(config)
    batches = largest_first(batches, src, tgt)  # the peak RSS is the epoch's, on every machine
    model = build_model(config.model, tok.src_vocab_size, tok.tgt_vocab_size).to(device).train()
    recomputes = model.recompute_attention(config.training.recompute_attention)
    forward = training_module(model, config.training.compile)  # the model, or compiled as the trainer does
    compiled = compiles(config.training.compile, model)
    optimizer = build_optimizer(model.parameters(), config.training)
    amp = resolve_precision(config.training.precision, device)
    clip = config.training.clip_grad_norm if config.training.clip_grad_norm > 0 else float("inf")
    # each step's loss and gradient norm read a step later, as the trainer reads them (a diverged step is named)
    queued = QueuedSteps(DistContext(0, 1, device), Path(weights_path).parent, finite_norm=amp != torch.float16)
    steps = [0]

    def step(indices: list[int]) -> None:
        batch = make_batch([src[i] for i in indices], [tgt[i] for i in indices], indices).to(device)
        optimizer.zero_grad(set_to_none=True)
        with autocast(amp):  # the training loop's context: CUDA autocast to amp, none for fp32
            loss = batch_loss_sum(forward, batch, config.training.label_smoothing) / batch.n_tgt_tokens
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        optimizer.step()
        steps[0] += 1
        queued.append(steps[0], 1, loss, norm)
        queued.read(keep=1)

    def nth(k: int) -> list[int]:
        # a small training split has fewer batches than the plan's steps: go round the epoch again
        return batches[k % len(batches)]

    warmup = 0
    while True:  # compiled: until a step traces no new graph (tracing and compiling are not timed)
        before = traced_graphs()
        step(nth(warmup))
        warmup += 1
        if warmup >= plan["warmup_steps"] and (not compiled or traced_graphs() == before or warmup >= MAX_COMPILE_WARMUP):
            break
    warmup_memory = _device_peak_mb(device)  # before the matmul probe's buffers (three of 8192^2 on a GPU)
    peak_dtype = amp or torch.float32  # the products' dtype under the run's precision
    peaks = [measure_peak_gflops(device, plan["peak_seconds"], plan["peak_scale"], peak_dtype)]
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)  # the probe's are no training's
    timed: list[list[int]] = []
    graphs_before_timing = traced_graphs()
    start = time.perf_counter()
    while len(timed) < plan["min_steps"] or (
        time.perf_counter() - start < plan["min_seconds"] and len(timed) < len(batches) - warmup
    ):
        timed.append(nth(warmup + len(timed)))
        step(timed[-1])
    _sync(device)
    seconds = time.perf_counter() - start
    queued.drain()  # the last timed step's values too, after the clock: a step that diverged is named
    graphs_while_timed = traced_graphs() - graphs_before_timing
    device_memory = max(warmup_memory, _device_peak_mb(device))  # warm-up's and the timed steps', no probe's
    peaks.append(measure_peak_gflops(device, plan["peak_seconds"], plan["peak_scale"], peak_dtype))
    if profile:
        _profile(
            lambda: [step(nth(warmup + len(timed) + k)) for k in range(3)],
            device,
            f"training {model.name}",
        )
    src_lens = [len(src[i]) + 1 for b in timed for i in b]  # + EOS
    tgt_lens = [len(tgt[i]) + 1 for b in timed for i in b]  # predicted tokens incl. EOS
    tokens = sum(tgt_lens)
    flops = training_flops(config.model, tok.tgt_vocab_size, src_lens, tgt_lens)
    torch.save(model.state_dict(), weights_path)
    return {
        "tgt_tokens_per_s": tokens / seconds,
        "flops_per_token": flops / tokens,
        "achieved_gflops": flops / seconds / 1e9,
        "mfu": flops / seconds / 1e9 / max(peaks),
        "mfu_peak_gflops": max(peaks),
        "mfu_peak_dtype": str(peak_dtype).replace("torch.", ""),
        "peak_gflops_before_after": peaks,
        "steps": len(timed),
        "seconds": seconds,
        "tgt_tokens_per_batch": tokens / len(timed),
        "padding_fraction": padding_fraction(timed, [len(s) for s in src], [len(t) for t in tgt]),
        "precision": str(amp).replace("torch.", "") if amp is not None else "fp32",
        "batch_tokens": config.training.batch_tokens,
        "max_words": config.training.max_words,
        "optimizer": config.training.optimizer,
        "optimizer_fused": bool(optimizer.defaults.get("fused")),  # Adadelta has no fused kernel (no key)
        "compile": compiled,  # what ran: RNNencdec asked to compile on CUDA trains eagerly (nmt/training/compiling.py)
        "recompute_attention": recomputes and config.training.recompute_attention,  # what ran: additive attention only
        "warmup_steps": warmup,
        "graphs_traced_while_timed": graphs_while_timed,
        "peak_rss_mb": _peak_rss_mb(),
        **({"peak_device_mb": device_memory} if device.type == "cuda" else {}),
    }


# ---- decoding -------------------------------------------------------------------------------------
def decoding_sample(config: Config, tok: Tokenizer, sentences: int) -> tuple[list[str], int]:
    """The test sources the decoding phase translates (scripts/peer_translate.py too): `sentences` of them
    spread over the split's order, sorted by their length in pieces as `nmt translate` batches them; and
    their references' length in target pieces, EOS included."""
    from nmt.data.prepared import load_prepared

    pairs = load_prepared(config.data).pairs("test")
    chosen = pairs[:: max(1, len(pairs) // sentences)][:sentences]
    sources = sorted((s for s, _ in chosen), key=lambda s: len(tok.encode_src(s)))
    return sources, sum(len(tok.encode_tgt(t)) + 1 for _, t in chosen)


def decode_phase(
    config: Config,
    run: str,
    device_name: str,
    threads: int,
    plan: dict[str, Any],
    weights_path: str,
    weights_label: str,
    trained_dir: str,
    profile: bool,
) -> dict[str, Any]:
    """Child process: greedy and beam search over test sentences; sentences/s, tokens/s, FLOPs, peak RSS."""
    from nmt.data.batching import make_source_batch
    from nmt.data.prepared import load_prepared
    from nmt.decoding.search import beam_search, greedy_search, max_output_lengths
    from nmt.models import build_model
    from nmt.rundir.loading import load_run, resolve_device

    _setup_child(threads, config.training.seed)
    device = resolve_device(device_name)
    if trained_dir:
        loaded = load_run(Path(trained_dir) / run, device=device_name)
        model, tok, weights = loaded.model, loaded.tokenizer, str(loaded.checkpoint)
        model_config = loaded.config.model  # the trained run's sizes, which the FLOP count must follow
    else:
        model_config = config.model
        tok = load_prepared(config.data).tokenizer
        model = build_model(config.model, tok.src_vocab_size, tok.tgt_vocab_size)
        model.load_state_dict(torch.load(weights_path, map_location="cpu"))
        model.to(device)
        weights = weights_label
    sources, ref_tokens = decoding_sample(config, tok, plan["decode_sentences"])
    src = [tok.encode_src(s) for s in sources]
    dc = config.decoding
    batches = [make_source_batch(src[i : i + dc.batch_size]) for i in range(0, len(src), dc.batch_size)]
    counting = SearchFlopCounter(model, model_config, tok.tgt_vocab_size)

    def search(beam: int, only: list[tuple[Tensor, Tensor]], outputs_seen: list[list[int]] | None = None) -> int:
        """Decode the batches `only`; the target tokens produced (EOS included). The translations (best
        hypothesis, or greedy output) are appended to `outputs_seen` where given."""
        produced = 0
        for ids, lengths in only:
            limits = max_output_lengths(lengths, dc.max_length_ratio, dc.max_length_offset)
            ids, lengths_dev = ids.to(device), lengths.to(device)
            if beam == 1:
                outputs = greedy_search(counting, ids, lengths_dev, limits, dc.min_length)
            else:
                outputs = [
                    h[0].tokens
                    for h in beam_search(
                        counting, ids, lengths_dev, beam, limits, dc.length_penalty, dc.alpha, min_length=dc.min_length
                    )
                ]
            produced += sum(len(o) + 1 for o in outputs)  # + EOS
            if outputs_seen is not None:
                outputs_seen.extend(list(o) for o in outputs)
        _sync(device)
        return produced

    result: dict[str, Any] = {"weights": weights, "sentences": len(src)}
    peaks = []
    batched: list[list[int]] = []
    for name, beam in (("greedy", 1), ("beam5", 5)):
        search(beam, batches[:1])  # warm-up
        peaks.append(measure_peak_gflops(device, plan["peak_seconds"], plan["peak_scale"], torch.float32))
        counting.flops = 0.0
        start = time.perf_counter()
        produced = search(beam, batches, batched if beam == 5 else None)
        seconds = time.perf_counter() - start
        result[f"{name}_sent_per_s"] = len(src) / seconds
        result[f"{name}_tok_per_s"] = produced / seconds
        result[f"{name}_flops"] = counting.flops
        result[f"{name}_achieved_gflops"] = counting.flops / seconds / 1e9
        result[f"{name}_length_ratio"] = produced / ref_tokens
        if profile:
            _profile(lambda b=beam: search(b, batches[len(batches) // 2 :][:1]), device, f"{name} {run}")
    # an empty output is no translation: rates over them say little, and two empty ones are alike whatever the batch
    result["beam5_empty_outputs"] = sum(not output for output in batched)
    result |= batch1_check(search, src, batched, plan["batch1_sentences"])
    peaks.append(measure_peak_gflops(device, plan["peak_seconds"], plan["peak_scale"], torch.float32))
    for name in ("greedy", "beam5"):
        result[f"{name}_mfu"] = result[f"{name}_achieved_gflops"] / max(peaks)
    result["mfu_peak_gflops"] = max(peaks)
    result["mfu_peak_dtype"] = "float32"  # search computes in fp32, TF32 off (nmt/decoding/search.py)
    result["peak_gflops_around"] = peaks
    result["peak_rss_mb"] = _peak_rss_mb()
    return result


def batch1_check(search: Any, src: list[list[int]], batched: list[list[int]], count: int) -> dict[str, Any]:
    """Beam 5 again for `count` of the sources `src` (spread from the shortest to the longest), each in a
    batch of its own: how many translations are the ones their batch gave (`batched`, in `src`'s order)."""
    from nmt.data.batching import make_source_batch

    count = min(count, len(src))
    chosen = sorted({round(i * (len(src) - 1) / max(count - 1, 1)) for i in range(count)})
    alone: list[list[int]] = []
    search(5, [make_source_batch([src[i]]) for i in chosen], alone)
    differ = [i for i, output in zip(chosen, alone, strict=True) if output != batched[i]]
    return {"beam5_batch1_checked": len(chosen), "beam5_batch1_identical": len(chosen) - len(differ),
            "beam5_batch1_differ": differ, "beam5_batch1_empty": sum(not batched[i] for i in chosen)}


# ---- the run --------------------------------------------------------------------------------------
def in_child(fn: Any, *args: Any) -> dict[str, Any]:
    """Run fn(*args) in a fresh (spawned) process, so that its peak RSS is its own."""
    with ProcessPoolExecutor(max_workers=1, mp_context=get_context("spawn")) as pool:
        return pool.submit(fn, *args).result()


def machine_info(device: torch.device, threads: int) -> dict[str, Any]:
    """What the figures were measured on."""
    return {**describe_environment(device), "threads": threads, "device": device.type}


def format_table(report: dict[str, Any]) -> str:
    """The JSON's figures as a plain-text table."""
    peak = report["peak_gflops"]
    name = max([11, *(len(run) + 1 for run in [*report["train"], *report["decode"]])])  # converged.yaml's names run to 23 characters
    lines = [
        f"peak matmul: {peak:.0f} GFLOP/s at best ({report['machine']['device']}, "
        f"{report['machine']['threads']} threads, torch {report['torch']})",
        f"note: {report['mfu_note']}",
    ]
    if report["train"]:  # none with --decode-only
        lines += [
            "",
            f"{'training':<{name}}{'tgt tok/s':>11}{'MFLOP/tok':>11}{'MFU':>7}{'padding':>9}{'batch':>7}"
            f"{'precision':>10}{'fused':>6}{'RSS MB':>9}",
        ]
    for run, t in report["train"].items():
        lines.append(
            f"{run:<{name}}{t['tgt_tokens_per_s']:>11,.0f}{t['flops_per_token'] / 1e6:>11.1f}"
            f"{t['mfu']:>7.3f}{t['padding_fraction']:>9.2f}{t['batch_tokens']:>7}{t['precision']:>10}"
            f"{'yes' if t['optimizer_fused'] else 'no':>6}{t['peak_rss_mb']:>9.0f}"
        )
    lines += [
        "",
        f"{'decoding':<{name}}{'greedy sent/s':>14}{'tok/s':>8}{'MFU':>7}{'beam5 sent/s':>14}"
        f"{'tok/s':>8}{'MFU':>7}{'len g/b':>10}{'batch 1':>9}{'RSS MB':>9}",
    ]
    for run, d in report["decode"].items():
        ratios = f"{d['greedy_length_ratio']:.2f}/{d['beam5_length_ratio']:.2f}"
        alone = f"{d['beam5_batch1_identical']}/{d['beam5_batch1_checked']}" + (
            f" ({d['beam5_batch1_empty']} empty)" if d.get("beam5_batch1_empty") else "")
        lines.append(
            f"{run:<{name}}{d['greedy_sent_per_s']:>14.1f}{d['greedy_tok_per_s']:>8.0f}{d['greedy_mfu']:>7.3f}"
            f"{d['beam5_sent_per_s']:>14.1f}{d['beam5_tok_per_s']:>8.0f}{d['beam5_mfu']:>7.3f}"
            f"{ratios:>10}{alone:>9}{d['peak_rss_mb']:>9.0f}"
        )
    lines += [f"{run}: {d['beam5_empty_outputs']} of {d['sentences']} beam-5 outputs empty (weights trained too little): "
              "its rates and its batch-1 check say little" for run, d in report["decode"].items()
              if d.get("beam5_empty_outputs")]
    weights = {d["weights"] for d in report["decode"].values()}
    lines += [
        "",
        f"decoded with weights: {', '.join(sorted(weights))}; len g/b: output / reference target tokens; "
        "batch 1: beam-5 translations alike decoded alone / checked",
    ]
    return "\n".join(lines)


def measurement_plan(quick: bool, sentences: int | None) -> dict[str, Any]:
    """QUICK_PLAN or DEFAULT_PLAN, decoding `sentences` test sentences where given (with --quick too)."""
    plan = QUICK_PLAN if quick else DEFAULT_PLAN
    return plan if sentences is None else {**plan, "decode_sentences": sentences}


def run_benchmark(args: argparse.Namespace) -> dict[str, Any]:
    """All phases; the report: the matmul peak, each run's training and decoding, the machine and the settings."""
    from nmt.data.prepare import prepare
    from nmt.rundir.loading import resolve_device

    config = load_config(args.config, args.set)
    runs = list(config.only_runs(args.runs, str(args.config)).runs if args.runs else config.runs)
    if not runs:
        raise NMTError(
            f"{args.config} defines no runs: the benchmark measures each run of its config.",
            "Use configs/bench.yaml (RNNsearch, RNNencdec, Transformer), or add runs to the config.",
        )
    if args.decode_only and args.trained is None:
        raise NMTError("--decode-only decodes trained runs: it needs --trained DIR.",
                       "Pass the folder holding the runs (e.g. EXPERIMENT/runs), or leave out --decode-only.")
    if args.trained is not None:
        absent = [
            str(args.trained / run) for run in runs if not (args.trained / run / "config.yaml").is_file()
        ]
        if absent:
            raise NMTError(
                f"--trained {args.trained}: no trained run in {', '.join(absent)}.",
                f"Pass the folder holding the runs {', '.join(runs)} (e.g. EXPERIMENT/runs), or a --config "
                "whose runs are the trained ones.",
            )
    device = resolve_device(args.device)
    threads = args.threads or torch.get_num_threads()
    torch.set_num_threads(threads)
    prepare(config.data)  # once here, not raced by the children
    plan = measurement_plan(args.quick, args.sentences)
    train: dict[str, Any] = {}
    decode: dict[str, Any] = {}
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="nmt-bench-") as tmp:
        for run in runs if not args.decode_only else []:
            print(f"[{time.perf_counter() - started:4.0f}s] training {run} ...", flush=True)
            train[run] = in_child(
                train_phase,
                config.for_run(run),
                str(device),
                threads,
                plan,
                str(Path(tmp) / f"{run}.pt"),
                args.profile,
            )
            print(f"  {run} training: {json.dumps(train[run])}", flush=True)  # kept should a time limit cut the rest
        for run in runs:
            print(f"[{time.perf_counter() - started:4.0f}s] decoding {run} ...", flush=True)
            label = "" if args.decode_only else (
                f"the benchmark's own training ({train[run]['warmup_steps'] + train[run]['steps']} steps)")
            decode[run] = in_child(
                decode_phase,
                config.for_run(run),
                run,
                str(device),
                threads,
                plan,
                str(Path(tmp) / f"{run}.pt"),
                label,
                args.trained or "",
                args.profile,
            )
            print(f"  {run} decoding: {json.dumps(decode[run])}", flush=True)
    peaks = [p for t in train.values() for p in t["peak_gflops_before_after"]]
    peaks += [p for d in decode.values() for p in d["peak_gflops_around"]]
    return {
        "peak_gflops": max(peaks),
        "mfu_note": MFU_NOTE,
        "train": train,
        "decode": decode,
        "machine": machine_info(device, threads),
        "torch": torch.__version__,
        "seconds": time.perf_counter() - started,
        "settings": {
            "config": str(args.config),
            "overrides": list(args.set),
            "recompute_attention": config.training.recompute_attention,
            "quick": args.quick,
            "decode_only": args.decode_only,
            **plan,
            "batch_tokens": config.training.batch_tokens,
            "decode_batch_size": config.decoding.batch_size,
        },
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", type=Path, default=Path("configs/bench.yaml"))
    parser.add_argument("--out", type=Path, default=Path("benchmark.json"), help="JSON report path")
    parser.add_argument("--quick", action="store_true", help="a rough run in under a minute")
    parser.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    parser.add_argument("--threads", type=int, default=0, help="torch threads (default: torch's own choice)")
    parser.add_argument(
        "--sentences", type=int, default=None,
        help=f"test sentences to decode (default {DEFAULT_PLAN['decode_sentences']}, "
        f"with --quick {QUICK_PLAN['decode_sentences']})",
    )
    parser.add_argument("--runs", nargs="+", metavar="RUN", help="the config's runs to measure (default: every run)")
    parser.add_argument(
        "--trained",
        type=Path,
        default=None,
        help="folder holding a trained run of each of the config's runs (DIR/RUN) to decode with",
    )
    parser.add_argument("--decode-only", action="store_true", help="decode the --trained runs only, no training phase")
    parser.add_argument("--profile", action="store_true", help="print torch.profiler tables per phase")
    parser.add_argument(
        "--set", action="append", default=[], metavar="SECTION.KEY=VALUE",
        help="override a config key (repeatable), e.g. --set training.recompute_attention=true",
    )
    args = parser.parse_args(argv)
    try:
        report = run_benchmark(args)
    except NMTError as error:
        print(f"benchmark: error: {error.message}", file=sys.stderr)
        if error.hint:
            print(error.hint, file=sys.stderr)
        return 2
    atomic_write_text(args.out, json.dumps(report, indent=2) + "\n")
    print("\n" + format_table(report) + f"\n\nwritten to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
