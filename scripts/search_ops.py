"""How many operations a step of search runs: the model's `decode_step` against search's own bookkeeping.

    python scripts/search_ops.py [--device cpu|cuda] [--sentences 64] [--beam 5]

On a GPU, decoding models of this size is bound by one kernel launch after another (docs/performance.md), so a
step's launches are its cost. Seeded tiny models of each kind (hidden 32, 100 words: the arithmetic is
negligible), `--sentences` random sources of 20 tokens, outputs limited to 40 tokens. On CUDA it counts kernel
launches (the profiler's cudaLaunchKernel calls); on a CPU the operators that do work (aten operators that call
no other working operator; views and allocations left out), which is what a launch would be. The encoder and
the initial state are counted apart (once per batch, not per step).
"""

from __future__ import annotations

import argparse
import bisect
import collections
from collections.abc import Callable
from typing import Any

import torch
from torch.autograd.profiler_util import FunctionEvent
from torch.profiler import ProfilerActivity, profile, record_function

from nmt.config_sections import ModelConfig
from nmt.decoding.search import beam_search, greedy_search
from nmt.models import build_model
from nmt.special import EOS_ID

MODELS = {
    "transformer": {"architecture": "transformer", "embedding_size": 32, "hidden_size": 32, "feedforward_size": 64,
                    "heads": 4, "layers": 3},
    "rnnsearch": {"embedding_size": 32, "hidden_size": 32, "attention_size": 32, "maxout_size": 32},
    "rnnencdec": {"embedding_size": 32, "hidden_size": 32, "maxout_size": 32, "attention": "none"},
}
PHASES = ("decode_step", "encode")
# operators that launch no kernel: views, allocations, host-side scalars, and those that hand back their input
# (dropout in eval mode; resolving a conjugate or negative bit the tensor does not have)
NO_WORK = ("view", "expand_as", "as_strided", "slice", "select", "unsqueeze", "squeeze", "expand", "transpose", "permute", "alias",
           "detach", "reshape", "unbind", "split", "split_with_sizes", "chunk", "unflatten", "flatten", "_unsafe_view",
           "narrow", "lift_fresh", "_local_scalar_dense", "scalar_tensor", "empty", "t", "item", "result_type", "promote_types",
           "is_nonzero", "to", "_to_copy", "resize", "contiguous", "resolve_conj", "resolve_neg", "dropout")


def _works(event: FunctionEvent) -> bool:
    name = event.name.removeprefix("aten::")
    return event.name.startswith("aten::") and name.rstrip("_") not in NO_WORK and not name.startswith("empty")


def _is_launch(event: FunctionEvent, device: str) -> bool:
    if device == "cuda":  # the CUDA runtime's calls, which the profiler records on the host
        return event.name.startswith(("cudaLaunchKernel", "cuLaunchKernel", "cudaMemcpyAsync", "cudaMemsetAsync"))
    return _works(event) and not any(_works(child) for child in event.cpu_children)


def _phases(events: list[FunctionEvent]) -> Callable[[FunctionEvent], str]:
    """-> the phase an event ran in: decode_step or encode (the record_function ranges, by host time), else
    search's own. By time rather than by parent: a runtime call need not hang under the operator that made it."""
    ranges = sorted((e.time_range.start, e.time_range.end, e.name) for e in events if e.name in PHASES)
    starts = [start for start, _, _ in ranges]

    def phase(event: FunctionEvent) -> str:
        i = bisect.bisect_right(starts, event.time_range.start) - 1
        inside = i >= 0 and event.time_range.start <= ranges[i][1]
        return ranges[i][2] if inside else "search"

    return phase


def _labelled(method: Callable[..., Any], label: str) -> Callable[..., Any]:
    def run(*args: Any, **kwargs: Any) -> Any:
        with record_function(label):
            return method(*args, **kwargs)

    return run


def count(name: str, search: str, device: str, sentences: int, beam: int) -> tuple[int, dict[str, float]]:
    """-> (steps, launches per step in decode_step and in search; encode's per batch)."""
    torch.manual_seed(0)
    model = build_model(ModelConfig(**MODELS[name]), 100, 100).to(device).eval()
    src = torch.randint(4, 100, (sentences, 20), device=device)
    src[:, -1] = EOS_ID
    lengths, limits = torch.full((sentences,), 20), torch.full((sentences,), 40)
    calls = collections.Counter()
    decode_step, init_state, encode = model.decode_step, model.init_state, model.encode

    def counted_step(*args: Any) -> Any:
        calls["steps"] += 1
        return decode_step(*args)

    model.decode_step = _labelled(counted_step, "decode_step")
    model.encode, model.init_state = _labelled(encode, "encode"), _labelled(init_state, "encode")

    def run() -> None:
        if search == "beam":
            beam_search(model, src, lengths.to(device), beam, limits.to(device))
        else:
            greedy_search(model, src, lengths.to(device), limits.to(device))

    run()  # warm-up: first calls allocate and choose kernels
    calls.clear()
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    with profile(activities=activities) as profiler:
        run()
    events = list(profiler.events())
    phase = _phases(events)
    launches = collections.Counter(phase(e) for e in events if _is_launch(e, device))
    steps = calls["steps"]
    return steps, {"decode_step": launches["decode_step"] / steps, "search": launches["search"] / steps,
                   "encode": launches["encode"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--sentences", type=int, default=64)
    parser.add_argument("--beam", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(f"{args.sentences} sentences, beam {args.beam}, on {args.device}: "
          f"{'kernel launches' if args.device == 'cuda' else 'working operators'} per step")
    print("| model | search | steps | decode_step | search | encode (once) |\n|---|---|---:|---:|---:|---:|")
    for name in MODELS:
        for search in ("greedy", "beam"):
            steps, per = count(name, search, args.device, args.sentences, args.beam)
            print(f"| {name} | {search} | {steps} | {per['decode_step']:.1f} | {per['search']:.1f} | {per['encode']:.0f} |")


if __name__ == "__main__":
    main()
