"""A training step leaves its values on the device: the host reads them a step later (queued_steps.py).

On a GPU every read of a value the device computes (a loss as a Python float, the rows a mask picks) makes
the host wait for the device. On the CPU the same reads are recorded as the operations that make them; on
CUDA, torch's sync debug mode refuses them. A step that went non-finite is still named, a step late, and
nothing of its state is saved."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from nmt.config import Config
from nmt.errors import NMTError
from nmt.training import trainer as trainer_module
from nmt.training.distributed import DistContext
from nmt.training.trainer import Trainer, train
from tests.helpers import TINY_TRANSFORMER, NanGradient, needs_cuda, reverse_task_config

MODELS = {
    "rnnsearch": {"embedding_size": 16, "hidden_size": 32, "attention_size": 32, "maxout_size": 16},
    "rnnencdec": {"embedding_size": 16, "hidden_size": 32, "maxout_size": 16, "attention": "none"},
    "transformer": TINY_TRANSFORMER,
}
# the operations whose result depends on a tensor's values in a way the host must know: a shape (nonzero,
# masked_select) or a Python number (_local_scalar_dense: float(t), t.item())
VALUE_READS = {"nonzero", "masked_select", "_local_scalar_dense", "is_nonzero", "equal"}


class HostReads(TorchDispatchMode):
    """Records the operations that read a floating or boolean tensor's values into the host, and boolean-mask
    indexing. Integer reads are left out: a batch's source lengths stay on the host by design (Batch.to)."""

    def __init__(self) -> None:
        super().__init__()
        self.reads: list[str] = []

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        name = func.overloadpacket.__name__
        first = args[0] if args else None
        reads_values = name in VALUE_READS and isinstance(first, torch.Tensor) and (
            first.is_floating_point() or first.dtype == torch.bool)
        mask_index = name == "index" and any(
            isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in (args[1] if len(args) > 1 else []))
        if reads_values or mask_index:
            self.reads.append(name)
        return func(*args, **(kwargs or {}))


@pytest.fixture(scope="module")
def data_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("reverse_data")


def tiny(data_root: Path, architecture: str, **training: Any) -> Config:
    settings = {"max_steps": 8, "validate_every": 100, "checkpoint_every": 1, "log_every": 4, "batch_tokens": 200,
                "warmup_steps": 0, "lr_schedule": "constant", **training}
    return reverse_task_config(data_root, n_train=100, min_len=4, max_len=8, model=MODELS[architecture],
                               training=settings)


def trainer_of(config: Config, run_dir: Path, device: str = "cpu") -> Trainer:
    trainer = Trainer(config, run_dir, resume=False, ctx=DistContext(0, 1, torch.device(device)))
    trainer.lock.release()
    return trainer


@pytest.mark.parametrize("architecture", sorted(MODELS))
def test_a_training_step_reads_nothing_from_the_device(data_root: Path, tmp_path: Path, architecture: str) -> None:
    trainer = trainer_of(tiny(data_root, architecture), tmp_path / "run")
    # torch's CPU Adam reads its step count as a number (on CUDA it is fused: nothing read); SGD reads none
    trainer.optimizer = torch.optim.SGD(trainer.model.parameters(), lr=0.01)
    batch, step_tokens = trainer._next_batch()
    with HostReads() as recorded:
        trainer._train_step(batch, step_tokens)
    assert recorded.reads == []
    # the step's loss is read afterwards: the batch's summed loss, as the model computed it
    (loss,) = trainer.queued.drain()
    assert loss > 0 and torch.isfinite(torch.tensor(loss))


def test_the_recorder_sees_the_reads_a_step_would_wait_for() -> None:
    values = torch.tensor([1.0, -1.0, 2.0])
    with HostReads() as recorded:
        float(values.sum())
        _ = values[values > 0]
        _ = torch.tensor([3, 4])[torch.tensor([0, 1])]  # integer indexing: no read
    assert recorded.reads == ["_local_scalar_dense", "index"]


@pytest.mark.parametrize("what", ["loss", "gradient"])
def test_a_non_finite_step_stops_the_run_before_its_checkpoint(
    data_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, what: str
) -> None:
    """Step 5's loss (or its gradient alone) is made NaN: the run stops naming step 5, with the checkpoints
    of steps 1-4 written (checkpoint_every 1) and none after, and the log's lines those of steps 4 and before."""
    batch_loss_sum, calls = trainer_module.batch_loss_sum, [0]

    def nan_at_step_5(model: Any, batch: Any, label_smoothing: float = 0.0) -> torch.Tensor:
        loss = batch_loss_sum(model, batch, label_smoothing)
        calls[0] += 1
        if calls[0] != 5:
            return loss
        if what == "loss":
            return loss * torch.nan
        return loss + NanGradient.apply(loss)

    monkeypatch.setattr(trainer_module, "batch_loss_sum", nan_at_step_5)
    run = tmp_path / "run"
    with pytest.raises(NMTError, match="training diverged at step 5 ") as error:
        train(tiny(data_root, "rnnsearch"), run)
    assert f"the {'training loss' if what == 'loss' else 'gradient norm'} is nan" in error.value.message
    saved = sorted(p.name for p in (run / "checkpoints").glob("step_*.pt"))
    assert saved[-1] == "step_00000004.pt"
    steps = [line["step"] for line in map(json.loads, (run / "log.jsonl").read_text().splitlines())]
    assert max(steps) == 4


def test_a_non_finite_step_is_named_once_the_next_step_is_queued(
    data_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With no checkpoint, log line or validation due, step 5's NaN loss is read after step 6 is trained (the
    step trained on its state is thrown away with it): the run stops there naming step 5, having saved nothing."""
    batch_loss_sum, calls = trainer_module.batch_loss_sum, [0]

    def nan_at_step_5(model: Any, batch: Any, label_smoothing: float = 0.0) -> torch.Tensor:
        calls[0] += 1
        loss = batch_loss_sum(model, batch, label_smoothing)
        return loss * torch.nan if calls[0] == 5 else loss

    monkeypatch.setattr(trainer_module, "batch_loss_sum", nan_at_step_5)
    run = tmp_path / "run"
    with pytest.raises(NMTError, match="training diverged at step 5 .*the training loss is nan"):
        train(tiny(data_root, "rnnsearch", checkpoint_every=100, log_every=100, validate_every=100), run)
    assert calls[0] == 6
    assert not list((run / "checkpoints").glob("*.pt"))


@needs_cuda
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
@pytest.mark.parametrize("architecture", sorted(MODELS))
def test_a_training_step_on_cuda_never_waits_for_the_device(
    data_root: Path, tmp_path: Path, architecture: str, precision: str
) -> None:
    trainer = trainer_of(tiny(data_root, architecture, device="cuda", precision=precision), tmp_path / "run", "cuda")
    trainer._train_step(*trainer._next_batch())  # the first step allocates Adam's state
    batch, step_tokens = trainer._next_batch()
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        trainer._train_step(batch, step_tokens)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    losses = trainer.queued.drain()
    assert len(losses) == 2 and all(torch.isfinite(torch.tensor(losses)))
