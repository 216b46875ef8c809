"""`nmt train`: the training loop, with validation, early stopping, mixed precision, DDP and exact resume.

Exactness on resume comes from three things: batches are a pure function of (seed, epoch) and the
checkpoint records the position in the epoch's list; every RNG state is saved and restored; and
the running log accumulators are saved too, so the resumed run logs the very same numbers.
"""

from __future__ import annotations

import contextlib
import math
import os
import random
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import torch
from torch.nn.parallel import DistributedDataParallel
from tqdm import tqdm

from nmt.config import Config
from nmt.data.batching import TokenBatchSampler, make_batch, shard
from nmt.data.pairs import within_words
from nmt.data.prepare import load_prepared, prepare
from nmt.errors import NMTError
from nmt.models.seq2seq import build_model, count_parameters
from nmt.rundir import writing as rundir
from nmt.rundir.checkpoints import (
    BEST_NAME,
    CHECKPOINT_DIR,
    checkpoint_step,
    latest_step_checkpoint,
    load_checkpoint,
    prune_step_checkpoints,
    save_checkpoint,
    step_checkpoint_name,
)
from nmt.rundir.lock import RunLock
from nmt.training.distributed import DistContext, setup_distributed
from nmt.training.optim import LRSchedule, build_optimizer, is_better
from nmt.training.rng import capture_rng, restore_rng
from nmt.training.signals import StopRequest
from nmt.training.validation import ValidationResult, batch_loss_sum, build_valid_set, safe_exp, validate

T = TypeVar("T")

# The terminal size the progress bar assumes where the terminal reports none (0 x 0: a pseudo-terminal
# whose size was never set), where following it would draw nothing at all.
FALLBACK_SIZE = (80, 24)


def train(config: Config, run_dir: Path, resume: bool = False) -> dict[str, Any]:
    """Train the model `config` describes into `run_dir` (continue it with resume=True); return summary.json."""
    ctx = setup_distributed(config.training.device)
    lock = RunLock(Path(run_dir))  # rank 0 takes it once the run directory's checks pass
    try:
        summary = Trainer(config, Path(run_dir), resume, ctx, lock).run()
        ctx.barrier()  # no rank leaves the process group while another still uses it
        return summary
    finally:
        lock.release()
        ctx.close()


def format_duration(seconds: float) -> str:
    """'42s', '12m05s' or '3h02m'; '?' when unknown (NaN)."""
    if not math.isfinite(seconds):
        return "?"
    whole = round(max(seconds, 0.0))
    if whole < 60:
        return f"{whole}s"
    if whole < 3600:
        return f"{whole // 60}m{whole % 60:02d}s"
    return f"{whole // 3600}h{whole % 3600 // 60:02d}m"


def format_score(score: float | None, metric: str) -> str:
    """A validation score as a person reads it: BLEU to 2 decimals, loss to 4."""
    if score is None:
        return "none"
    return f"{score:.2f}" if metric == "bleu" else f"{score:.4f}"


def seed_everything(seed: int) -> None:
    """Seed python's random, numpy and torch (all devices)."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def resolve_precision(name: str, device: torch.device) -> torch.dtype | None:
    """Autocast dtype: None (fp32) on CPU or with fp32; auto -> bf16 where supported, else fp16."""
    if device.type != "cuda" or name == "fp32":
        return None
    if name == "auto":
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    if name == "bf16" and not torch.cuda.is_bf16_supported():
        raise NMTError("training.precision is bf16 but this GPU does not support bfloat16.", "Use fp16 or auto.")
    return torch.bfloat16 if name == "bf16" else torch.float16


class Trainer:
    """One training run: set up (or restore) everything, then `run` the loop.

    `lock` (default: a new RunLock of `run_dir`) is taken on rank 0 once the run directory's checks pass;
    whoever ends the training releases it (`train` does), else the end of the process drops it.
    """

    def __init__(
        self, config: Config, run_dir: Path, resume: bool, ctx: DistContext, lock: RunLock | None = None
    ) -> None:
        self.config, self.run_dir, self.ctx = config, run_dir, ctx
        self.tc = tc = config.training
        self.device = ctx.device
        self.started = time.monotonic()
        self._progress: Any = None  # the terminal's progress bar while the loop runs: messages go above it
        if tc.threads > 0:
            torch.set_num_threads(tc.threads)
        seed_everything(tc.seed)
        self._load_data()
        # Everything is built, and a resumed checkpoint loaded, before the run dir is written (only its lock is
        # taken): a config the model refuses or an unusable checkpoint must leave the previous run (and its
        # summary.json) as it was.
        self.model = build_model(config.model, self.tokenizer.src_vocab_size, self.tokenizer.tgt_vocab_size)
        self.model.recompute_attention(config.training.recompute_attention)
        self.model.to(self.device)
        self.parameters = count_parameters(self.model)
        if ctx.rank > 0:
            torch.manual_seed(tc.seed + 1000 * ctx.rank)  # own dropout masks per rank; init came from rank 0
        self.wrapped: torch.nn.Module = self.model
        if ctx.enabled:
            ids = [self.device.index] if self.device.type == "cuda" else None
            self.wrapped = DistributedDataParallel(self.model, device_ids=ids)
        self.optimizer = build_optimizer(self.model.parameters(), tc)
        self.schedule = LRSchedule(tc)
        self.amp_dtype = resolve_precision(tc.precision, self.device)
        self.scaler = torch.amp.GradScaler("cuda", enabled=self.amp_dtype == torch.float16)
        self.step = self.position = self.saved_step = 0
        self.epoch = 1
        self.best_score: float | None = None
        self.best_step = 0
        self.bad_validations = 0
        self.acc = {"loss": 0.0, "tokens": 0.0, "seconds": 0.0}
        self.elapsed_before = 0.0
        self.last_validation: dict[str, Any] | None = None
        self.batches: list[list[int]] | None = None
        self.log = rundir.RunLog(run_dir / "log.jsonl")
        self._say(self.model.describe())
        self.lock = lock if lock is not None else RunLock(run_dir)
        resume_from = self._agreed(lambda: rundir.claim(run_dir, config, self.tokenizer, resume, self.lock))
        rng = self._agreed(lambda: self._restore(resume_from), on_all_ranks=True) if resume_from else None
        self._agreed(lambda: rundir.set_up(run_dir, config, self.tokenizer, resume, self.device, ctx.world_size))
        if ctx.is_main and resume:
            self.log.truncate_after(self.step)  # the steps after the checkpoint are redone
        if rng is not None:
            restore_rng(rng)
            self._say(f"resumed from {resume_from} at step {self.step} (epoch {self.epoch})")
        self.lr = self.schedule.lr(self.step + 1)
        self.writer = self._tensorboard()
        self._interval_started = time.monotonic()

    # ---- setup ------------------------------------------------------------------------------
    def _load_data(self) -> None:
        if self.ctx.enabled:  # rank 0 prepares alone; the others would race it on the same folder
            failure = None
            if self.ctx.is_main:
                try:
                    prepare(self.config.data)
                except NMTError as error:
                    failure = (error.message, error.hint)
            failure = self.ctx.broadcast(failure)
            if failure is not None:
                raise NMTError(*failure)
        data = load_prepared(self.config.data)
        self.tokenizer = data.tokenizer
        pairs = within_words(data.pairs("train"), self.tc.max_words)
        if not pairs:
            raise NMTError(
                f"the training split of {self.config.data.dir} has no pairs"
                + (f" of at most {self.tc.max_words} words (training.max_words)." if self.tc.max_words else "."),
                "Raise training.max_words, or check data.* and re-run nmt prepare.",
            )
        self.src = [self.tokenizer.encode_src(s) for s, _ in pairs]
        self.tgt = [self.tokenizer.encode_tgt(t) for _, t in pairs]
        self.sampler = TokenBatchSampler(
            [len(s) for s in self.src], [len(t) for t in self.tgt], self.tc.batch_tokens, seed=self.tc.seed
        )
        self.valid = build_valid_set(data.pairs("valid"), self.tokenizer, self.tc.valid_max_sentences)

    def _agreed(self, action: Callable[[], T], on_all_ranks: bool = False) -> T:
        """Run `action` on rank 0 (or on every rank); an NMTError on any rank is raised on all of them,
        so no rank waits forever in a collective. Returns rank 0's result (every rank's own, if on_all_ranks)."""
        outcome: tuple[str, Any] = ("ok", None)
        if on_all_ranks or self.ctx.is_main:
            try:
                outcome = ("ok", action())
            except NMTError as error:
                outcome = ("error", (error.message, error.hint))
        if on_all_ranks:
            errors = [e for e in self.ctx.gather(outcome[1] if outcome[0] == "error" else None) if e is not None]
            kind, value = ("error", errors[0]) if errors else outcome
        else:
            kind, value = self.ctx.broadcast(outcome)
        if kind == "error":
            raise NMTError(*value)
        return value

    def _restore(self, path: Path) -> dict[str, Any]:
        """Load step checkpoint `path` into the model, optimiser and loop state, refusing one this run cannot
        continue; writes nothing. Returns this rank's saved RNG state, for the caller to restore last."""
        state = load_checkpoint(path, map_location=self.device)
        sizes = (state.get("src_vocab_size"), state.get("tgt_vocab_size"))
        if sizes != (self.tokenizer.src_vocab_size, self.tokenizer.tgt_vocab_size):
            raise NMTError(
                f"{path} was trained with vocabularies {sizes} but the tokenizer has "
                f"{(self.tokenizer.src_vocab_size, self.tokenizer.tgt_vocab_size)}.",
                "Point data.dir at the data the run was trained on, or start a new run.",
            )
        try:
            self.model.load_state_dict(state["model"])
            self.optimizer.load_state_dict(state["optimizer"])
            self.schedule.load_state_dict(state["schedule"])
            if state["scaler"]:  # {} = saved with the scaler disabled (fp32, bf16 or CPU): keep the fresh one
                self.scaler.load_state_dict(state["scaler"])
            self.step, self.epoch, self.position = state["step"], state["epoch"], state["position"]
            self.best_score, self.best_step = state["best_score"], state["best_step"]
            self.bad_validations = state["bad_validations"]
            self.acc = dict(state["log_acc"])
            self.elapsed_before = state["elapsed_s"]
            rngs = state["rng"]
            saved_world_size = state["world_size"]
        except (RuntimeError, ValueError, KeyError) as exc:
            raise NMTError(f"{path} is not a resumable checkpoint of this model ({type(exc).__name__}: "
                           f"{str(exc).splitlines()[0]}).",
                           "Resume with the config the run was trained with, or delete that file.") from None
        if saved_world_size != self.ctx.world_size:
            # Each process trains on its own shard of every epoch's batches, so another count cannot continue it.
            raise NMTError(
                f"{path} was saved by a run with {saved_world_size} process(es) but this run has "
                f"{self.ctx.world_size}.",
                f"Resume with {saved_world_size} process(es) (torchrun --nproc_per_node={saved_world_size}, "
                "or plain `nmt train` for 1), or start a new run.",
            )
        self.saved_step = self.step
        self.last_validation = state.get("last_validation")
        return rngs[self.ctx.rank]

    def _tensorboard(self) -> Any:
        if not (self.tc.tensorboard and self.ctx.is_main):
            return None
        return rundir.summary_writer_class()(log_dir=str(self.run_dir / "tensorboard"), purge_step=self.step + 1)

    # ---- the loop ---------------------------------------------------------------------------
    def run(self) -> dict[str, Any]:
        """Train until max_steps, early stopping, or a signal (checkpoint, then KeyboardInterrupt)."""
        ceiling = f" (of at most {self.tc.max_words} words)" if self.tc.max_words else ""
        self._say(f"{len(self.src):,} training pairs{ceiling}, {len(self.valid.references):,} validation sentences, "
                  f"device {self.device}, {self.ctx.world_size} process(es)")
        if self.ctx.enabled:
            print(f"rank {self.ctx.rank}/{self.ctx.world_size}: training on {self.device}, "
                  f"{len(self._epoch_batches(self.epoch))} batches per epoch in its shard", flush=True)
        progress = self._progress = self._progress_bar()
        self._session_start = (self.step, time.monotonic())  # this process's pace gives the ETA
        stopped_by = "max_steps"
        try:
            with self._writing(), StopRequest(self._say) as stop_request:
                if self.tc.patience > 0 and self.bad_validations >= self.tc.patience:
                    stopped_by = "early_stopping"
                while stopped_by == "max_steps" and self.step < self.tc.max_steps:
                    if self.ctx.any(stop_request.requested):
                        self._save_step_checkpoint()
                        raise KeyboardInterrupt
                    self._train_step(self._next_batch())
                    self.step += 1
                    if progress is not None:
                        progress.update(1)
                    if self.step % self.tc.log_every == 0:
                        self._log_training()
                    if self.step % self.tc.validate_every == 0 and self._validate():
                        stopped_by = "early_stopping"
                    # the last step's checkpoint is written after the loop, once its validation is in it
                    if stopped_by != "max_steps" or (
                        self.step % self.tc.checkpoint_every == 0 and self.step < self.tc.max_steps
                    ):
                        self._save_step_checkpoint()
                # max_steps off the validation grid: the final model is validated too, so that it competes
                # for best.pt and evaluation never silently uses an older one
                closing = stopped_by == "max_steps" and (self.last_validation or {}).get("step") != self.step
                if closing:
                    self._validate(closing=True)
                if closing or self.saved_step != self.step:
                    self._save_step_checkpoint()
        finally:
            if progress is not None:
                progress.close()
            self._progress = None
            if self.writer is not None:
                self.writer.close()
        with self._writing():
            return self._finish(stopped_by)

    @contextlib.contextmanager
    def _writing(self) -> Iterator[None]:
        """Turn an OSError writing the run (a full disk: checkpoints, log, summary) into an NMTError naming
        the file, the checkpoint left intact (each is written whole or not at all) and how to continue."""
        try:
            yield
        except OSError as error:
            last = latest_step_checkpoint(self.run_dir)
            reached = checkpoint_step(last) if last is not None else 0
            intact = (f"{last} (step {reached}) is intact, as are the other checkpoints" if last is not None
                      else "no step checkpoint was saved yet")
            raise NMTError(
                f"could not write {error.filename or f'into {self.run_dir}'} at step {self.step} "
                f"({error.strerror or error}); {intact}.",
                "Free space on that disk (or fix the folder), then run the same command with --resume: "
                f"it continues from step {reached}.",
            ) from None

    def _next_batch(self) -> list[int]:
        if self.batches is None:
            self.batches = self._epoch_batches(self.epoch)
        while self.position >= len(self.batches):
            self.epoch, self.position = self.epoch + 1, 0
            self.batches = self._epoch_batches(self.epoch)
        indices = self.batches[self.position]
        self.position += 1
        return indices

    def _epoch_batches(self, epoch: int) -> list[list[int]]:
        batches = self.sampler.epoch(epoch)
        if self.ctx.enabled:
            batches = shard(batches, self.ctx.rank, self.ctx.world_size)
        if not batches:
            raise NMTError(
                f"an epoch has no batches for {self.ctx.world_size} process(es) ({len(self.src)} training pairs).",
                "Use more training data, a smaller training.batch_tokens, or fewer processes.",
            )
        return batches

    def _autocast(self) -> contextlib.AbstractContextManager[Any]:
        if self.amp_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(device_type="cuda", dtype=self.amp_dtype)

    def _train_step(self, indices: list[int]) -> None:
        batch = make_batch([self.src[i] for i in indices], [self.tgt[i] for i in indices], indices).to(self.device)
        self.lr = self.schedule.apply(self.optimizer, self.step + 1)
        self.optimizer.zero_grad(set_to_none=True)
        self.wrapped.train()
        with self._autocast():
            loss_sum = batch_loss_sum(self.wrapped, batch, self.tc.label_smoothing)
        total_loss, total_tokens = self.ctx.sum([float(loss_sum.detach()), float(batch.n_tgt_tokens)])
        if not math.isfinite(total_loss):
            self._diverged(f"the training loss is {total_loss}")
        # DDP averages gradients over ranks: scale so the result is the mean over all ranks' tokens.
        loss = loss_sum * (self.ctx.world_size / total_tokens)
        self.scaler.scale(loss).backward()
        self.scaler.unscale_(self.optimizer)
        clip = self.tc.clip_grad_norm if self.tc.clip_grad_norm > 0 else math.inf
        norm = float(torch.nn.utils.clip_grad_norm_(self.model.parameters(), clip))
        if not math.isfinite(norm) and not self.scaler.is_enabled():
            self._diverged(f"the gradient norm is {norm}")
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self.acc["loss"] += total_loss
        self.acc["tokens"] += total_tokens

    def _diverged(self, what: str) -> None:
        last = latest_step_checkpoint(self.run_dir)
        raise NMTError(
            f"training diverged at step {self.step + 1} (epoch {self.epoch}): {what}; nothing was saved "
            f"from this state. Last good checkpoint: {last or 'none'}.",
            "Lower training.learning_rate, keep training.clip_grad_norm > 0 or use training.precision: fp32, "
            "then --resume (or start again).",
        )

    # ---- logging, validation, checkpoints ------------------------------------------------------
    def _log_training(self) -> None:
        seconds = self.acc["seconds"] + (time.monotonic() - self._interval_started)
        loss = self.acc["loss"] / max(self.acc["tokens"], 1.0)
        event = {
            "event": "train", "step": self.step, "epoch": self.epoch, "loss": loss, "ppl": safe_exp(loss),
            "tgt_tokens_per_s": self.acc["tokens"] / max(seconds, 1e-9), "lr": self.lr,
            "elapsed_s": self._elapsed(),
        }
        self.acc = {"loss": 0.0, "tokens": 0.0, "seconds": 0.0}
        self._interval_started = time.monotonic()
        if not self.ctx.is_main:
            return
        self.log.write(event)
        self._scalars({"train/loss": loss, "train/tgt_tokens_per_s": event["tgt_tokens_per_s"], "train/lr": self.lr})
        # a line of its own in a terminal too (above the bar): the loss history stays on screen
        self._say(f"step {self.step}/{self.tc.max_steps} epoch {self.epoch} loss {loss:.4f} ppl {event['ppl']:.2f} "
                  f"{event['tgt_tokens_per_s']:.0f} tgt tok/s lr {self.lr:.3g} elapsed "
                  f"{format_duration(event['elapsed_s'])} eta {format_duration(self._eta())}")

    def _elapsed(self) -> float:
        return self.elapsed_before + time.monotonic() - self.started

    def _eta(self) -> float:
        """Seconds to max_steps at this process's pace so far, validations included."""
        first_step, began = self._session_start
        done = self.step - first_step
        return (time.monotonic() - began) / done * (self.tc.max_steps - self.step) if done > 0 else math.nan

    def _validate(self, closing: bool = False) -> bool:
        """Validate on rank 0, share the result, update best.pt, the plateau schedule and early stopping.
        True = stop.

        The `closing` validation of a last step off the validate_every grid updates best.pt only: the
        learning rate and early stopping follow the periodic validations, as they do in a longer run, so
        that a run continued with --resume takes the learning-rate path of one trained straight through.
        """
        result: ValidationResult | None = None
        began = time.monotonic()
        if self.ctx.is_main:
            result = validate(self.model, self.valid, self.tokenizer, self.config, self.device, self._autocast)
        result = self.ctx.broadcast(result)
        self._interval_started += time.monotonic() - began  # throughput counts training time only
        assert result is not None
        metric = self.tc.early_stopping_metric
        score = result.score(metric)
        improved = is_better(score, self.best_score, metric)
        if improved:
            self.best_score, self.best_step = score, self.step
            if self.ctx.is_main:
                save_checkpoint(self.run_dir / CHECKPOINT_DIR / BEST_NAME, self._best_state(score))
        decayed = False
        if not closing:
            self.bad_validations = 0 if improved else self.bad_validations + 1
            decayed = self.schedule.observe(score)
        self.last_validation = {
            "step": self.step, "valid_loss": result.loss, "valid_ppl": result.ppl, "valid_bleu": result.bleu,
        }
        if self.ctx.is_main:
            self.log.write({
                "event": "valid", "step": self.step, "epoch": self.epoch, "lr": self.lr,
                "valid_loss": result.loss, "valid_ppl": result.ppl, "valid_bleu": result.bleu,
                "bleu_signature": result.signature, "valid_sentences": result.sentences,
                "best_step": self.best_step, "best_score": self.best_score, "lr_decayed": decayed,
                "elapsed_s": self._elapsed(),
            })
            self._scalars({"valid/loss": result.loss, "valid/ppl": result.ppl, "valid/bleu": result.bleu})
            self._say(f"validation at step {self.step}: loss {result.loss:.4f} ppl {result.ppl:.2f} "
                      f"BLEU {result.bleu:.2f} (best {metric} {format_score(self.best_score, metric)} "
                      f"at step {self.best_step})")
        return not closing and self.tc.patience > 0 and self.bad_validations >= self.tc.patience

    def _best_state(self, score: float) -> dict[str, Any]:
        return {
            "model": self.model.state_dict(), "step": self.step, "score": score,
            "metric": self.tc.early_stopping_metric, "config": self.config.to_dict(),
            "src_vocab_size": self.tokenizer.src_vocab_size, "tgt_vocab_size": self.tokenizer.tgt_vocab_size,
        }

    def _save_step_checkpoint(self) -> None:
        rngs = self.ctx.gather(capture_rng())
        self.saved_step = self.step
        if not self.ctx.is_main:
            return
        seconds = self.acc["seconds"] + time.monotonic() - self._interval_started
        state = {
            **self._best_state(self.best_score if self.best_score is not None else math.nan),
            "optimizer": self.optimizer.state_dict(), "schedule": self.schedule.state_dict(),
            "scaler": self.scaler.state_dict(), "epoch": self.epoch, "position": self.position,
            "best_score": self.best_score, "best_step": self.best_step, "bad_validations": self.bad_validations,
            "log_acc": {**self.acc, "seconds": seconds}, "elapsed_s": self._elapsed(), "rng": rngs,
            "last_validation": self.last_validation, "world_size": self.ctx.world_size,
        }
        save_checkpoint(self.run_dir / CHECKPOINT_DIR / step_checkpoint_name(self.step), state)
        prune_step_checkpoints(self.run_dir, self.tc.keep_last)

    def _finish(self, stopped_by: str) -> dict[str, Any]:
        summary = {
            "final_step": self.step, "epoch": self.epoch, "stopped_by": stopped_by,
            "best_step": self.best_step, "best_score": self.best_score,
            "early_stopping_metric": self.tc.early_stopping_metric, "last_validation": self.last_validation,
            "wall_time_s": self._elapsed(), "parameters": self.parameters,
            "model": "RNNsearch" if self.model.has_attention else "RNNencdec",
            "device": str(self.device), "world_size": self.ctx.world_size,
        }
        if self.ctx.is_main:
            rundir.write_summary(self.run_dir, summary)
            metric = self.tc.early_stopping_metric  # a finished run has validated its last step at least
            self._say(f"finished at step {self.step} ({stopped_by}) after {format_duration(self._elapsed())}; "
                      f"best {metric} {format_score(self.best_score, metric)} at step {self.best_step}; "
                      f"run dir {self.run_dir}")
        return summary

    # ---- small helpers ----------------------------------------------------------------------
    def _say(self, text: str) -> None:
        if not self.ctx.is_main:
            return
        if self._progress is not None:
            tqdm.write(text)  # above the bar, which a plain print would break into two
        else:
            print(text, flush=True)

    def _scalars(self, values: dict[str, float]) -> None:
        if self.writer is not None:
            for name, value in values.items():
                self.writer.add_scalar(name, value, self.step)

    def _progress_bar(self) -> Any:
        """A bar on the terminal stdout is, or None. It is cleared when it closes (leave=False): the step
        lines above it and the closing "finished at step" line say what it said, and a finished bar
        drawn again on closing would show twice wherever carriage returns are not honoured (logs of a
        terminal session)."""
        if not (self.ctx.is_main and sys.stdout.isatty()):
            return None
        try:
            known = os.get_terminal_size(sys.stdout.fileno()).columns > 0
        except (OSError, ValueError):
            known = False
        columns, rows = (None, None) if known else FALLBACK_SIZE
        return tqdm(total=self.tc.max_steps, initial=self.step, unit="step", file=sys.stdout, leave=False,
                    dynamic_ncols=known, ncols=columns, nrows=rows)
