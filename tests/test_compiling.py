"""nmt.training.compiling (training.compile): a Transformer trained through torch.compile, and an RNN whose decoder
steps are compiled, train as the eager ones, their checkpoints are the eager ones' and resume eagerly; DDP wraps
the compiled module; an RNN's step function is traced a bounded number of times over batches of every shape, and
only the training step calls it (validation and search stay eager); a model with nothing to compile (RNNencdec
whose decoder is one fused cuDNN call) trains eagerly and says so.

On the CPU the compiled runs use torch.compile's "eager" backend: dynamo traces the forward as training does (the
graph, its break at the output layer, its guards, the wrapping) and runs the graph with torch's own operators, in a
few seconds, where inductor's C++ build of even the tiny model took tens of seconds per graph on the 2-core machine
(busy with another job then). The inductor kernels themselves are checked on CUDA (scripts/gpu_check.sh runs the
`cuda` tests).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist
from torch._dynamo.utils import counters
from torch.nn.parallel import DistributedDataParallel

from nmt.config import Config, config_from_dict
from nmt.config_sections import ModelConfig
from nmt.data.batching import Batch, make_batch
from nmt.decoding.search import beam_search, greedy_search
from nmt.models import build_model
from nmt.models.rnn.model import Seq2Seq
from nmt.training.compiling import compile_fallback, compiles, training_module
from nmt.training.trainer import train
from nmt.training.validation import batch_loss_sum
from tests.helpers import TINY_TRANSFORMER, final_state, needs_cuda, reverse_task_config

RNN = {"embedding_size": 16, "hidden_size": 32, "attention_size": 32, "maxout_size": 16}
# the RNNs whose training steps compile (RNNencdec on the CPU, where its decoder steps), with dropout: outside the
# step functions, it draws the same masks compiled or not
STEPPED = {
    "rnnsearch-gru": {**RNN, "dropout": 0.1},
    "rnnsearch-lstm": {**RNN, "dropout": 0.1, "cell": "lstm"},
    "rnnencdec": {**RNN, "dropout": 0.1, "attention": "none"},
}


@pytest.fixture(scope="module")
def data_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("reverse_data")


@pytest.fixture
def traced_only() -> Iterator[None]:
    """torch.compile's default backend "eager" for the test (see the module's docstring), dynamo's caches empty
    before and after, so that no earlier test's graphs or recompile count carry over."""
    torch.compiler.reset()
    torch.compiler.set_default_backend("eager")
    try:
        yield
    finally:
        torch.compiler.set_default_backend(None)  # inductor again
        torch.compiler.reset()


def traced_graphs() -> int:
    return int(counters["stats"]["unique_graphs"])


def config_of(data_root: Path, model: dict[str, Any], **training: Any) -> Config:
    """Six steps of 300-token batches at a constant rate, a loss logged per step, validated and checkpointed every
    3 steps (so that a 3-step run is the first half of a 6-step one, and resumes to it)."""
    settings = {"max_steps": 6, "validate_every": 3, "checkpoint_every": 3, "log_every": 1, "warmup_steps": 0,
                "lr_schedule": "constant", "learning_rate": 0.001, "batch_tokens": 300, "valid_max_sentences": 8,
                **training}
    return reverse_task_config(data_root, n_train=200, min_len=4, max_len=8, model=model, training=settings)


def changed(config: Config, **training: Any) -> Config:
    raw = config.to_dict()
    raw["training"].update(training)
    return config_from_dict(raw)


def step_losses(run_dir: Path) -> list[float]:
    events = [json.loads(line) for line in (run_dir / "log.jsonl").read_text().splitlines()]
    return [e["loss"] for e in events if e["event"] == "train"]


def check_compiled_against_eager(config: Config, tmp_path: Path, rel: float, atol: float | None) -> int:
    """A 6-step eager run; a 3-step compiled run, then resumed eagerly to step 6: the same losses step by step
    (within `rel`), the same weights (within `atol`; None: not compared), checkpoints of the same keys. Returns
    the graphs traced."""
    eager = train(config, tmp_path / "eager")
    before = traced_graphs()
    half = train(changed(config, compile=True, max_steps=3), tmp_path / "compiled")
    graphs = traced_graphs() - before
    assert (eager["compile"], half["compile"]) == (False, True)
    assert json.loads((tmp_path / "compiled" / "summary.json").read_text())["compile"] is True
    losses = step_losses(tmp_path / "eager")
    assert len(losses) == 6 and step_losses(tmp_path / "compiled") == pytest.approx(losses[:3], rel=rel)
    ours, theirs = final_state(tmp_path / "compiled", 3)["model"], final_state(tmp_path / "eager", 3)["model"]
    assert list(ours) == list(theirs)  # the same keys in the same order: no "_orig_mod." prefix
    assert_weights_close(ours, theirs, atol)

    resumed = train(config, tmp_path / "compiled", resume=True)  # compile and max_steps may change on resume
    assert resumed["compile"] is False and resumed["final_step"] == 6
    assert step_losses(tmp_path / "compiled") == pytest.approx(losses, rel=rel)
    assert_weights_close(final_state(tmp_path / "compiled", 6)["model"], final_state(tmp_path / "eager", 6)["model"], atol)
    return graphs


def assert_weights_close(ours: dict[str, torch.Tensor], theirs: dict[str, torch.Tensor], atol: float | None) -> None:
    for name in ours if atol is not None else ():
        torch.testing.assert_close(ours[name], theirs[name], rtol=0, atol=atol, msg=lambda m, n=name: f"{n}: {m}")


@pytest.mark.slow
def test_a_compiled_transformer_trains_as_the_eager_one_and_its_checkpoint_resumes_eagerly(
    data_root: Path, tmp_path: Path, traced_only: None
) -> None:
    config = config_of(data_root, {**TINY_TRANSFORMER, "dropout": 0.0})  # dropout: the same masks in both
    graphs = check_compiled_against_eager(config, tmp_path, rel=1e-6, atol=1e-6)
    # traced once, or twice where the first batch's sizes coincided (duck sizing); never once per batch shape
    assert 1 <= graphs <= 2


@needs_cuda
# Adam moves a weight by at most the rate (0.001) a step: fp32's 1e-4 is a tenth of one step; bf16's rounding may
# turn a near-zero gradient's sign, which moves a weight by twice the rate, so its weights are not compared
@pytest.mark.parametrize(("precision", "rel", "atol"), [("fp32", 1e-4, 1e-4), ("bf16", 2e-2, None)])
@pytest.mark.parametrize("model", ["transformer", "rnnsearch-gru", "rnnsearch-lstm"])
def test_on_cuda_a_model_compiled_by_inductor_trains_as_the_eager_one(
    data_root: Path, tmp_path: Path, precision: str, rel: float, atol: float | None, model: str
) -> None:
    """The Transformer's forward, or RNNsearch's decoder step (RNNencdec's decoder is one cuDNN call on CUDA)."""
    torch.compiler.reset()
    settings = {**TINY_TRANSFORMER, "dropout": 0.0} if model == "transformer" else STEPPED[model]
    config = config_of(data_root, settings, device="cuda", precision=precision)
    graphs = check_compiled_against_eager(config, tmp_path, rel=rel, atol=atol)
    # more: a graph break on CUDA's path (the attention kernels' choice?): TORCH_LOGS=graph_breaks names it
    assert 1 <= graphs <= 2, f"{graphs} graphs traced"


@pytest.mark.slow
@pytest.mark.parametrize("architecture", ["transformer", "rnnsearch"])
def test_ddp_wraps_the_compiled_module_and_gets_the_eager_gradients(
    tmp_path: Path, traced_only: None, architecture: str
) -> None:
    """The Transformer: DDP around the compiled module; RNNsearch: around the model, whose steps are compiled."""
    torch.manual_seed(0)
    settings = TINY_TRANSFORMER if architecture == "transformer" else STEPPED["rnnsearch-gru"]
    model = build_model(ModelConfig(**{**settings, "dropout": 0.0}), 20, 20)  # type: ignore[arg-type]
    eager = copy.deepcopy(model)
    batch = make_batch([[5, 6, 7, 8], [9, 10], [11, 12, 13]], [[7, 6, 5], [10, 9, 4, 4], [13]], [0, 1, 2])
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'group'}", rank=0, world_size=1)
    try:
        wrapped = training_module(model, True, ddp=True)  # as the trainer under torchrun
        assert isinstance(wrapped, DistributedDataParallel)
        assert (wrapped.module._orig_mod if architecture == "transformer" else wrapped.module) is model
        before = traced_graphs()
        batch_loss_sum(wrapped, batch, 0.1).backward()
        assert traced_graphs() > before  # traced under DDP's forward (dynamo's DDPOptimizer)
    finally:
        dist.destroy_process_group()
    batch_loss_sum(eager, batch, 0.1).backward()
    for (name, p), q in zip(model.named_parameters(), eager.parameters(), strict=True):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-6, atol=1e-7, msg=lambda m, n=name: f"{n}: {m}")


@pytest.mark.slow
@pytest.mark.parametrize(("model", "recompute"), [("rnnsearch-gru", False), ("rnnsearch-gru", True),
                                                  ("rnnsearch-lstm", False), ("rnnencdec", False)])
def test_an_rnn_with_compiled_steps_trains_as_the_eager_one_and_its_checkpoint_resumes_eagerly(
    data_root: Path, tmp_path: Path, traced_only: None, model: str, recompute: bool
) -> None:
    # recompute_attention's checkpoint inside the compiled step: dynamo traces it as one of its higher-order ops
    config = config_of(data_root, STEPPED[model], recompute_attention=recompute)
    graphs = check_compiled_against_eager(config, tmp_path, rel=1e-6, atol=1e-6)
    # one step function, traced once, or twice (LSTM: the first step's zero memory has no gradient; duck sizing)
    assert 1 <= graphs <= 2, f"{graphs} graphs traced"


def shaped_batches() -> list[Batch]:
    """Batches of 1 to 20 sentences, sources of 1 to 17 tokens (+ EOS), targets of 1 to 17."""
    g = torch.Generator().manual_seed(0)

    def sentences(n: int, lo: int, hi: int) -> list[list[int]]:
        lengths = torch.randint(lo, hi + 1, (n,), generator=g).tolist()
        return [torch.randint(4, 20, (length,), generator=g).tolist() for length in lengths]

    shapes = [(7, 3, 9), (12, 2, 5), (3, 6, 14), (20, 4, 4), (5, 1, 3), (9, 10, 17), (1, 8, 8), (16, 1, 12)]
    return [make_batch(sentences(n, lo, hi), sentences(n, lo, hi), list(range(n))) for n, lo, hi in shapes]


@pytest.mark.parametrize("model", STEPPED)
def test_an_rnn_step_function_is_traced_a_bounded_number_of_times_and_computes_the_eager_gradients(
    model: str, traced_only: None
) -> None:
    """Eight batches of different sizes and lengths: the compiled decoder step is traced once or twice at the first
    batches (see the previous test), again for a batch of one sentence (a size of 1 is specialised), and never for
    a new length or size; the losses and gradients are the eager model's."""
    torch.manual_seed(0)
    compiled = build_model(ModelConfig(**{**STEPPED[model], "dropout": 0.0}), 20, 20)  # type: ignore[arg-type]
    eager = copy.deepcopy(compiled)
    assert training_module(compiled, True) is compiled and compiles(True, compiled)
    breaks = dict(counters["graph_break"])  # dynamo's counters outlive torch.compiler.reset()
    new_graphs = []
    for batch in shaped_batches():
        before = traced_graphs()
        compiled.zero_grad(), eager.zero_grad()
        ours, theirs = batch_loss_sum(compiled, batch, 0.1), batch_loss_sum(eager, batch, 0.1)
        ours.backward(), theirs.backward()
        new_graphs.append(traced_graphs() - before)
        torch.testing.assert_close(ours, theirs, rtol=1e-6, atol=0)
        for (name, p), q in zip(compiled.named_parameters(), eager.parameters(), strict=True):
            torch.testing.assert_close(p.grad, q.grad, rtol=1e-6, atol=1e-7, msg=lambda m, n=name: f"{n}: {m}")
    # new graphs only at the first two batches and at the batch of one sentence, each a graph per variant (an
    # LSTM's first step, whose zero memory has no gradient, is one): at most 2 + 2 (8, the recompile limit)
    single = [i for i, batch in enumerate(shaped_batches()) if batch.src.size(0) == 1]
    print("graphs traced per batch:", new_graphs)
    assert all(n == 0 for i, n in enumerate(new_graphs) if i >= 2 and i not in single), new_graphs
    assert 1 <= sum(new_graphs) <= 4, new_graphs
    assert dict(counters["graph_break"]) == breaks  # no graph break in the step


class CountingCompiler:
    """A StepCompiler that compiles nothing: its steps count their calls and run the model's own."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, step: Any) -> Any:
        def counted(*args: Any) -> Any:
            self.calls += 1
            return step(*args)

        return counted


@pytest.mark.parametrize("model", STEPPED)
def test_only_the_training_step_runs_the_compiled_steps_and_search_is_unchanged(model: str) -> None:
    torch.manual_seed(0)
    stepped = build_model(ModelConfig(**STEPPED[model]), 20, 20)  # type: ignore[arg-type]
    eager = copy.deepcopy(stepped)
    compiler = CountingCompiler()
    stepped.compile_steps(compiler)
    batch = shaped_batches()[0]
    stepped.eval(), eager.eval()  # validation: eval mode, no gradients
    with torch.no_grad():
        assert torch.equal(batch_loss_sum(stepped, batch), batch_loss_sum(eager, batch))
    limits = torch.full_like(batch.src_lengths, 12)
    assert greedy_search(stepped, batch.src, batch.src_lengths, limits) == greedy_search(
        eager, batch.src, batch.src_lengths, limits)
    beams = [beam_search(m, batch.src, batch.src_lengths, 3, limits, nbest=3) for m in (stepped, eager)]
    assert [[(h.tokens, h.score) for h in nbest] for nbest in beams[0]] == [
        [(h.tokens, h.score) for h in nbest] for nbest in beams[1]]
    assert compiler.calls == 0
    stepped.train()
    batch_loss_sum(stepped, batch).backward()  # the training step
    steps = batch.tgt_in.size(1)  # the attention model's last step attends only (eager)
    assert compiler.calls == steps - 1


def test_compile_applies_to_a_transformer_and_to_stepping_rnns_and_otherwise_leaves_the_model_itself() -> None:
    transformer = build_model(ModelConfig(**TINY_TRANSFORMER), 20, 20)  # type: ignore[arg-type]
    rnn = build_model(ModelConfig(**RNN), 20, 20)  # type: ignore[arg-type]
    assert isinstance(rnn, Seq2Seq) and rnn.decoder.compiled_attention_step is None
    assert training_module(transformer, False) is transformer and training_module(rnn, False) is rnn
    assert rnn.decoder.compiled_attention_step is None
    compiled = training_module(transformer, True)  # traced at its first call, not here
    assert compiled is not transformer and compiled._orig_mod is transformer  # type: ignore[union-attr]
    assert training_module(rnn, True) is rnn and rnn.decoder.compiled_attention_step is not None
    assert [compiles(on, m) for on in (False, True) for m in (transformer, rnn)] == [False, False, True, True]
    assert compile_fallback(True, rnn) is None and compile_fallback(True, transformer) is None
    assert list(rnn.state_dict()) == list(build_model(ModelConfig(**RNN), 20, 20).state_dict())  # type: ignore[arg-type]


def test_an_rnnencdec_with_a_fused_decoder_trains_eagerly_and_says_so() -> None:
    """On CUDA RNNencdec's decoder is one cuDNN call (`fused_fixed_steps` None there; forced here on the CPU): no
    step loop to compile."""
    encdec = build_model(ModelConfig(**STEPPED["rnnencdec"]), 20, 20)  # type: ignore[arg-type]
    assert isinstance(encdec, Seq2Seq) and compiles(True, encdec)  # the CPU: its decoder steps
    encdec.decoder.fused_fixed_steps = True
    assert not compiles(True, encdec) and training_module(encdec, True) is encdec
    assert encdec.decoder.compiled_fixed_step is None
    assert "RNNencdec has neither on this device" in (compile_fallback(True, encdec) or "")
    with pytest.raises(ValueError, match="one fused RNN call"):
        encdec.compile_steps(CountingCompiler())
