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
from onnxformer.builder.families import FAMILIES
from onnxformer.builder.tokenizer import train_tokenizer
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
from onnxformer.builder.training.defaults import TRAINING
from onnxformer.builder.training.distributed import Context, context, unwrap
from onnxformer.builder.training.optimizer import make_optimizer
from onnxformer.builder.training.options import TrainOptions, apply_resume_changes, explicit_changes
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


def _schedule(options: TrainOptions) -> Callable[[int], float]:
    def factor(step: int) -> float:
        if step < options.warmup_steps:
            return (step + 1) / options.warmup_steps
        progress = (step - options.warmup_steps) / max(1, options.steps - options.warmup_steps)
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
class _Run:
    """What a resumed run starts from."""

    options: TrainOptions
    model: torch.nn.Module
    tokenizer: Tokenizer
    state: dict[str, Any]
    history: dict[str, list]
    best: dict[str, Any] | None
    best_weights: dict[str, torch.Tensor] | None
    checkpoint: Checkpoint


def _load_run(out: Path, options: TrainOptions, changes: Mapping[str, Any] | None) -> _Run:
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
    best = saved.extra.get("best")
    best_weights = unique_state_dict(saved.model) if best else None
    if "model" in state:  # the latest weights; model.safetensors holds the best
        saved.model.load_state_dict(state["model"], strict=False)
    return _Run(resumed, saved.model, saved.tokenizer, state, saved.history, best, best_weights, saved)


def _already_complete(run: _Run, out: Path, started: float) -> TrainResult | None:
    extra, step = run.checkpoint.extra, run.checkpoint.step
    saved_steps = int(extra["train_options"]["steps"])
    finished = extra.get("complete", step >= saved_steps)
    # A finished run (its steps done, or stopped early) trains again only when given more steps.
    if not finished or run.options.steps > max(step, saved_steps):
        return None
    parameters = sum(p.numel() for p in run.model.parameters())
    return TrainResult(
        out,
        run.checkpoint.metrics,
        parameters,
        time.perf_counter() - started,
        [],
        step=step,
        best=run.best,
        stopped_early=bool(extra.get("stopped_early")),
        already_complete=True,
    )


def _new_model(options: TrainOptions, ctx: Context, texts: list[str]) -> tuple[torch.nn.Module, Tokenizer]:
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
    run = _load_run(out, options, changes) if resume else None
    check_checkpoint_target(out)  # a folder holding the user's own files is refused before any training
    if run is not None:
        done = _already_complete(run, out, started)
        if done is not None:
            return done
    options = (run.options if run else options).validated()
    ctx = context(options.device, fsdp=options.fsdp)
    try:
        ctx.rows(options.batch_size)  # the batch must split evenly over the processes
        return _train(out, options, run, ctx, started, progress, report, stop_after)
    finally:
        run = None  # its model, sharded in place under FSDP, holds the process group: let go first
        ctx.close()


def _train(
    out: Path,
    options: TrainOptions,
    run: _Run | None,
    ctx: Context,
    started: float,
    progress: Progress | None,
    report: Report | None,
    stop_after: int | None,
) -> TrainResult:
    warnings: list[str] = []

    def say(message: str, *, warning: bool = False) -> None:
        if warning:
            warnings.append(message)
        if ctx.is_main:
            (logger.warning if warning else logger.info)("%s", message)
            if report is not None:
                report(("warning: " if warning else "") + message)

    task = TRAINING[options.family].task
    task = (
        task.builtin_corpus(options.seed, val_fraction=options.val_fraction)
        if options.corpus is None
        else task.from_file(options.corpus, options.seed, val_fraction=options.val_fraction)
    )
    options = options.resolved(train_items=task.train_items())
    if run is None:
        model, tokenizer = _new_model(options, ctx, task.tokenizer_texts())
        history: dict[str, list] = {"step": [], "train_loss": [], "eval_step": [], "val_loss": []}
        best, best_weights, state = None, None, None
    else:
        model, tokenizer, history, state = run.model, run.tokenizer, run.history, run.state
        best, best_weights = run.best, run.best_weights
        if int(state.get("world_size", 1)) != ctx.world_size:
            raise CheckpointError(
                f"--resume: the run in {out} was trained by {state.get('world_size', 1)} process(es), this "
                f"one has {ctx.world_size}; resume it with --nproc {state.get('world_size', 1)}"
            )
    truncation = task.prepare(tokenizer, model.config.max_len)
    cut = truncation.message("texts")
    if cut:
        say(cut, warning=True)
    evaluator = copy.deepcopy(model) if ctx.fsdp else None  # rank 0's unsharded copy under FSDP
    wrapped = ctx.wrap(model)
    optimizer = make_optimizer(
        wrapped, learning_rate=options.learning_rate, weight_decay=options.weight_decay
    )
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, _schedule(options))
    generator = torch.Generator().manual_seed(options.seed)  # the same on every process
    torch.manual_seed(options.seed + ctx.rank)  # dropout: its own stream per process
    step = 0
    if state is not None:
        ctx.load_optimizer_state(wrapped, optimizer, state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
        generator.set_state(state["data_rng"])
        rank_rng = state.get("rank_rng") or [state["torch_rng"]]
        torch.set_rng_state(rank_rng[ctx.rank])
        if ctx.device.type == "cuda" and state.get("cuda_rng"):
            torch.cuda.set_rng_state(state["cuda_rng"][ctx.rank])
        step = int(state["step"])
    parameters = sum(p.numel() for p in unwrap(model).parameters())
    # A run that stopped early is resumed only for more steps; the patience rule then applies again.
    stopped = False

    def full_model() -> torch.nn.Module | None:
        """Rank 0's model with the current weights (collective under FSDP), None on the others."""
        weights = ctx.full_state(wrapped)
        if not ctx.is_main:
            return None
        if evaluator is None:
            return unwrap(wrapped)
        evaluator.load_state_dict(weights)
        return evaluator

    def checkpoint(metrics: dict[str, Any], *, final: bool) -> None:
        current = full_model()
        optimizer_state = ctx.full_optimizer_state(wrapped, optimizer)
        rng = ctx.gather(torch.get_rng_state())
        cuda_rng = ctx.gather(torch.cuda.get_rng_state()) if ctx.device.type == "cuda" else None
        ctx.barrier()
        if ctx.is_main:
            latest = unique_state_dict(current)
            training_state = {
                "model": latest,
                "optimizer": optimizer_state,
                "scheduler": scheduler.state_dict(),
                "data_rng": generator.get_state(),
                "torch_rng": rng[0],
                "rank_rng": rng,
                "cuda_rng": cuda_rng,
                "world_size": ctx.world_size,
                "step": step,
            }
            extra = {
                "train_options": asdict(options),
                "corpus_sha256": _corpus_digest(options),
                "best": best,
                "complete": final,
                "stopped_early": stopped,
                "truncation": truncation.as_dict(),
                "world_size": ctx.world_size,
            }
            files = {}
            if final:
                files[LOSS_CURVE_NAME] = loss_curve_png(history, title=f"{options.family} {options.preset}")
            save_checkpoint(
                out,
                Checkpoint(options.family, current, tokenizer, step, metrics, history, training_state, extra),
                versions=tool_versions(),
                extra_files=files,
                weights=best_weights,
            )
        ctx.barrier()

    ran = 0
    window_tokens, window_start = 0.0, time.perf_counter()
    while step < options.steps and not stopped and (stop_after is None or ran < stop_after):
        wrapped.train()
        batch = task.sample_batch(generator, options.batch_size)  # the global batch, on every process
        counts = task.normalisers(batch)
        local = ctx.shard(batch, options.batch_size)
        sums = task.loss_sums(wrapped, local)
        loss = sum(sums[term] / max(counts[term], 1) for term in sums)
        optimizer.zero_grad(set_to_none=True)
        (loss * ctx.world_size).backward()  # DDP and FSDP average gradients over the processes
        torch.nn.utils.clip_grad_norm_(wrapped.parameters(), options.grad_clip)
        optimizer.step()
        scheduler.step()
        step += 1
        ran += 1
        total_loss, tokens = ctx.sum([loss.item(), float(task.tokens_in(local))])
        window_tokens += tokens
        history["step"].append(step)
        history["train_loss"].append(total_loss)
        if progress is not None and ctx.is_main:
            elapsed = max(time.perf_counter() - window_start, 1e-9)
            progress(step, options.steps, total_loss, window_tokens / elapsed)
        if step % options.eval_every == 0 or step == options.steps:
            current = full_model()
            verdict = None
            if ctx.is_main:
                metrics = task.evaluate(current)
                history["eval_step"].append(step)
                history["val_loss"].append(metrics["val_loss"])
                improved = best is None or metrics["val_loss"] < best["val_loss"]
                if improved:
                    best = {"step": step, **metrics}
                    best_weights = {k: v.clone() for k, v in unique_state_dict(current).items()}
                shown = ", ".join(f"{k} {v:.4g}" for k, v in metrics.items())
                verdict = {
                    "line": f"step {step}: {shown}" + (" (best so far)" if improved else ""),
                    "overfit": overfitting_warning(history, best["step"]),
                    "stop": options.patience > 0 and _evals_since(history, best["step"]) >= options.patience,
                }
            verdict = ctx.broadcast(verdict)
            say(verdict["line"])
            if verdict["overfit"] and not any(w.startswith("held-out loss rose") for w in warnings):
                say(verdict["overfit"], warning=True)
            if verdict["stop"] and step < options.steps:
                stopped = True
                say(
                    f"stopping early at step {step}: no better held-out loss in {options.patience} "
                    f"evaluations (--patience); keeping step {ctx.broadcast(best)['step']}"
                )
        if step % options.save_every == 0 and step < options.steps and not stopped:
            checkpoint({}, final=False)
    complete = step >= options.steps or stopped
    metrics: dict[str, Any] = {}
    samples: list[str] = []
    if complete and ctx.is_main:
        final_model = full_model_copy(full_model(), best_weights)
        quality = task.quality(final_model, seed=options.seed, samples=options.quality_samples)
        metrics = {**task.evaluate(final_model), **quality}
        samples = list(getattr(task, "samples", []))
        metrics["best_step"] = best["step"] if best else step
        metrics["parameters"] = parameters
        metrics["train_seconds"] = round(time.perf_counter() - started, 1)
    elif complete:
        full_model()  # the collective of rank 0's call above, under FSDP
    checkpoint(metrics, final=complete)
    best = ctx.broadcast(best)
    return TrainResult(
        out,
        metrics,
        parameters,
        time.perf_counter() - started,
        samples,
        step=step,
        best=best,
        warnings=warnings,
        stopped_early=stopped,
        rank=ctx.rank,
    )


def full_model_copy(model: torch.nn.Module, weights: dict[str, torch.Tensor] | None) -> torch.nn.Module:
    """A copy of `model` holding `weights` (the best ones), or `model` itself when there are none."""
    if weights is None:
        return model
    kept = copy.deepcopy(model)
    kept.load_state_dict(weights, strict=False)
    return kept
