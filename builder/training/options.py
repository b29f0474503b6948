"""What a training run is asked to do: `TrainOptions`, their defaults and checks, and the rules of resume.

Defaults that depend on the data are filled in once the corpus is read (`resolved(train_items=...)`): a run
on the user's corpus gets a step count that scales with it and early stopping; a run on the built-in
corpus gets the family's tuned step count (`TRAINING`).
"""

import math
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

import torch

from onnxformer.builder.families import FAMILIES
from onnxformer.builder.training.defaults import TRAINING
from onnxformer.builder.training.model_config import check_model_fields
from onnxformer.runtime.errors import ConfigError

# A run on the user's corpus: about this many passes over its training lines, within these bounds.
CORPUS_EPOCHS = 20
CORPUS_STEPS = (100, 10_000)
CORPUS_PATIENCE = 5  # evaluations without a better held-out loss before stopping
QUALITY_SAMPLES = 200  # the most samples the final check draws; fewer on short runs

# Options a resumed run may change; every other one is fixed by the run in the folder.
CHANGEABLE_ON_RESUME = ("steps", "patience", "eval_every", "save_every", "quality_samples", "device")


@dataclass(frozen=True)
class TrainOptions:
    family: str
    preset: str = "tiny"
    steps: int | None = None  # None: the family's default, or scaled to the corpus
    batch_size: int = 64  # global: split over the processes of a distributed run
    learning_rate: float | None = None  # None: the family's default
    warmup_steps: int | None = None  # None: 5% of the steps
    weight_decay: float = 0.01
    grad_clip: float = 1.0
    seed: int = 0
    eval_every: int | None = None  # None: 10 evaluations per run
    save_every: int | None = None  # None: 5 checkpoints per run
    device: str = "cpu"
    corpus: str | None = None  # GPT/BERT: text file, one sentence per line; T5: source<TAB>target
    vocab_size: int = 512  # the tokenizer's target size
    quality_samples: int | None = None  # final check (GPT samples, T5 pairs); None: scaled, 0: skipped
    model_overrides: dict[str, Any] = field(default_factory=dict)  # e.g. {"position": "rotary"}
    val_fraction: float = 0.1  # share of the distinct items held out
    patience: int | None = None  # evaluations without improvement before stopping; 0: never
    fsdp: bool = False  # shard parameters over the processes (torch.distributed.fsdp.fully_shard)

    def plan(self) -> "RunPlan":
        """The numbers of options `resolved` has filled in; ConfigError naming any still unset."""
        values = {item.name: getattr(self, item.name) for item in fields(RunPlan)}
        unset = sorted(name for name, value in values.items() if value is None)
        if unset:
            raise ConfigError(f"training options {unset} are unset; resolve the options first (resolved())")
        return RunPlan(**values)

    def validated(self) -> "TrainOptions":
        """Every value that does not depend on the data checked, the model config among them."""
        if self.family not in TRAINING:
            raise ConfigError(f"unknown family {self.family!r}; choose from {sorted(TRAINING)}")
        overrides = check_model_fields(dict(self.model_overrides), source="model options")
        options = replace(
            self,
            vocab_size=overrides.pop("vocab_size", self.vocab_size),
            model_overrides=overrides,
        )
        for name in ("steps", "batch_size", "eval_every", "save_every", "warmup_steps"):
            value = getattr(options, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise ConfigError(f"{name} must be an integer >= 1, got {value!r}")
        for name in ("patience", "quality_samples"):
            value = getattr(options, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
                raise ConfigError(f"{name} must be an integer >= 0 (0 turns it off), got {value!r}")
        if options.learning_rate is not None and not options.learning_rate > 0:
            raise ConfigError(f"learning_rate must be > 0, got {options.learning_rate!r}; 1e-3 is usual")
        if not options.grad_clip > 0 or not options.weight_decay >= 0:
            raise ConfigError("grad_clip must be > 0 and weight_decay >= 0")
        if not 0.0 < options.val_fraction < 1.0:
            raise ConfigError(
                f"val_fraction must be between 0 and 1 (exclusive), got {options.val_fraction!r}; "
                "0.1 is usual"
            )
        if options.device not in ("cpu", "cuda"):
            raise ConfigError(f"device must be 'cpu' or 'cuda', got {options.device!r}")
        if options.device == "cuda" and not torch.cuda.is_available():
            raise ConfigError("device 'cuda' was asked for but torch sees no CUDA GPU; use --device cpu")
        # The model config is checked now, with the target vocabulary, so a bad size fails before any work.
        config = FAMILIES[options.family].config.preset(
            options.preset, vocab_size=options.vocab_size, **options.model_overrides
        )
        off = [name for name in TRAINING[options.family].needs if not getattr(config, name)]
        if off:
            raise ConfigError(
                f"training {options.family} needs {off} (its losses read them); leave them on, "
                "or fine-tune such a model outside onnxformer"
            )
        return options

    def resolved(self, *, train_items: int) -> "TrainOptions":
        """Defaults filled in for a corpus of `train_items` training items, and every value checked."""
        options = self.validated()
        defaults = TRAINING[options.family]
        steps = options.steps
        if steps is None and options.corpus is not None:
            epochs = math.ceil(CORPUS_EPOCHS * train_items / options.batch_size)
            steps = min(max(epochs, CORPUS_STEPS[0]), CORPUS_STEPS[1])
        elif steps is None:
            steps = defaults.steps
        patience = options.patience
        if patience is None:
            patience = CORPUS_PATIENCE if options.corpus is not None else 0
        return replace(
            options,
            steps=steps,
            learning_rate=options.learning_rate or defaults.learning_rate,
            warmup_steps=options.warmup_steps or max(1, steps // 20),
            eval_every=options.eval_every or max(1, steps // 10),
            save_every=options.save_every or max(1, steps // 5),
            patience=patience,
            quality_samples=(
                min(QUALITY_SAMPLES, max(8, steps // 4))
                if options.quality_samples is None
                else options.quality_samples
            ),
        )


@dataclass(frozen=True)
class RunPlan:
    """The numbers a run goes by: the fields of its resolved TrainOptions that may be None before."""

    steps: int
    learning_rate: float
    warmup_steps: int
    eval_every: int
    save_every: int
    patience: int
    quality_samples: int


def explicit_changes(options: TrainOptions) -> dict[str, Any]:
    """The fields of `options` that differ from TrainOptions' defaults: what a caller asked for."""
    default = TrainOptions(options.family)
    return {
        f.name: getattr(options, f.name)
        for f in fields(TrainOptions)
        if f.name != "family" and getattr(options, f.name) != getattr(default, f.name)
    }


def apply_resume_changes(
    saved: TrainOptions, changes: dict[str, Any], *, step: int, model_config: dict[str, Any]
) -> TrainOptions:
    """The saved run's options with the changes a resume may make; any other change is refused by name.

    `model_config` is the saved model's config: a model field given again with its value is no change.
    """
    fixed = []
    current = asdict(saved)
    for name, value in changes.items():
        if name == "model_overrides":
            for key, wanted in value.items():
                had = saved.vocab_size if key == "vocab_size" else model_config.get(key)
                if wanted != had:
                    fixed.append(f"{key} ({had} -> {wanted})")
        elif name not in current:
            raise ConfigError(f"unknown training option {name!r}; known: {sorted(current)}")
        elif name not in CHANGEABLE_ON_RESUME and value != current[name]:
            fixed.append(f"{name} ({current[name]!r} -> {value!r})")
    if fixed:
        raise ConfigError(
            f"--resume continues the run as it was begun, and cannot change {', '.join(fixed)}; drop "
            f"{'that option' if len(fixed) == 1 else 'those options'}, or start a new run in another --out "
            f"(resume may change only {', '.join(CHANGEABLE_ON_RESUME)})"
        )
    allowed = {k: v for k, v in changes.items() if k in CHANGEABLE_ON_RESUME}
    if allowed.get("steps") is not None and allowed["steps"] < step:
        raise ConfigError(
            f"--resume --steps {allowed['steps']}: the run is already at step {step}; give more steps"
        )
    return replace(saved, **allowed).validated()
