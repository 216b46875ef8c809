"""Decoding speed of OpenNMT-py's `onmt_translate` on the sentences `scripts/benchmark.py` decodes.

    python scripts/peer_translate.py PEER_MODEL [--onmt-translate PATH] [--config configs/bench.yaml]
        [--sentences 500] [--out FILE]

PEER_MODEL: a model `../shared/peers/opennmt.sh WORK STEPS transformer` trained (WORK/run-transformer/
model_step_STEPS.pt). The test sources are the benchmark's own (the same sentences, in the same length order),
written as the project's sentencepiece pieces, which the peer was trained on; the search is the benchmark's:
beam 5, its batch size in sentences, the GNMT length penalty (OpenNMT-py's `wu`) with the same alpha, and no
output cut shorter than ours (the longest of our per-sentence limits). Prints sentences/s and target tokens/s
(EOS counted, as the benchmark counts) over onmt_translate's own translation time (model loading left out, as
the benchmark leaves it out), the hypothesis/reference length ratio and the process's peak RSS. Run it right
before or after `python scripts/benchmark.py --runs transformer --trained DIR` on the same machine: only
a ratio measured together means anything.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmark import decoding_sample  # scripts/benchmark.py, beside this script

from nmt.config import load_config
from nmt.data.prepared import load_prepared


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("peer_model", type=Path, help="an OpenNMT-py model checkpoint (.pt)")
    parser.add_argument("--onmt-translate", default="onmt_translate", help="the peer's onmt_translate command")
    parser.add_argument("--config", type=Path, default=Path("configs/bench.yaml"))
    parser.add_argument("--sentences", type=int, default=500, help="test sentences to decode")
    parser.add_argument("--out", type=Path, default=Path("peer-translate.json"), help="JSON report path")
    args = parser.parse_args(argv)
    config = load_config(args.config, [])
    tok = load_prepared(config.data).tokenizer
    sources, ref_tokens = decoding_sample(config, tok, args.sentences)
    dc = config.decoding
    longest = max(int(len(tok.encode_src(s)) * dc.max_length_ratio) + dc.max_length_offset for s in sources)
    with tempfile.TemporaryDirectory(prefix="nmt-peer-") as tmp:
        src, hyp = Path(tmp) / "src.sp", Path(tmp) / "hyp.sp"
        src.write_text("".join(" ".join(tok.src_pieces(s)) + "\n" for s in sources), encoding="utf-8")
        command = [
            "/usr/bin/time", "-v", args.onmt_translate, "-model", str(args.peer_model), "-src", str(src),
            "-output", str(hyp), "-beam_size", "5", "-batch_size", str(dc.batch_size),
            "-batch_type", "sents", "-length_penalty", "wu", "-alpha", str(dc.alpha),
            "-max_length", str(longest), "-min_length", str(dc.min_length), "-report_time",
        ]
        # OpenNMT-py 3.0.4 predates torch 2.6's weights-only torch.load, which refuses its checkpoints' argparse
        # options; the checkpoint is one the peer script just trained here, so the full load is safe
        env = {**os.environ, "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD": "1"}
        done = subprocess.run(command, capture_output=True, text=True, env=env)
        if done.returncode != 0:
            print(done.stderr[-4000:], file=sys.stderr)
            print(f"peer_translate: error: {args.onmt_translate} exited with {done.returncode}", file=sys.stderr)
            return 1
        produced = sum(len(line.split()) + 1 for line in hyp.read_text(encoding="utf-8").splitlines())
    seconds = float(re.search(r"Total translation time \(s\): ([0-9.]+)", done.stderr).group(1))
    rss_kb = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", done.stderr).group(1))
    report = {
        "peer_model": str(args.peer_model),
        "sentences": len(sources),
        "batch_size": dc.batch_size,
        "alpha": dc.alpha,
        "max_length": longest,
        "seconds": seconds,
        "beam5_sent_per_s": len(sources) / seconds,
        "beam5_tok_per_s": produced / seconds,
        "beam5_length_ratio": produced / ref_tokens,
        "peak_rss_mb": rss_kb / 1024,
    }
    args.out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(f"OpenNMT-py beam 5: {report['beam5_sent_per_s']:.1f} sent/s, {report['beam5_tok_per_s']:.0f} "
          f"tok/s, length ratio {report['beam5_length_ratio']:.2f}, peak RSS {report['peak_rss_mb']:.0f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
