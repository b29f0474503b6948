"""The training loop shared by the three families.

AdamW with linear warm-up then cosine decay to 10% of the peak rate, gradient clipping, a held-out split
evaluated every `eval_every` steps, checkpoints every `save_every` steps. Everything that decides what
happens next (weights, optimizer moments, schedule, step, the data generator, the global RNG for dropout) is
in the checkpoint, so a run killed and resumed ends with exactly the weights of an uninterrupted run.
"""

import hashlib
import logging
import math
import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import torch

from onnxformer.builder.families import FAMILIES
from onnxformer.builder.tokenizer import train_tokenizer
from onnxformer.builder.training.checkpoint import (
    CHECKPOINT_NAME,
    Checkpoint,
    CheckpointError,
    load_checkpoint,
    save_checkpoint,
)
from onnxformer.builder.training.defaults import TRAINING
from onnxformer.builder.training.optimizer import make_optimizer
from onnxformer.builder.training.plot import loss_curve_png
from onnxformer.builder.versions import tool_versions
from onnxformer.runtime.errors import ConfigError

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class TrainOptions:
    family: str
    preset: str = "tiny"
    steps: int | None = None  # None: the family's default
    batch_size: int = 64
    learning_rate: float | None = None  # None: the family's default
    warmup_steps: int | None = None  # None: 5% of the steps
    weight_decay: float = 0.01
    grad_clip: float = 1.0
    seed: int = 0
    eval_every: int | None = None  # None: 10 evaluations per run
    save_every: int | None = None  # None: 5 checkpoints per run
    device: str = "cpu"
    corpus: str | None = None  # GPT/BERT: text file, one sentence per line; T5: source<TAB>target
    vocab_size: int = 512
    quality_samples: int = 200  # GPT: sampled continuations; T5: held-out pairs decoded
    model_overrides: dict[str, Any] = field(default_factory=dict)  # e.g. {"position": "rotary"}

    def resolved(self) -> "TrainOptions":
        """Defaults filled in and every value checked."""
        if self.family not in TRAINING:
            raise ConfigError(f"unknown family {self.family!r}; choose from {sorted(TRAINING)}")
        defaults = TRAINING[self.family]
        steps = self.steps if self.steps is not None else defaults.steps
        options = replace(
            self,
            steps=steps,
            learning_rate=self.learning_rate or defaults.learning_rate,
            warmup_steps=self.warmup_steps if self.warmup_steps is not None else max(1, steps // 20),
            eval_every=self.eval_every or max(1, steps // 10),
            save_every=self.save_every or max(1, steps // 5),
        )
        for name in ("steps", "batch_size", "eval_every", "save_every"):
            value = getattr(options, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"{name} must be an integer >= 1, got {value!r}")
        if not options.learning_rate > 0 or options.grad_clip <= 0 or options.weight_decay < 0:
            raise ConfigError("learning_rate and grad_clip must be > 0, weight_decay >= 0")
        if options.device not in ("cpu", "cuda"):
            raise ConfigError(f"device must be 'cpu' or 'cuda', got {options.device!r}")
        if options.device == "cuda" and not torch.cuda.is_available():
            raise ConfigError("device 'cuda' was asked for but torch sees no CUDA GPU; use --device cpu")
        return options


@dataclass(frozen=True)
class TrainResult:
    out: Path
    metrics: dict[str, Any]
    parameters: int
    seconds: float
    samples: list[str]


Progress = Callable[[int, int, float, float], None]  # (step, total, loss, tokens per second)


def _task(options: TrainOptions):
    task = TRAINING[options.family].task
    if options.corpus is None:
        return task.builtin_corpus(options.seed)
    return task.from_file(options.corpus, options.seed)


def _corpus_digest(options: TrainOptions) -> str | None:
    return None if options.corpus is None else hashlib.sha256(Path(options.corpus).read_bytes()).hexdigest()


def _schedule(options: TrainOptions) -> Callable[[int], float]:
    def factor(step: int) -> float:
        if step < options.warmup_steps:
            return (step + 1) / options.warmup_steps
        progress = (step - options.warmup_steps) / max(1, options.steps - options.warmup_steps)
        return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(progress, 1.0)))

    return factor


def _options_from(saved: dict[str, Any]) -> TrainOptions:
    return TrainOptions(**saved)


def train(
    out: str | os.PathLike,
    options: TrainOptions,
    *,
    resume: bool = False,
    progress: Progress | None = None,
    stop_after: int | None = None,
) -> TrainResult:
    """Train one family into the checkpoint folder `out`; `resume=True` continues the run saved there.

    `stop_after` ends the run after that many steps of this call (as a kill would, but cleanly): tests use
    it to prove that resuming gives the same weights.
    """
    started = time.perf_counter()
    out = Path(out)
    state = None
    if resume:
        if not (out / CHECKPOINT_NAME).is_file():
            raise CheckpointError(
                f"--resume: {out} holds no checkpoint to resume; drop --resume to start anew"
            )
        saved = load_checkpoint(out, family=options.family, with_training_state=True)
        options = _options_from(saved.extra["train_options"])
        if _corpus_digest(options) != saved.extra.get("corpus_sha256"):
            raise CheckpointError(f"--resume: {options.corpus} changed since the run began; start a new run")
        model, tokenizer, state, history = saved.model, saved.tokenizer, saved.training_state, saved.history
    options = options.resolved()
    task = _task(options)
    if state is None:
        torch.manual_seed(options.seed)
        tokenizer = train_tokenizer(task.tokenizer_texts(), vocab_size=options.vocab_size)
        spec = FAMILIES[options.family]
        config = spec.config.preset(
            options.preset, vocab_size=tokenizer.get_vocab_size(), **options.model_overrides
        )
        model = spec.model(config)
        history = {"step": [], "train_loss": [], "eval_step": [], "val_loss": []}
    task.prepare(tokenizer, model.config.max_len)
    model.to(options.device)
    optimizer = make_optimizer(model, learning_rate=options.learning_rate, weight_decay=options.weight_decay)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, _schedule(options))
    generator = torch.Generator().manual_seed(options.seed)
    step = 0
    if state is not None:
        optimizer.load_state_dict(state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
        generator.set_state(state["data_rng"])
        torch.set_rng_state(state["torch_rng"])
        step = int(state["step"])
    extra = {"train_options": asdict(options), "corpus_sha256": _corpus_digest(options)}
    parameters = sum(p.numel() for p in model.parameters())

    def checkpoint(metrics: dict[str, Any], *, final: bool) -> None:
        training_state = {
            "optimizer": optimizer.state_dict(),
            "scheduler": scheduler.state_dict(),
            "data_rng": generator.get_state(),
            "torch_rng": torch.get_rng_state(),
            "step": step,
        }
        files = {}
        if final:
            files["loss_curve.png"] = loss_curve_png(history, title=f"{options.family} {options.preset}")
        save_checkpoint(
            out,
            Checkpoint(options.family, model, tokenizer, step, metrics, history, training_state, extra),
            versions=tool_versions(),
            extra_files=files,
        )

    ran = 0
    window_tokens, window_start = 0, time.perf_counter()
    while step < options.steps and (stop_after is None or ran < stop_after):
        model.train()
        batch = {k: v.to(options.device) for k, v in task.sample_batch(generator, options.batch_size).items()}
        loss = task.loss(model, batch)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), options.grad_clip)
        optimizer.step()
        scheduler.step()
        step += 1
        ran += 1
        window_tokens += task.tokens_in(batch)
        history["step"].append(step)
        history["train_loss"].append(loss.item())
        if progress is not None:
            elapsed = max(time.perf_counter() - window_start, 1e-9)
            progress(step, options.steps, history["train_loss"][-1], window_tokens / elapsed)
        if step % options.eval_every == 0 or step == options.steps:
            metrics = task.evaluate(model)
            history["eval_step"].append(step)
            history["val_loss"].append(metrics["val_loss"])
            logger.info("step %d: %s", step, metrics)
        if step % options.save_every == 0 and step < options.steps:
            checkpoint({}, final=False)
    metrics: dict[str, Any] = {}
    samples: list[str] = []
    if step >= options.steps:
        quality = task.quality(model, seed=options.seed, samples=options.quality_samples)
        metrics = {**task.evaluate(model), **quality}
        samples = list(getattr(task, "samples", []))
        metrics["parameters"] = parameters
        metrics["train_seconds"] = round(time.perf_counter() - started, 1)
    checkpoint(metrics, final=step >= options.steps)
    return TrainResult(out, metrics, parameters, time.perf_counter() - started, samples)
