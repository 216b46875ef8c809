"""`nmt train`: the training loop, with validation, early stopping, mixed precision, DDP and exact resume.

Exactness on resume comes from three things: batches are a pure function of (seed, epoch) and the
checkpoint records the position in the epoch's list; every RNG state is saved and restored; and
the running log accumulators are saved too, so the resumed run logs the very same numbers.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NoReturn

import torch

from nmt.config import Config
from nmt.data.batching import Batch, make_batch
from nmt.errors import NMTError, counted, first_line, out_of_memory
from nmt.fileio import DiskFullError
from nmt.models.interface import TranslationModel, build_model, count_parameters
from nmt.rundir import writing as rundir
from nmt.rundir.checkpoints import TrainingState, interrupted_checkpoint_name
from nmt.rundir.checks import check_run_dir
from nmt.rundir.lock import RunLock
from nmt.training.checkpointing import (
    best_checkpoint_step,
    disk_error,
    restore,
    weights_checkpoint,
    write_best,
    write_step,
)
from nmt.training.compiling import compile_fallback, compiles, training_module
from nmt.training.data import StepBatch, load_training_data
from nmt.training.distributed import DistContext, setup_distributed
from nmt.training.optim import LRSchedule, Patience, build_optimizer, schedule_warnings
from nmt.training.precision import autocast, precision_fallback, precision_name, resolve_precision
from nmt.training.queued_steps import QueuedSteps
from nmt.training.rng import capture_rng, restore_rng, seed_everything
from nmt.training.terminal import StopRequest, Terminal, format_duration, format_score
from nmt.training.validation import ValidationResult, batch_loss_sum, safe_exp, validate


def train(config: Config, run_dir: Path, resume: bool = False) -> dict[str, Any]:
    """Train the model `config` describes into `run_dir` (continue it with resume=True); return summary.json.
    The process's torch threads are as they were after it (`training.threads` sets them for the run alone: in an
    experiment's one process, the next run's default is not this run's choice, CPU floats hanging on it)."""
    ctx = setup_distributed(config.training.device)
    lock = RunLock(run_dir)  # rank 0 takes it once the run directory's checks pass
    threads = torch.get_num_threads()
    try:
        summary = Trainer(config, run_dir, resume, ctx, lock).run()
        ctx.barrier()  # no rank leaves the process group while another still uses it
        return summary
    finally:
        lock.release()
        ctx.close()
        torch.set_num_threads(threads)


def initial_model(config: Config, src_vocab_size: int, tgt_vocab_size: int) -> TranslationModel:
    """The model a run of `config` starts from (on the CPU, before any step): every RNG seeded with
    training.seed, then `build_model`. One function for the Trainer and for whoever rebuilds a run's
    initialisation afterwards (nmt attention-scaling), so the two cannot drift apart."""
    seed_everything(config.training.seed)
    return build_model(config.model, src_vocab_size, tgt_vocab_size)


def fresh_accumulators() -> dict[str, float]:
    """The running sums of one logging interval: loss, target tokens, training seconds."""
    return {"loss": 0.0, "tokens": 0.0, "seconds": 0.0}


class Trainer:
    """One training run: set up (or restore) everything, then `run` the loop. `lock` (default: a new
    RunLock of `run_dir`) is taken on rank 0 once the run directory's checks pass; whoever ends the
    training releases it (`train` does), else the end of the process drops it."""

    def __init__(
        self, config: Config, run_dir: Path, resume: bool, ctx: DistContext, lock: RunLock | None = None
    ) -> None:
        self.config, self.run_dir, self.ctx = config, run_dir, ctx
        self.tc = tc = config.training
        self.device = ctx.device
        self.terminal = Terminal(ctx.is_main)
        if tc.threads > 0:
            torch.set_num_threads(tc.threads)
        # a run directory that is refused is refused before the data is loaded (or prepared) and anything is
        # printed; `_claim` checks it again, with the lock held
        ctx.agreed(lambda: check_run_dir(run_dir, config, resume))
        # the RNGs are seeded by initial_model, just before the build: loading the data draws from none of
        # them (the sampler has its own seeded Random; sentencepiece trains in a child process)
        self.data = load_training_data(config, ctx)
        # a training set too small for the batch size and the processes is refused before the run dir is written
        # (an epoch's batch count hardly varies with its shuffle; each epoch checks its own)
        ctx.agreed(lambda: self.data.epoch_batches(1, ctx), on_all_ranks=True)
        self.started = time.monotonic()  # training time (max_minutes, elapsed_s) counts from here: not `prepare`'s
        self.tokenizer = self.data.tokenizer
        # Everything is built, and a resumed checkpoint loaded, before the run dir is written (only its lock is
        # taken): a config the model refuses or an unusable checkpoint must leave the previous run (and its
        # summary.json) as it was.
        self._build_model()
        self.optimizer = build_optimizer(self.model.parameters(), tc)
        self.schedule = LRSchedule(tc)
        self.amp_dtype = resolve_precision(tc.precision, self.device)
        self.scaler = torch.amp.GradScaler("cuda", enabled=self.amp_dtype == torch.float16)
        self.queued = QueuedSteps(ctx, run_dir, finite_norm=not self.scaler.is_enabled())
        self.step = self.position = self.saved_step = self.resumable_step = 0  # a periodic / any checkpoint's step
        self.epoch = 1
        self.stopping = Patience(tc.early_stopping_metric, tc.patience)
        self.acc = fresh_accumulators()
        self.elapsed_before = 0.0
        self.last_validation: dict[str, Any] | None = None
        self.best_unsaved = False  # this step's validation is the best: best.pt follows its checkpoint
        self.batches: list[StepBatch] | None = None
        self.log = rundir.RunLog(run_dir / "log.jsonl")
        self.terminal.say(self.model.describe())
        self.lock = lock or RunLock(run_dir)
        self._claim(resume)
        self.lr = self.schedule.lr(max(self.step, 1))  # the last update's rate, which a validation done again logs
        self.writer = None
        if tc.tensorboard and ctx.is_main:
            self.writer = rundir.summary_writer_class()(log_dir=str(run_dir / "tensorboard"), purge_step=self.step + 1)
        self._interval_started = time.monotonic()

    # ---- setup ------------------------------------------------------------------------------
    def _build_model(self) -> None:
        """The model on this process's device, and its dropout seed; `wrapped`, what the training step calls:
        the model, or the model through torch.compile (training.compile), in DDP under torchrun."""
        try:
            self.model = initial_model(self.config, self.tokenizer.src_vocab_size, self.tokenizer.tgt_vocab_size)
            self.recomputes = self.model.recompute_attention(self.tc.recompute_attention)
            self.model.to(self.device)
        except (MemoryError, RuntimeError) as error:  # the batch size is not what to lower here
            # a size past any memory: torch cannot even count its bytes ("Storage size calculation overflowed")
            if not (out_of_memory(error) or "size calculation overflowed" in str(error)):
                raise
            raise NMTError(f"the model does not fit in memory on {self.device} ({first_line(error)}).",
                           "Make it smaller: model.hidden_size, model.embedding_size, model.layers or data.vocab_size; "
                           "nothing of the run was trained.") from None
        self.parameters = count_parameters(self.model)
        if self.ctx.rank > 0:
            torch.manual_seed(self.tc.seed + 1000 * self.ctx.rank)  # own dropout masks per rank; init came from rank 0
        self.compiled = compiles(self.tc.compile, self.model)
        self.wrapped = training_module(self.model, self.tc.compile, ddp=self.ctx.enabled)

    def _claim(self, resume: bool) -> None:
        """Check and lock the run directory, load the checkpoint to resume from (if any), then write the
        run's config, environment and tokenizer; the RNG states are restored last, once nothing draws."""
        run_dir, config, ctx = self.run_dir, self.config, self.ctx
        resume_from = ctx.agreed(lambda: rundir.claim(run_dir, config, self.tokenizer, resume, self.lock))
        rng = ctx.agreed(lambda: self._restore(resume_from), on_all_ranks=True) if resume_from else None
        ctx.agreed(lambda: rundir.set_up(run_dir, config, self.tokenizer, self.device, ctx.world_size, self.step))
        if resume_from and self.stopping.best_score is not None and self.stopping.best_step == self.step:
            with self._writing():
                ctx.agreed(self._complete_best)
        if ctx.is_main and resume:
            self.log.truncate_after(self.step)  # the steps after the checkpoint are redone
        if rng is not None:
            note = restore_rng(rng, self.device)
            if note:
                self.terminal.say(note)
            self.terminal.say(f"resumed from {resume_from} at step {self.step} (epoch {self.epoch})")

    def _restore(self, path: Path) -> dict[str, Any]:
        """Load step checkpoint `path` into the model, optimiser and loop state (see checkpointing.restore);
        writes nothing. Returns this rank's saved RNG state, for the caller to restore last."""
        self.step, state = restore(path, self.model, self.optimizer, self.schedule, self.scaler, self.tokenizer,
                                   self.ctx.world_size)
        self.epoch, self.position = state.epoch, state.position
        # NaN: "none" in periodic_best, and an older checkpoint's best validation that nothing beats
        best = None if state.best_score is None or math.isnan(state.best_score) else state.best_score
        self.stopping.best_score, self.stopping.best_step = best, state.best_step
        self.stopping.bad_validations = state.bad_validations
        periodic = state.periodic_best  # absent (None) in an older checkpoint: its best served
        self.stopping.periodic_best = best if periodic is None else None if math.isnan(periodic) else periodic
        self.acc = dict(state.log_acc)
        self.elapsed_before = state.elapsed_s
        # a checkpoint for --resume only (interrupted_*.pt): its step still gets a periodic one at the end
        self.saved_step = -1 if path.name == interrupted_checkpoint_name(self.step) else self.step
        self.resumable_step = self.step
        self.last_validation = state.last_validation
        return state.rng[self.ctx.rank]

    def _complete_best(self) -> None:
        """Write best.pt from the weights resumed, where their step's validation is the run's best and the
        run stopped between that step's checkpoint and best.pt (`_save_step_checkpoint` writes them in turn)."""
        if best_checkpoint_step(self.run_dir) != self.step:
            self._write_best()

    # ---- the loop ---------------------------------------------------------------------------
    def run(self) -> dict[str, Any]:
        """Train until max_steps, early stopping, or a signal (checkpoint, then KeyboardInterrupt)."""
        ceiling = f" (of at most {counted(self.tc.max_words, 'word')})" if self.tc.max_words else ""
        self.terminal.say(f"{len(self.data.src):,} training pairs{ceiling}, "
                          f"{len(self.data.valid.references):,} validation sentences, "
                          f"device {self.device}, {self.ctx.world_size} process(es)")
        # an explicit setting that cannot apply, or a schedule that cannot do what it says, says so (summary.json
        # records the precision and compile that ran)
        unused_recompute = None if self.recomputes or not self.tc.recompute_attention else (
            f"warning: training.recompute_attention applies to additive attention (RNNsearch's); {self.model.name} has "
            "no additive attention, so the setting has no effect.")
        for fallback in (precision_fallback(self.tc.precision, self.device), compile_fallback(self.tc.compile, self.model),
                         unused_recompute, *schedule_warnings(self.tc)):
            if fallback is not None:
                self.terminal.say(fallback)
        if self.ctx.enabled:
            print(f"rank {self.ctx.rank}/{self.ctx.world_size}: training on {self.device}, "
                  f"{len(self.data.epoch_batches(self.epoch, self.ctx))} batches per epoch in its shard", flush=True)
        self.terminal.open_bar(self.tc.max_steps, self.step)
        self._session_start = (self.step, time.monotonic())  # this process's pace gives the ETA
        try:
            with self._writing(), StopRequest(self.terminal.say) as stop_request:
                stopped_by = self._loop(stop_request)
        finally:
            self.terminal.close_bar()
            if self.writer is not None:
                self.writer.close()
        with self._writing():
            return self._finish(stopped_by)

    def _loop(self, stop_request: StopRequest) -> str:
        """The steps up to max_steps (or max_minutes), validating and checkpointing on their grids; returns why
        it stopped: early_stopping, max_steps or max_minutes."""
        stopped_by = "early_stopping" if self.stopping.exhausted else "max_steps"
        on_validation_grid = self.step > 0 and self.step % self.tc.validate_every == 0
        if on_validation_grid and (self.last_validation or {}).get("step") != self.step:
            # resumed from a stop in this step's validation, which recorded nothing of it: it is done now
            stopped_by = self._end_step(stop_request)
        while stopped_by == "max_steps" and self.step < self.tc.max_steps:
            # on any rank: all stop together
            interrupted, out_of_time = self.ctx.sum([float(stop_request.requested), float(self._out_of_time())])
            if interrupted > 0:
                self._interrupt()
            if out_of_time > 0:
                stopped_by = "max_minutes"
                break
            self._train_step(*self._next_batch())
            self.step += 1
            self.terminal.advance()
            self.queued.read(keep=1)  # the step before: its values are ready, or nearly, and this one is queued
            if self.step % self.tc.log_every == 0:
                self._log_training()
            stopped_by = self._end_step(stop_request)
        # max_steps off the validation grid: the final model is validated too, so that it competes
        # for best.pt and evaluation never silently uses an older one
        closing = stopped_by != "early_stopping" and (self.last_validation or {}).get("step") != self.step
        if closing:
            self._validate(stop_request, closing=True)
        if closing or self.saved_step != self.step or self.best_unsaved:
            self._save_step_checkpoint()
        self._read_steps()
        return stopped_by

    def _end_step(self, stop_request: StopRequest) -> str:
        """A step's validation and checkpoint, each on its grid, and a checkpoint for --resume only where the
        validation is the best off the checkpoints' grid; returns 'early_stopping' or 'max_steps'."""
        stopped_by = "max_steps"
        if self.step % self.tc.validate_every == 0 and self._validate(stop_request):
            stopped_by = "early_stopping"
        if stopped_by == "max_steps" and self.step >= self.tc.max_steps:
            return stopped_by  # the last step's checkpoint is written after the loop, once its validation is in it
        if stopped_by != "max_steps" or self.step % self.tc.checkpoint_every == 0:
            self._save_step_checkpoint()
        elif self.best_unsaved:
            self._save_step_checkpoint(resume_only=True)
        return stopped_by

    def _interrupt(self) -> NoReturn:
        """Stop as asked (Ctrl-C, SIGTERM): a checkpoint for --resume (none where this step's is written
        already), then KeyboardInterrupt."""
        if self.resumable_step != self.step:
            self._save_step_checkpoint(resume_only=True)
        raise KeyboardInterrupt

    @contextlib.contextmanager
    def _writing(self) -> Iterator[None]:
        """Turn an OSError writing the run (a full disk) into an NMTError naming the file and how to continue."""
        try:
            yield
        except BrokenPipeError:  # stdout's reader left (`nmt train ... | head`): nmt's own quiet exit, no disk's fault
            raise
        except (OSError, DiskFullError) as error:
            raise disk_error(self.run_dir, self.step, error) from None

    def _next_batch(self) -> tuple[Batch, int]:
        """The next batch, on the device, and its step's target tokens on all processes; past an epoch's end,
        the next epoch's first."""
        if self.batches is None:
            self.batches = self.data.epoch_batches(self.epoch, self.ctx)
        while self.position >= len(self.batches):
            self.epoch, self.position = self.epoch + 1, 0
            self.batches = self.data.epoch_batches(self.epoch, self.ctx)
        indices, step_tokens = self.batches[self.position]
        self.position += 1
        src, tgt = self.data.src, self.data.tgt
        return make_batch([src[i] for i in indices], [tgt[i] for i in indices], indices).to(self.device), step_tokens

    def _train_step(self, batch: Batch, step_tokens: int) -> None:
        """One update on `batch`, queued: nothing here waits for the device, nor for the other processes.
        `step_tokens`: the real target tokens of the step on all processes (`StepBatch`). Its loss and
        gradient norm are read later (`_read_steps`)."""
        self.lr = self.schedule.apply(self.optimizer, self.step + 1)
        self.optimizer.zero_grad(set_to_none=True)
        self.wrapped.train()
        with autocast(self.amp_dtype):
            loss_sum = batch_loss_sum(self.wrapped, batch, self.tc.label_smoothing)
        # DDP averages gradients over ranks: scale so the result is the mean over all ranks' tokens.
        loss = loss_sum * (self.ctx.world_size / float(step_tokens))
        self.scaler.scale(loss).backward()
        self.scaler.unscale_(self.optimizer)
        clip = self.tc.clip_grad_norm if self.tc.clip_grad_norm > 0 else math.inf
        norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), clip)
        self.scaler.step(self.optimizer)  # fp16's loss scaler skips a step whose gradient is not finite
        self.scaler.update()
        self.queued.append(self.step + 1, self.epoch, loss_sum, norm)
        self.acc["tokens"] += float(step_tokens)

    def _read_steps(self) -> None:
        """Read every queued step (nmt/training/queued_steps.py), their losses into the log's sums."""
        for loss in self.queued.drain():
            self.acc["loss"] += loss

    # ---- logging, validation, checkpoints ------------------------------------------------------
    def _log_training(self) -> None:
        """Log the interval since the last log line (rank 0 writes it), and start the next interval."""
        self._read_steps()
        seconds = self.acc["seconds"] + (time.monotonic() - self._interval_started)
        loss = self.acc["loss"] / max(self.acc["tokens"], 1.0)
        # a label-smoothed loss is no cross-entropy of the data: its exp is no perplexity (validation's is one)
        smoothed = self.tc.label_smoothing > 0
        event = {
            "event": "train", "step": self.step, "epoch": self.epoch, "loss": loss,
            **({"label_smoothing": self.tc.label_smoothing} if smoothed else {"ppl": safe_exp(loss)}),
            "tgt_tokens_per_s": self.acc["tokens"] / max(seconds, 1e-9), "lr": self.lr,
            "elapsed_s": self._elapsed(),
        }
        self.acc = fresh_accumulators()
        self._interval_started = time.monotonic()
        if not self.ctx.is_main:
            return
        self.log.write(event)
        self._scalars({"train/loss": loss, "train/tgt_tokens_per_s": event["tgt_tokens_per_s"], "train/lr": self.lr})
        # a line of its own in a terminal too (above the bar): the loss history stays on screen
        loss_text = f"loss {loss:.4f} (label-smoothed)" if smoothed else f"loss {loss:.4f} ppl {event['ppl']:.2f}"
        self.terminal.say(f"step {self.step}/{self.tc.max_steps} epoch {self.epoch} {loss_text} "
                          f"{event['tgt_tokens_per_s']:.0f} tgt tok/s lr {self.lr:.3g} "
                          f"elapsed {format_duration(event['elapsed_s'])} eta {self._eta_text()}")

    def _elapsed(self) -> float:
        return self.elapsed_before + time.monotonic() - self.started

    def _out_of_time(self) -> bool:
        """training.max_minutes reached by the run's training time (all its sessions, validations included)."""
        return self.tc.max_minutes > 0 and self._elapsed() >= 60 * self.tc.max_minutes

    def _eta_text(self) -> str:
        """The time to max_steps at this process's pace so far, validations included; with early stopping
        also the time to the step where it ends the run if no validation from here on improves (max_steps
        is then only a cap, and its time alone says little of when the run ends)."""
        first_step, began = self._session_start
        done = self.step - first_step
        pace = (time.monotonic() - began) / done if done > 0 else math.nan
        text = format_duration(pace * (self.tc.max_steps - self.step))
        stop = self.stopping.last_step(self.step, self.tc.validate_every)
        if stop is not None and stop < self.tc.max_steps:
            text += f", or {format_duration(pace * (stop - self.step))} at step {stop:,} if no validation improves"
        return text

    def _validate(self, stop_request: StopRequest, closing: bool = False) -> bool:
        """Validate on rank 0, share the result, update best.pt, the plateau schedule and early stopping;
        True = stop. The `closing` validation of a last step off the validate_every grid updates best.pt
        only: the learning rate and early stopping follow the periodic validations, as in a longer run, so
        that a run continued with --resume takes the learning-rate path of one trained straight through.
        A stop asked for meanwhile ends it at its next batch, records none of it and stops the run
        (`_interrupt`); --resume validates the step again."""
        self._read_steps()
        began = time.monotonic()
        sentences = len(self.data.valid.references)

        def on_rank_0() -> ValidationResult | None:
            with self.terminal.counting(sentences, "sent", "validating") as advance:
                return validate(self.model, self.data.valid, self.tokenizer, self.config, self.device,
                                self.amp_dtype, stop=lambda: stop_request.requested, advance=advance)

        result = self.ctx.agreed(on_rank_0)
        self._interval_started += time.monotonic() - began  # throughput counts training time only
        if result is None:
            self._interrupt()
        score = result.score(self.tc.early_stopping_metric)
        # the same on every rank (one result); best.pt is written after the checkpoint that records it
        self.best_unsaved = self.stopping.observe(score, self.step, counts=not closing)
        decayed = False if closing else self.schedule.observe(result.score(self.schedule.metric))
        scores = {"valid_loss": result.loss, "valid_ppl": result.ppl, "valid_bleu": result.bleu}
        self.last_validation = {"step": self.step, **scores}
        if self.ctx.is_main:
            best_score, best_step, metric = self.stopping.best_score, self.stopping.best_step, self.stopping.metric
            self.log.write({
                "event": "valid", "step": self.step, "epoch": self.epoch, "lr": self.lr, **scores,
                "bleu_signature": result.signature, "valid_sentences": result.sentences,
                "best_step": best_step, "best_score": best_score, "lr_decayed": decayed,
                "elapsed_s": self._elapsed(),
            })
            self._scalars({"valid/loss": result.loss, "valid/ppl": result.ppl, "valid/bleu": result.bleu})
            self.terminal.say(f"validation at step {self.step}: loss {result.loss:.4f} ppl {result.ppl:.2f} "
                              f"BLEU {result.bleu:.2f} (best {metric} {format_score(best_score, metric)} "
                              f"at step {best_step})")
        return not closing and self.stopping.exhausted

    def _save_step_checkpoint(self, resume_only: bool = False) -> None:
        """Write this step's checkpoint (rank 0, its failure told to every rank; every rank takes part in
        gathering the RNG states), periodic or for --resume only (write_step's interruption checkpoint), then
        best.pt where this step's validation is the best: a run stopped at any moment resumes from a
        checkpoint at or past best.pt's step, so that best.pt never holds weights of steps that --resume
        trains again (where it lacks them, `_complete_best` writes them)."""
        self._read_steps()
        began = time.monotonic()
        rngs = self.ctx.gather(capture_rng(self.device))
        self.saved_step, self.resumable_step = -1 if resume_only else self.step, self.step
        self.ctx.agreed(lambda: self._write_step_checkpoint(rngs, resume_only))
        if self.best_unsaved:
            self.ctx.agreed(self._write_best)
            self.best_unsaved = False
        self._interval_started += time.monotonic() - began  # throughput counts training time only, as for validation

    def _write_best(self) -> None:
        """best.pt: the weights of this step, whose validation is the best."""
        score = self.stopping.best_score
        write_best(self.run_dir, weights_checkpoint(self.model, self.step, score, self.config, self.tokenizer))

    def _write_step_checkpoint(self, rngs: list[dict[str, Any]], interrupted: bool) -> None:
        seconds = self.acc["seconds"] + time.monotonic() - self._interval_started
        best = self.stopping.best_score
        state = TrainingState(
            optimizer=self.optimizer.state_dict(), schedule=self.schedule.state_dict(),
            scaler=self.scaler.state_dict(), epoch=self.epoch, position=self.position, best_score=best,
            best_step=self.stopping.best_step, bad_validations=self.stopping.bad_validations,
            log_acc={**self.acc, "seconds": seconds}, elapsed_s=self._elapsed(), rng=rngs,
            last_validation=self.last_validation, world_size=self.ctx.world_size,
            periodic_best=math.nan if self.stopping.periodic_best is None else self.stopping.periodic_best,
        )
        checkpoint = weights_checkpoint(self.model, self.step, best if best is not None else math.nan, self.config, self.tokenizer)
        write_step(self.run_dir, dataclasses.replace(checkpoint, training=state), self.tc.keep_last, interrupted)

    def _finish(self, stopped_by: str) -> dict[str, Any]:
        """Write summary.json, written last: its presence says the run finished. Returns it."""
        best_score, best_step, metric = self.stopping.best_score, self.stopping.best_step, self.stopping.metric
        summary = {
            "final_step": self.step, "epoch": self.epoch, "stopped_by": stopped_by,
            "best_step": best_step, "best_score": best_score,
            "early_stopping_metric": metric, "last_validation": self.last_validation,
            "wall_time_s": self._elapsed(), "parameters": self.parameters,
            "model": self.model.name,
            "device": str(self.device), "precision": precision_name(self.amp_dtype), "compile": self.compiled,
            "world_size": self.ctx.world_size,
        }
        if self.ctx.is_main:
            rundir.write_summary(self.run_dir, summary)
            self.terminal.say(f"finished at step {self.step} ({stopped_by}) after {format_duration(self._elapsed())}; "
                              f"best {metric} {format_score(best_score, metric)} at step {best_step}; "
                              f"run dir {self.run_dir}")
        return summary

    def _scalars(self, values: dict[str, float]) -> None:
        if self.writer is not None:
            for name, value in values.items():
                self.writer.add_scalar(name, value, self.step)
