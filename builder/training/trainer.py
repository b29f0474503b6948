"""The training loop shared by the three families.

AdamW (weight decay on matrices only) with linear warm-up then cosine decay to 10% of the peak rate,
gradient clipping, a held-out split evaluated every `eval_every` steps. The checkpoint keeps the weights
with the best held-out loss (model.safetensors, what export and inference load) and, for resuming, the
latest weights with everything that decides what happens next (optimizer moments, schedule, step, the data
generator, every process's RNG for dropout), so a run killed and resumed ends with exactly the weights of
an uninterrupted run. With `patience`, the run stops once that many evaluations in a row found no better
held-out loss. See `distributed` for runs over several processes.
"""

import copy
import hashlib
import logging
import math
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from tokenizers import Tokenizer

from onnxformer.builder.data import read_text_file
from onnxformer.builder.families import FAMILIES, FamilyModel
from onnxformer.builder.tokenizer import train_tokenizer
from onnxformer.builder.training.batching import Truncation
from onnxformer.builder.training.checkpoint import (
    CHECKPOINT_NAME,
    LOSS_CURVE_NAME,
    Checkpoint,
    CheckpointError,
    check_checkpoint_target,
    load_checkpoint,
    save_checkpoint,
    unique_state_dict,
)
from onnxformer.builder.training.defaults import TRAINING, TrainingTask
from onnxformer.builder.training.distributed import Context, context, unwrap
from onnxformer.builder.training.optimizer import make_optimizer
from onnxformer.builder.training.options import RunPlan, TrainOptions, apply_resume_changes, explicit_changes
from onnxformer.builder.training.plot import loss_curve_png
from onnxformer.builder.versions import tool_versions

logger = logging.getLogger(__name__)

Progress = Callable[[int, int, float, float], None]  # (step, total, loss, tokens per second)
Report = Callable[[str], None]  # one line for the user: an evaluation, a warning


@dataclass(frozen=True)
class TrainResult:
    out: Path
    metrics: dict[str, Any]  # final metrics (of the best checkpoint); {} while the run is unfinished
    parameters: int
    seconds: float
    samples: list[str]
    step: int = 0  # the step the run reached
    best: dict[str, Any] | None = None  # {"step", "val_loss", ...} of the kept weights
    warnings: list[str] = field(default_factory=list)
    stopped_early: bool = False
    already_complete: bool = False  # resumed a finished run: nothing was trained or written
    rank: int = 0  # this process's rank (only rank 0 prints)


def _corpus_digest(options: TrainOptions) -> str | None:
    if options.corpus is None:
        return None
    return hashlib.sha256(read_text_file(options.corpus).encode("utf-8")).hexdigest()


def _schedule(plan: RunPlan) -> Callable[[int], float]:
    def factor(step: int) -> float:
        if step < plan.warmup_steps:
            return (step + 1) / plan.warmup_steps
        progress = (step - plan.warmup_steps) / max(1, plan.steps - plan.warmup_steps)
        return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(progress, 1.0)))

    return factor


def _window_mean(history: dict[str, list], low: int, high: int) -> float | None:
    losses = [loss for s, loss in zip(history["step"], history["train_loss"], strict=True) if low < s <= high]
    return sum(losses) / len(losses) if losses else None


def overfitting_warning(history: dict[str, list], best_step: int | None) -> str | None:
    """A warning when held-out loss rose at the last two evaluations while training loss fell."""
    steps, val = history["eval_step"], history["val_loss"]
    if len(val) < 3 or not val[-1] > val[-2] > val[-3]:
        return None
    before = _window_mean(history, steps[-3], steps[-2])
    after = _window_mean(history, steps[-2], steps[-1])
    if before is None or after is None or not after < before:
        return None
    return (
        f"held-out loss rose from {val[-3]:.3f} (step {steps[-3]}) to {val[-1]:.3f} (step {steps[-1]}) "
        f"while training loss fell ({before:.3f} -> {after:.3f}): the model is memorising its training "
        f"data; the best checkpoint (step {best_step}) is kept. More data, more --dropout, a smaller model "
        "or fewer --steps help"
    )


def _evals_since(history: dict[str, list], step: int | None) -> int:
    return sum(1 for s in history["eval_step"] if step is None or s > step)


@dataclass
class _Saved:
    """What a resumed run starts from: its checkpoint, read back, and the options it continues with."""

    options: TrainOptions
    model: FamilyModel
    tokenizer: Tokenizer
    state: dict[str, Any]
    history: dict[str, list]
    best: dict[str, Any] | None
    best_weights: dict[str, torch.Tensor] | None
    checkpoint: Checkpoint


def _load_saved(out: Path, options: TrainOptions, changes: Mapping[str, Any] | None) -> _Saved:
    if not (out / CHECKPOINT_NAME).is_file():
        raise CheckpointError(f"--resume: {out} holds no checkpoint to resume; drop --resume to start anew")
    saved = load_checkpoint(out, family=options.family, with_training_state=True)
    saved_options = TrainOptions(**saved.extra["train_options"])
    wanted = dict(explicit_changes(options) if changes is None else changes)
    resumed = apply_resume_changes(
        saved_options, wanted, step=saved.step, model_config=asdict(saved.model.config)
    )
    if _corpus_digest(resumed) != saved.extra.get("corpus_sha256"):
        raise CheckpointError(f"--resume: {resumed.corpus} changed since the run began; start a new run")
    state = saved.training_state
    assert state is not None  # loaded with_training_state, or load_checkpoint raised
    best = saved.extra.get("best")
    # A copy: on CPU the state dict shares the parameters' memory, which the latest weights (next line),
    # then training, would overwrite.
    best_weights = {k: v.clone() for k, v in unique_state_dict(saved.model).items()} if best else None
    if "model" in state:  # the latest weights; model.safetensors holds the best
        saved.model.load_state_dict(state["model"], strict=False)
    return _Saved(resumed, saved.model, saved.tokenizer, state, saved.history, best, best_weights, saved)


def _already_complete(saved: _Saved, out: Path, started: float) -> TrainResult | None:
    extra, step = saved.checkpoint.extra, saved.checkpoint.step
    saved_steps = int(extra["train_options"]["steps"])
    finished = extra.get("complete", step >= saved_steps)
    wanted_steps = saved.options.steps
    assert wanted_steps is not None  # the saved run's options were resolved; a resume sets steps, not None
    # A finished run (its steps done, or stopped early) trains again only when given more steps.
    if not finished or wanted_steps > max(step, saved_steps):
        return None
    parameters = sum(p.numel() for p in saved.model.parameters())
    return TrainResult(
        out,
        saved.checkpoint.metrics,
        parameters,
        time.perf_counter() - started,
        [],
        step=step,
        best=saved.best,
        stopped_early=bool(extra.get("stopped_early")),
        already_complete=True,
    )


def _new_model(options: TrainOptions, ctx: Context, texts: list[str]) -> tuple[FamilyModel, Tokenizer]:
    """The tokenizer (trained on rank 0, sent to the others) and the model, initialised alike everywhere."""
    text = train_tokenizer(texts, vocab_size=options.vocab_size).to_str() if ctx.is_main else None
    tokenizer = Tokenizer.from_str(ctx.broadcast(text))
    torch.manual_seed(options.seed)
    spec = FAMILIES[options.family]
    config = spec.config.preset(
        options.preset, vocab_size=tokenizer.get_vocab_size(), **options.model_overrides
    )
    return spec.model(config), tokenizer


def train(
    out: str | os.PathLike,
    options: TrainOptions,
    *,
    resume: bool = False,
    changes: Mapping[str, Any] | None = None,
    progress: Progress | None = None,
    report: Report | None = None,
    stop_after: int | None = None,
) -> TrainResult:
    """Train one family into the checkpoint folder `out`; `resume=True` continues the run saved there.

    On resume, `changes` are the options the caller set (None: the fields of `options` that differ from
    the defaults); only `CHANGEABLE_ON_RESUME` may differ from the saved run, a larger `steps` among them.
    `stop_after` ends the run after that many steps of this call (as a kill would, but cleanly): tests use
    it to prove that resuming gives the same weights.
    """
    started = time.perf_counter()
    out = Path(out)
    saved = _load_saved(out, options, changes) if resume else None
    check_checkpoint_target(out)  # a folder holding the user's own files is refused before any training
    if saved is not None:
        done = _already_complete(saved, out, started)
        if done is not None:
            return done
    options = (saved.options if saved else options).validated()
    ctx = context(options.device, fsdp=options.fsdp)
    try:
        ctx.rows(options.batch_size)  # the batch must split evenly over the processes
        return _train(out, options, saved, ctx, started, progress, report, stop_after)
    finally:
        saved = None  # its model, sharded in place under FSDP, holds the process group: let go first
        ctx.close()


def _train(
    out: Path,
    options: TrainOptions,
    saved: _Saved | None,
    ctx: Context,
    started: float,
    progress: Progress | None,
    report: Report | None,
    stop_after: int | None,
) -> TrainResult:
    run = _begin(out, options, saved, ctx, started, _Reporter(ctx, report))
    if saved is not None:
        run.restore(saved.state)
    plan = run.plan
    end = plan.steps if stop_after is None else min(plan.steps, run.step + stop_after)
    throughput = _Throughput()
    while run.step < end and not run.stopped:
        loss, tokens = run.take_step()
        rate = throughput.add(tokens)
        if progress is not None and ctx.is_main:
            progress(run.step, plan.steps, loss, rate)
        if run.step % plan.eval_every == 0 or run.step == plan.steps:
            run.evaluate()
        if run.step % plan.save_every == 0 and run.step < plan.steps and not run.stopped:
            run.save({}, final=False)
    return run.finish()


@dataclass
class _Reporter:
    """Tells the user (rank 0 only: the log and the `report` callback) and keeps the warnings given."""

    ctx: Context
    report: Report | None
    warnings: list[str] = field(default_factory=list)

    def say(self, message: str, *, warning: bool = False) -> None:
        if warning:
            self.warnings.append(message)
        if self.ctx.is_main:
            (logger.warning if warning else logger.info)("%s", message)
            if self.report is not None:
                self.report(("warning: " if warning else "") + message)


@dataclass
class _Throughput:
    """Tokens trained on (over every process) per second, since this call began to train."""

    tokens: float = 0.0
    since: float = field(default_factory=time.perf_counter)

    def add(self, tokens: float) -> float:
        self.tokens += tokens
        return self.tokens / max(time.perf_counter() - self.since, 1e-9)


def _task(options: TrainOptions) -> TrainingTask:
    """The family's task (batches, losses, evaluation) over the built-in corpus or the user's file."""
    task = TRAINING[options.family].task
    if options.corpus is None:
        return task.builtin_corpus(options.seed, val_fraction=options.val_fraction)
    return task.from_file(options.corpus, options.seed, val_fraction=options.val_fraction)


def _check_world_size(out: Path, state: dict[str, Any], ctx: Context) -> None:
    if int(state.get("world_size", 1)) != ctx.world_size:
        raise CheckpointError(
            f"--resume: the run in {out} was trained by {state.get('world_size', 1)} process(es), this "
            f"one has {ctx.world_size}; resume it with --nproc {state.get('world_size', 1)}"
        )


def _begin(
    out: Path, options: TrainOptions, saved: _Saved | None, ctx: Context, started: float, reporter: _Reporter
) -> "_Run":
    """A run ready to train: the task's data, the model (new or saved), optimizer and schedule."""
    task = _task(options)
    options = options.resolved(train_items=task.train_items())
    plan = options.plan()
    if saved is None:
        model, tokenizer = _new_model(options, ctx, task.tokenizer_texts())
        history: dict[str, list] = {"step": [], "train_loss": [], "eval_step": [], "val_loss": []}
    else:
        _check_world_size(out, saved.state, ctx)
        model, tokenizer, history = saved.model, saved.tokenizer, saved.history
    truncation = task.prepare(tokenizer, model.config.max_len)
    cut = truncation.message("texts")
    if cut:
        reporter.say(cut, warning=True)
    evaluator = copy.deepcopy(model) if ctx.fsdp else None  # rank 0's unsharded copy under FSDP
    wrapped = ctx.wrap(model)
    optimizer = make_optimizer(wrapped, learning_rate=plan.learning_rate, weight_decay=options.weight_decay)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, _schedule(plan))
    generator = torch.Generator().manual_seed(options.seed)  # the same on every process
    torch.manual_seed(options.seed + ctx.rank)  # dropout: its own stream per process
    return _Run(
        out=out,
        options=options,
        plan=plan,
        ctx=ctx,
        task=task,
        tokenizer=tokenizer,
        truncation=truncation,
        model=model,
        wrapped=wrapped,
        evaluator=evaluator,
        optimizer=optimizer,
        scheduler=scheduler,
        generator=generator,
        history=history,
        best=saved.best if saved else None,
        best_weights=saved.best_weights if saved else None,
        parameters=sum(p.numel() for p in unwrap(model).parameters()),
        started=started,
        reporter=reporter,
    )


@dataclass
class _Run:
    """One training run on this process: what it trains, where it has got to, and its best weights so far."""

    out: Path
    options: TrainOptions  # resolved: the steps and evaluation cadence are numbers
    plan: RunPlan  # those numbers
    ctx: Context
    task: Any  # the family's task: GPTTask, BERTTask or T5Task
    tokenizer: Tokenizer
    truncation: Truncation
    model: FamilyModel  # the model itself (unwrapped)
    wrapped: torch.nn.Module  # the model as trained: itself, in DDP, or sharded by FSDP
    evaluator: FamilyModel | None  # rank 0's unsharded copy under FSDP
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LambdaLR
    generator: torch.Generator  # draws the batches: the same on every process
    history: dict[str, list]
    best: dict[str, Any] | None  # {"step", "val_loss", ...} of the best weights (rank 0)
    best_weights: dict[str, torch.Tensor] | None  # what model.safetensors holds (rank 0)
    parameters: int
    started: float
    reporter: _Reporter
    step: int = 0
    # A run that stopped early is resumed only for more steps; the patience rule then applies again.
    stopped: bool = False

    def restore(self, state: dict[str, Any]) -> None:
        """Put the run back where its checkpoint left off (`_load_saved` loaded its latest weights)."""
        self.ctx.load_optimizer_state(self.wrapped, self.optimizer, state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        self.generator.set_state(state["data_rng"])
        rank_rng = state.get("rank_rng") or [state["torch_rng"]]
        torch.set_rng_state(rank_rng[self.ctx.rank])
        if self.ctx.device.type == "cuda" and state.get("cuda_rng"):
            torch.cuda.set_rng_state(state["cuda_rng"][self.ctx.rank])
        self.step = int(state["step"])

    def take_step(self) -> tuple[float, float]:
        """One optimizer step on a global batch: (its loss, the tokens in it), summed over the processes."""
        self.wrapped.train()
        # every process draws the same global batch, and trains on its own rows of it
        batch = self.task.sample_batch(self.generator, self.options.batch_size)
        counts = self.task.normalisers(batch)
        local = self.ctx.shard(batch, self.options.batch_size)
        sums = self.task.loss_sums(self.wrapped, local)
        loss = sum(sums[term] / max(counts[term], 1) for term in sums)
        self.optimizer.zero_grad(set_to_none=True)
        (loss * self.ctx.world_size).backward()  # DDP and FSDP average gradients over the processes
        torch.nn.utils.clip_grad_norm_(self.wrapped.parameters(), self.options.grad_clip)
        self.optimizer.step()
        self.scheduler.step()
        self.step += 1
        total_loss, tokens = self.ctx.sum([loss.item(), float(self.task.tokens_in(local))])
        self.history["step"].append(self.step)
        self.history["train_loss"].append(total_loss)
        return total_loss, tokens

    def evaluate(self) -> None:
        """Rank 0 evaluates on the held-out split; every process hears the verdict, and may stop early."""
        current = self.full_model()  # None off rank 0
        verdict = self.ctx.broadcast(self._judge(current) if current is not None else None)
        say = self.reporter.say
        say(verdict["line"])
        if verdict["overfit"] and not any(w.startswith("held-out loss rose") for w in self.reporter.warnings):
            say(verdict["overfit"], warning=True)
        if verdict["stop"] and self.step < self.plan.steps:
            self.stopped = True
            say(
                f"stopping early at step {self.step}: no better held-out loss in {self.options.patience} "
                f"evaluations (--patience); keeping step {self.ctx.broadcast(self.best)['step']}"
            )

    def _judge(self, current: torch.nn.Module) -> dict[str, Any]:
        """Rank 0: record the held-out metrics, keep the weights if they are the best, and say what next."""
        metrics = self.task.evaluate(current)
        self.history["eval_step"].append(self.step)
        self.history["val_loss"].append(metrics["val_loss"])
        improved = self.best is None or metrics["val_loss"] < self.best["val_loss"]
        if improved:
            self.best = {"step": self.step, **metrics}
            self.best_weights = {k: v.clone() for k, v in unique_state_dict(current).items()}
        assert self.best is not None  # kept before, or just now
        best_step, patience = self.best["step"], self.plan.patience
        shown = ", ".join(f"{k} {v:.4g}" for k, v in metrics.items())
        return {
            "line": f"step {self.step}: {shown}" + (" (best so far)" if improved else ""),
            "overfit": overfitting_warning(self.history, best_step),
            "stop": patience > 0 and _evals_since(self.history, best_step) >= patience,
        }

    def full_model(self) -> FamilyModel | None:
        """Rank 0's model with the current weights (collective under FSDP), None on the others."""
        weights = self.ctx.full_state(self.wrapped)
        if not self.ctx.is_main:
            return None
        if self.evaluator is None:
            return self.model  # unwrap(self.wrapped): the model itself, trained in place
        assert weights is not None  # rank 0 gets the full state
        self.evaluator.load_state_dict(weights)
        return self.evaluator

    def save(self, metrics: dict[str, Any], *, final: bool) -> None:
        """Write the checkpoint (rank 0); every process takes part in gathering its state."""
        current = self.full_model()
        optimizer_state = self.ctx.full_optimizer_state(self.wrapped, self.optimizer)
        rng = self.ctx.gather(torch.get_rng_state())
        cuda_rng = self.ctx.gather(torch.cuda.get_rng_state()) if self.ctx.device.type == "cuda" else None
        self.ctx.barrier()
        if self.ctx.is_main:
            assert current is not None  # rank 0 has the full model
            state = self._training_state(current, optimizer_state, rng, cuda_rng)
            files = {}
            if final:
                title = f"{self.options.family} {self.options.preset}"
                files[LOSS_CURVE_NAME] = loss_curve_png(self.history, title=title)
            extra = self._extra(final=final)
            checkpoint = Checkpoint(
                self.options.family, current, self.tokenizer, self.step, metrics, self.history, state, extra
            )
            save_checkpoint(
                self.out, checkpoint, versions=tool_versions(), extra_files=files, weights=self.best_weights
            )
        self.ctx.barrier()

    def _training_state(
        self, current: torch.nn.Module, optimizer_state: dict | None, rng: list, cuda_rng: list | None
    ) -> dict[str, Any]:
        """training_state.pt: the latest weights and everything that decides what happens next."""
        return {
            "model": unique_state_dict(current),
            "optimizer": optimizer_state,
            "scheduler": self.scheduler.state_dict(),
            "data_rng": self.generator.get_state(),
            "torch_rng": rng[0],
            "rank_rng": rng,
            "cuda_rng": cuda_rng,
            "world_size": self.ctx.world_size,
            "step": self.step,
        }

    def _extra(self, *, final: bool) -> dict[str, Any]:
        """checkpoint.json's "extra": how the run was made and how far it is."""
        return {
            "train_options": asdict(self.options),
            "corpus_sha256": _corpus_digest(self.options),
            "best": self.best,
            "complete": final,
            "stopped_early": self.stopped,
            "truncation": self.truncation.as_dict(),
            "world_size": self.ctx.world_size,
        }

    def finish(self) -> TrainResult:
        """The last checkpoint (with the final metrics, of the best weights, once complete) and the result."""
        complete = self.step >= self.plan.steps or self.stopped
        metrics: dict[str, Any] = {}
        samples: list[str] = []
        if complete and self.ctx.is_main:
            metrics, samples = self._final_metrics()
        elif complete:
            self.full_model()  # the collective of rank 0's call in _final_metrics, under FSDP
        self.save(metrics, final=complete)
        return TrainResult(
            self.out,
            metrics,
            self.parameters,
            time.perf_counter() - self.started,
            samples,
            step=self.step,
            best=self.ctx.broadcast(self.best),
            warnings=self.reporter.warnings,
            stopped_early=self.stopped,
            rank=self.ctx.rank,
        )

    def _final_metrics(self) -> tuple[dict[str, Any], list[str]]:
        """Rank 0: the held-out metrics and quality check of the best weights, and the samples drawn."""
        current = self.full_model()
        assert current is not None  # rank 0 has the full model
        final_model = full_model_copy(current, self.best_weights)
        quality = self.task.quality(final_model, seed=self.options.seed, samples=self.options.quality_samples)
        metrics = {**self.task.evaluate(final_model), **quality}
        metrics["best_step"] = self.best["step"] if self.best else self.step
        metrics["parameters"] = self.parameters
        metrics["train_seconds"] = round(time.perf_counter() - self.started, 1)
        return metrics, list(getattr(self.task, "samples", []))


def full_model_copy(model: torch.nn.Module, weights: dict[str, torch.Tensor] | None) -> torch.nn.Module:
    """A copy of `model` holding `weights` (the best ones), or `model` itself when there are none."""
    if weights is None:
        return model
    kept = copy.deepcopy(model)
    kept.load_state_dict(weights, strict=False)
    return kept
