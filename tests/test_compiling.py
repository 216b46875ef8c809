"""nmt.training.compiling (training.compile): a Transformer trained through torch.compile trains as the eager one,
its checkpoints are the eager one's and resume eagerly; DDP wraps the compiled module; an RNN trains eagerly and
says so.

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
from nmt.data.batching import make_batch
from nmt.models import build_model
from nmt.training.compiling import compile_fallback, compiles, training_module
from nmt.training.trainer import train
from nmt.training.validation import batch_loss_sum
from tests.helpers import TINY_TRANSFORMER, final_state, needs_cuda, reverse_task_config

RNN = {"embedding_size": 16, "hidden_size": 32, "attention_size": 32, "maxout_size": 16}


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
def test_on_cuda_a_transformer_compiled_by_inductor_trains_as_the_eager_one(
    data_root: Path, tmp_path: Path, precision: str, rel: float, atol: float | None
) -> None:
    torch.compiler.reset()
    config = config_of(data_root, {**TINY_TRANSFORMER, "dropout": 0.0}, device="cuda", precision=precision)
    graphs = check_compiled_against_eager(config, tmp_path, rel=rel, atol=atol)
    # more: a graph break on CUDA's path (the attention kernels' choice?): TORCH_LOGS=graph_breaks names it
    assert 1 <= graphs <= 2, f"{graphs} graphs traced"


@pytest.mark.slow
def test_ddp_wraps_the_compiled_module_and_gets_the_eager_gradients(tmp_path: Path, traced_only: None) -> None:
    torch.manual_seed(0)
    model = build_model(ModelConfig(**{**TINY_TRANSFORMER, "dropout": 0.0}), 20, 20)  # type: ignore[arg-type]
    eager = copy.deepcopy(model)
    batch = make_batch([[5, 6, 7, 8], [9, 10], [11, 12, 13]], [[7, 6, 5], [10, 9, 4, 4], [13]], [0, 1, 2])
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'group'}", rank=0, world_size=1)
    try:
        wrapped = training_module(model, True, ddp=True)  # as the trainer under torchrun
        assert isinstance(wrapped, DistributedDataParallel) and wrapped.module._orig_mod is model
        before = traced_graphs()
        batch_loss_sum(wrapped, batch, 0.1).backward()
        assert traced_graphs() > before  # traced under DDP's forward (dynamo's DDPOptimizer)
    finally:
        dist.destroy_process_group()
    batch_loss_sum(eager, batch, 0.1).backward()
    for (name, p), q in zip(model.named_parameters(), eager.parameters(), strict=True):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-6, atol=1e-7, msg=lambda m, n=name: f"{n}: {m}")


def test_compile_applies_to_a_transformer_only_and_otherwise_leaves_the_model_itself() -> None:
    transformer = build_model(ModelConfig(**TINY_TRANSFORMER), 20, 20)  # type: ignore[arg-type]
    rnn = build_model(ModelConfig(**RNN), 20, 20)  # type: ignore[arg-type]
    assert training_module(transformer, False) is transformer and training_module(rnn, True) is rnn
    compiled = training_module(transformer, True)  # traced at its first call, not here
    assert compiled is not transformer and compiled._orig_mod is transformer  # type: ignore[union-attr]
    assert [compiles(on, m) for on in (False, True) for m in (transformer, rnn)] == [False, False, True, False]
    assert compile_fallback(False, rnn) is None and compile_fallback(True, transformer) is None
    assert "RNNsearch's would be traced again for every batch's length" in (compile_fallback(True, rnn) or "")


def test_an_rnn_asked_to_compile_trains_eagerly_and_says_so(
    data_root: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = traced_graphs()
    summary = train(config_of(data_root, RNN, max_steps=2, compile=True), tmp_path / "rnn")
    warnings = [line for line in capsys.readouterr().out.splitlines() if line.startswith("warning:")]
    assert warnings == [compile_fallback(True, build_model(ModelConfig(**RNN), 20, 20))]  # type: ignore[arg-type]
    assert summary["compile"] is False and traced_graphs() == before
