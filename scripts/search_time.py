"""Seconds of search with a seeded, untrained model of one run of a config on the longest test verses.

    python scripts/search_time.py [--config configs/converged.yaml] [--run transformer-50] [--sentences 96]
        [--beam 5] [--threads 2] [--set section.key=value ...]

What search itself costs at long outputs, where the Transformer's cache of the steps so far is largest, without
training a model first: the run's model with seed 1's initial weights, the `--sentences` longest verses of the
prepared test split (prepared first if need be) in one batch, each output limited to its source length + 2 (an
untrained model seldom ends a sentence, so most run to that limit). Prints seconds and output tokens; an A/B of
two commits runs it from each checkout in turn (PYTHONPATH), alone on the machine.
"""

from __future__ import annotations

import argparse
import time

import torch

from nmt.config import Config, load_config
from nmt.data.batching import make_source_batch
from nmt.data.prepared import load_prepared
from nmt.decoding.search import beam_search, greedy_search
from nmt.models import build_model


def time_search(config: Config, sentences: int, beam: int) -> tuple[float, list[list[int]], list[int]]:
    """-> seconds of the search, the best output of each of the `sentences` longest test sources (longest
    first), and those sources' lengths in pieces (EOS included)."""
    data = load_prepared(config.data)
    torch.manual_seed(1)
    model = build_model(config.model, data.tokenizer.src_vocab_size, data.tokenizer.tgt_vocab_size).eval()
    sources = [data.tokenizer.encode_src(src) for src, _ in data.pairs("test")]
    src, lengths = make_source_batch(sorted(sources, key=len, reverse=True)[:sentences])
    with torch.no_grad():
        start = time.perf_counter()
        if beam == 1:
            outputs = greedy_search(model, src, lengths, lengths + 2)
        else:
            outputs = [hyps[0].tokens for hyps in beam_search(model, src, lengths, beam, lengths + 2)]
        return time.perf_counter() - start, outputs, lengths.tolist()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--config", default="configs/converged.yaml")
    parser.add_argument("--run", default="transformer-50")
    parser.add_argument("--sentences", type=int, default=96)
    parser.add_argument("--beam", type=int, default=5, help="1: greedy search (default 5)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    config = load_config(args.config, args.set).for_run(args.run)
    seconds, outputs, _ = time_search(config, args.sentences, args.beam)
    print(f"{args.run}, beam {args.beam}, the {len(outputs)} longest test verses: {seconds:.2f} s, "
          f"{sum(map(len, outputs)):,} output tokens")


if __name__ == "__main__":
    main()
