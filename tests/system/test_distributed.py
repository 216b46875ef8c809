"""DDP on CPU with gloo: `torchrun --nproc_per_node=2 -m nmt train` end to end, and one step's exact gradients."""

from __future__ import annotations

import json
import os
import re
import shlex
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from nmt.config import Config, save_config
from nmt.data.batching import make_batch, shard
from nmt.errors import NMTError
from nmt.training import trainer as trainer_module
from nmt.training.distributed import DistContext, setup_distributed
from nmt.training.trainer import Trainer
from tests.helpers import TINY_TRANSFORMER, NanGradient, reverse_task_config

REPO = Path(__file__).resolve().parents[2]
RNN = {"embedding_size": 16, "hidden_size": 32, "attention_size": 32, "maxout_size": 16}


@pytest.mark.slow
def test_torchrun_two_cpu_processes(tmp_path: Path) -> None:
    config = reverse_task_config(
        tmp_path / "data", n_train=200, min_len=4, max_len=8,
        model={"embedding_size": 16, "hidden_size": 32, "attention_size": 32, "maxout_size": 16},
        training={"max_steps": 30, "validate_every": 15, "checkpoint_every": 10, "log_every": 5,
                  "batch_tokens": 300, "learning_rate": 0.01, "threads": 1, "warmup_steps": 0,
                  "lr_schedule": "constant", "keep_last": 2},
    )
    config_path = tmp_path / "config.yaml"
    save_config(config, config_path)
    run_dir = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    result = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
         "-m", "nmt", "train", str(config_path), "--run-dir", str(run_dir)],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=120,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert "rank 0/2: training on cpu" in output and "rank 1/2: training on cpu" in output
    # Rank 0 alone writes: one log line per event, one summary, no stray run dirs.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.yaml", "data", "run"]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["world_size"] == 2 and summary["final_step"] == 30
    assert json.loads((run_dir / "environment.json").read_text())["world_size"] == 2
    events = [json.loads(line) for line in (run_dir / "log.jsonl").read_text().splitlines()]
    train_events = [e for e in events if e["event"] == "train"]
    assert [e["step"] for e in train_events] == [5, 10, 15, 20, 25, 30]
    assert [e["step"] for e in events if e["event"] == "valid"] == [15, 30]
    assert train_events[-1]["loss"] < 0.8 * train_events[0]["loss"]
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == [
        "best.pt", "step_00000020.pt", "step_00000030.pt"
    ]


def readme_torchrun_command() -> list[str]:
    """The README's torchrun command line, split as the shell splits it (its trailing comment dropped)."""
    (line,) = re.findall(r"^torchrun .*$", (REPO / "README.md").read_text(encoding="utf-8"), re.MULTILINE)
    return shlex.split(line, comments=True)


@pytest.mark.slow
def test_readme_torchrun_command_runs_as_printed(tmp_path: Path) -> None:
    # The README's command with 2 processes for its 4 and a tiny config for its own; every other
    # argument as printed, run from a fresh folder so that the default run dir is runs/<run name>.
    command = readme_torchrun_command()
    assert command[:5] == ["torchrun", "--nproc_per_node=4", "-m", "nmt", "train"], command
    assert command[6:] == ["--run-name", "rnnsearch-50"], command
    config = reverse_task_config(
        tmp_path / "data", n_train=100, min_len=4, max_len=6,
        model={"embedding_size": 8, "hidden_size": 16, "attention_size": 16, "maxout_size": 8},
        training={"max_steps": 4, "validate_every": 4, "checkpoint_every": 4, "log_every": 2,
                  "valid_max_sentences": 4, "batch_tokens": 200},
    )
    config.runs = {"rnnsearch-50": {"model": {"attention": "dot"}}, "rnnencdec-50": {"model": {"attention": "none"}}}
    config_path = tmp_path / "paper-bible.yaml"
    save_config(config, config_path)
    command[1], command[5] = "--nproc_per_node=2", str(config_path)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    bin_dir = str(Path(sys.executable).parent)  # where the environment's torchrun lives
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", "PET_MASTER_PORT": str(port),
           "PATH": bin_dir + os.pathsep + os.environ.get("PATH", "")}
    work = tmp_path / "work"
    work.mkdir()
    result = subprocess.run(command, cwd=work, env=env, capture_output=True, text=True, timeout=120)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert "rank 1/2: training on cpu" in output
    summary = json.loads((work / "runs" / "rnnsearch-50" / "summary.json").read_text())
    assert summary["world_size"] == 2 and summary["final_step"] == 4
    saved = (work / "runs" / "rnnsearch-50" / "config.yaml").read_text()
    assert "attention: dot" in saved  # the run's own entry, not the top level (additive)
    assert sorted(p.name for p in (work / "runs").iterdir()) == ["rnnsearch-50"]


def _one_ddp_step(rank: int, config: Config, tmp_path: Path, port: int) -> None:
    """Worker of a 2-process gloo job: one training step; rank 0 saves parameters and gradients."""
    os.environ.update({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "RANK": str(rank),
                       "LOCAL_RANK": str(rank), "WORLD_SIZE": "2"})
    ctx = setup_distributed("cpu")
    try:
        trainer = Trainer(config, tmp_path / "ddp", False, ctx)
        trainer._train_step(*trainer._next_batch())
        if ctx.is_main:
            torch.save({name: (p.detach(), p.grad) for name, p in trainer.model.named_parameters()},
                       tmp_path / "ddp_step.pt")
        # both ranks leave the group together: rank 1 tearing gloo down while rank 0 still saved
        # aborted it once in four CI runs ("terminate called without an active exception")
        ctx.barrier()
    finally:
        ctx.close()


@pytest.mark.slow
@pytest.mark.parametrize("model", [RNN, {**TINY_TRANSFORMER, "dropout": 0.0}], ids=["rnn", "transformer"])
def test_one_ddp_step_equals_one_step_on_both_ranks_batches(tmp_path: Path, model: dict[str, Any]) -> None:
    # No clipping, so the gradients left after the step are the averaged ones DDP produced.
    config = reverse_task_config(
        tmp_path / "data", n_train=200, min_len=4, max_len=8, model=model,
        training={"max_steps": 1, "batch_tokens": 300, "learning_rate": 0.01, "clip_grad_norm": 0.0},
    )
    single = Trainer(config, tmp_path / "single", False, DistContext(0, 1, torch.device("cpu")))
    data = single.data
    halves = [shard(data.sampler.epoch(1), rank, 2)[0] for rank in range(2)]
    tokens = [make_batch([data.src[i] for i in h], [data.tgt[i] for i in h], h).n_tgt_tokens for h in halves]
    assert tokens[0] != tokens[1]  # unequal shares: a plain mean of per-rank means would be wrong
    both = halves[0] + halves[1]
    single._train_step(make_batch([data.src[i] for i in both], [data.tgt[i] for i in both], both), sum(tokens))

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    mp.spawn(_one_ddp_step, args=(config, tmp_path, port), nprocs=2, join=True)
    ddp = torch.load(tmp_path / "ddp_step.pt", weights_only=True)
    assert ddp.keys() == dict(single.model.named_parameters()).keys()
    for name, p in single.model.named_parameters():
        weights, grad = ddp[name]
        torch.testing.assert_close(grad, p.grad, rtol=1e-5, atol=1e-6, msg=lambda m, n=name: f"{n} grad: {m}")
        # Adam's first step is lr * g / (|g| + eps): rounding in a gradient near 0 moves a weight by ~1e-6.
        torch.testing.assert_close(weights, p.detach(), rtol=1e-5, atol=1e-5, msg=lambda m, n=name: f"{n}: {m}")


class _NanValue(torch.autograd.Function):
    """NaN in value, zero in gradient: the loss it is added to is NaN on this rank alone, the averaged gradient
    (and so every rank's gradient norm) stays finite."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        return torch.full_like(x, torch.nan)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        return torch.zeros_like(grad)


COLLECTIVES = ("all_reduce", "broadcast_object_list", "all_gather_object", "barrier")
# what each scenario of the one job below does: the whole loop, or 4 steps with these faults then a read
SCENARIOS: dict[str, dict[str, int]] = {
    "whole-run": {}, "finite": {}, "nan-loss-on-one-rank": {"nan_loss_on_rank_1": 3},
    "nan-loss-then-nan-gradient": {"nan_loss_on_rank_1": 2, "nan_gradient": 3},
}


def _ddp_scenario(rank: int, ctx: DistContext, config: Config, run_dir: Path, name: str) -> dict[str, Any]:
    """One scenario on this rank, our code's collectives recorded as (trainer.step, name, through the host's
    group). Faults: nan_loss_on_rank_1 (its loss NaN at that step, on rank 1 alone), nan_gradient (every rank's
    gradient NaN at that step). "whole-run" runs the loop; the others train 4 steps as the loop does, then read
    their losses as a log line does."""
    faults, seen = SCENARIOS[name], {"calls": []}
    trainer = Trainer(config, run_dir, False, ctx)

    def faulty(model: Any, batch: Any, label_smoothing: float = 0.0) -> torch.Tensor:
        loss, step = batch_loss_sum(model, batch, label_smoothing), trainer.step + 1
        if rank == 1 and step == faults.get("nan_loss_on_rank_1"):
            loss = loss + _NanValue.apply(loss)
        return loss + NanGradient.apply(loss) if step == faults.get("nan_gradient") else loss

    def recording(collective: str) -> Any:
        real = getattr(dist, collective)

        def recorded(*args: Any, **kwargs: Any) -> Any:
            seen["calls"].append((trainer.step, collective, kwargs.get("group") is ctx.host_group))
            return real(*args, **kwargs)

        return recorded

    batch_loss_sum, originals = trainer_module.batch_loss_sum, {c: getattr(dist, c) for c in COLLECTIVES}
    trainer_module.batch_loss_sum = faulty  # this process's own module: the parent's is untouched
    for collective in COLLECTIVES:  # DDP's own gradient averaging goes through its C++ reducer, not these
        setattr(dist, collective, recording(collective))
    try:
        if name == "whole-run":
            trainer.run()
        else:
            for _ in range(4):
                trainer._train_step(*trainer._next_batch())
                trainer.step += 1
                trainer.queued.read(keep=1)
            trainer.queued.read()
            seen["own_losses"] = [r.loss for r in trainer.queued._read]
            seen["drained"] = trainer.queued.drain()
    except NMTError as error:
        seen["error"] = error.message
    finally:
        trainer_module.batch_loss_sum = batch_loss_sum
        for collective, real in originals.items():
            setattr(dist, collective, real)
        trainer.lock.release()
    return seen


TOO_SMALL = "too-small"  # a training set of fewer batches than processes (one batch: batch_tokens over all of it)


def _ddp_refusal(ctx: DistContext, config: Config, run_dir: Path) -> dict[str, Any]:
    """What a run whose epoch cannot give each process a batch meets on this rank."""
    try:
        Trainer(config, run_dir, False, ctx).lock.release()
    except NMTError as error:
        return {"error": error.message, "on_every_rank": error.on_every_rank, "written": run_dir.exists()}
    return {"error": None}


def _ddp_worker(rank: int, configs: dict[str, Config], tmp_path: Path, port: int) -> None:
    """Worker of a 2-process gloo job: every scenario in turn; writes what it saw to rank_R.json."""
    os.environ.update({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "RANK": str(rank),
                       "LOCAL_RANK": str(rank), "WORLD_SIZE": "2"})
    ctx = setup_distributed("cpu")
    seen = {}
    try:
        for name, config in configs.items():
            if name == TOO_SMALL:
                seen[name] = _ddp_refusal(ctx, config, tmp_path / name)
            else:
                seen[name] = _ddp_scenario(rank, ctx, config, tmp_path / name, name)
        ctx.barrier()
    finally:
        (tmp_path / f"rank_{rank}.json").write_text(json.dumps(seen))
        ctx.close()


@pytest.fixture(scope="module")
def ddp_job(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict[str, Any]]]:
    """Every scenario in one 2-process job (one start-up of two processes, not one per scenario)."""
    tmp_path = tmp_path_factory.mktemp("ddp_job")
    training = {"max_steps": 10, "batch_tokens": 300, "learning_rate": 0.01, "threads": 1}
    whole = {"max_steps": 6, "log_every": 6, "validate_every": 100, "checkpoint_every": 100}
    configs = {
        name: reverse_task_config(tmp_path / "data", n_train=200, min_len=4, max_len=8, model=RNN,
                                  training={**training, **(whole if name == "whole-run" else {})})
        for name in SCENARIOS
    }
    configs[TOO_SMALL] = reverse_task_config(tmp_path / "data", n_train=200, min_len=4, max_len=8, model=RNN,
                                             training={**training, "batch_tokens": 100_000})
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    mp.spawn(_ddp_worker, args=(configs, tmp_path, port), nprocs=2, join=True)
    return tmp_path, [json.loads((tmp_path / f"rank_{rank}.json").read_text()) for rank in range(2)]


@pytest.mark.slow
def test_a_training_set_too_small_for_the_processes_is_refused_on_every_rank_before_the_run_is_written(
    ddp_job: tuple[Path, Any],
) -> None:
    for seen in ddp_job[1]:
        refusal = seen[TOO_SMALL]
        assert re.fullmatch(r"an epoch has no batches for 2 process\(es\) \(\d+ training pairs\)\.", refusal["error"])
        assert refusal["on_every_rank"] and not refusal["written"]  # said once, by rank 0; no run to mend by hand


@pytest.mark.slow
def test_ddp_steps_ask_the_other_processes_nothing_but_whether_to_stop(ddp_job: tuple[Path, Any]) -> None:
    """The whole loop: before each step one host-side collective (a stop request on any rank stops all);
    the token count comes from the epoch's list, the losses are summed only for the log line."""
    tmp_path, ranks = ddp_job
    for seen in (r["whole-run"] for r in ranks):
        assert "error" not in seen
        in_steps = [tuple(call) for call in seen["calls"] if call[0] < 6]
        assert in_steps == [(step, "all_reduce", True) for step in range(6)]
        assert all(through_host for _, _, through_host in seen["calls"])  # after the steps too (log, validation)
    events = [json.loads(line) for line in (tmp_path / "whole-run" / "log.jsonl").read_text().splitlines()]
    assert [e["step"] for e in events if e["event"] == "train"] == [6]


@pytest.mark.slow
@pytest.mark.parametrize("scenario", ["finite", "nan-loss-on-one-rank", "nan-loss-then-nan-gradient"])
def test_ddp_losses_are_summed_when_read_and_a_divergence_stops_every_rank_at_its_step(
    ddp_job: tuple[Path, Any], scenario: str
) -> None:
    """4 steps trained as the loop trains them ask no collective of our code; reading their losses (as a log
    line does) sums them over the ranks in one. A loss NaN on one rank alone stops both ranks naming its step,
    also where a later step's gradient is NaN on all (its norm is checked a step late, the loss at the read)."""
    ranks = [r[scenario] for r in ddp_job[1]]
    for seen in ranks:
        assert seen["calls"] == [[4, "all_reduce", True]]  # one, at the read, on the host
    if scenario != "finite":
        assert ranks[0]["error"] == ranks[1]["error"]
        step = 2 if scenario == "nan-loss-then-nan-gradient" else 3
        assert f"training diverged at step {step} " in ranks[0]["error"]
        assert "the training loss is nan" in ranks[0]["error"]
        return
    own = [r["own_losses"] for r in ranks]
    assert len(own[0]) == 4 and own[0] != own[1]  # each rank's own batches
    assert ranks[0]["drained"] == ranks[1]["drained"] == [a + b for a, b in zip(*own, strict=True)]


def _slow_rank_0(rank: int, wait_s: float, tmp_path: Path, port: int) -> None:
    """Worker of a 2-process gloo job: rank 0 works 3 s alone in `agreed` (as it prepares the data) while rank 1
    waits in the host group, whose wait is set to `wait_s`; each writes what it met to rank_R.txt."""
    import time as clock

    from nmt.training import distributed

    os.environ.update({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "RANK": str(rank),
                       "LOCAL_RANK": str(rank), "WORLD_SIZE": "2"})
    distributed.HOST_WAIT = distributed.timedelta(seconds=wait_s)
    ctx = setup_distributed("cpu")
    try:
        got = ctx.agreed(lambda: (clock.sleep(3), "prepared")[1])
    except Exception as error:  # noqa: BLE001 - what rank 1 met is the test's
        got = type(error).__name__
    (tmp_path / f"rank_{rank}.txt").write_text(str(got), encoding="utf-8")
    if got == "prepared":
        ctx.close()


def test_the_other_ranks_wait_in_the_host_group_as_long_as_host_wait_says(tmp_path: Path) -> None:
    """The host group's wait is HOST_WAIT (12 h), not torch's 30 minutes, past which a rank 0 that prepared a corpus
    alone ended the job: shown here at a scale a test can wait, 1 s against 3 s of rank 0's work, and 30 s."""
    for wait_s, expected in ((30.0, "prepared"), (1.0, "DistBackendError")):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        folder = tmp_path / str(wait_s)
        folder.mkdir()
        context = mp.spawn(_slow_rank_0, args=(wait_s, folder, port), nprocs=2, join=False)
        try:
            while not context.join(timeout=60):
                pass
        except mp.ProcessExitedException:  # a rank that timed out leaves gloo torn: it may abort on its way out
            assert expected != "prepared"
        assert (folder / "rank_1.txt").read_text(encoding="utf-8") in (
            ("prepared",) if expected == "prepared" else ("DistBackendError", "RuntimeError"))
