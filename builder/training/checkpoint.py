"""Training checkpoints: a folder written atomically, loadable without unpickling anything unsafe.

    checkpoint.json      format version, family, model config, step, metrics, tool versions
    model.safetensors    weights with the best held-out loss so far (tied weights stored once)
    tokenizer.json       the tokenizer the model was trained with
    training_state.pt    latest weights, optimizer, schedule, step, RNG states (every process's): read
                         with torch.load(weights_only=True)
    history.json         loss curves (train and held-out) so far
    loss_curve.png       the curve as a picture (written by the trainer)

checkpoint.json lists the other files ("files"): a later save replaces those and refuses a folder that
holds anything else. A kill at any moment leaves the previous checkpoint whole (see
onnxformer.builder.atomic).
"""

import io
import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load as load_safetensors
from safetensors.torch import save as save_safetensors
from tokenizers import Tokenizer
from torch import nn

from onnxformer.builder.atomic import check_replaceable, write_folder_atomically
from onnxformer.builder.families import FAMILIES, FamilyModel
from onnxformer.builder.families.config import config_from_dict
from onnxformer.runtime.errors import ConfigError, OnnxformerError

CHECKPOINT_FORMAT = 1
CHECKPOINT_NAME = "checkpoint.json"
WEIGHTS_NAME = "model.safetensors"
TOKENIZER_NAME = "tokenizer.json"
STATE_NAME = "training_state.pt"
HISTORY_NAME = "history.json"
LOSS_CURVE_NAME = "loss_curve.png"
# What a checkpoint.json written before it listed its files ("files") stood for.
UNLISTED_FILES = frozenset({WEIGHTS_NAME, TOKENIZER_NAME, STATE_NAME, HISTORY_NAME, LOSS_CURVE_NAME})


class CheckpointError(OnnxformerError):
    """A checkpoint folder is missing, incomplete, of another family, or of an unknown format."""


@dataclass
class Checkpoint:
    family: str
    model: FamilyModel
    tokenizer: Tokenizer
    step: int
    metrics: dict[str, Any] = field(default_factory=dict)
    history: dict[str, list] = field(default_factory=dict)
    training_state: dict[str, Any] | None = None  # None when loaded for inference only
    extra: dict[str, Any] = field(default_factory=dict)  # e.g. data source, task


def unique_state_dict(model: nn.Module) -> dict[str, torch.Tensor]:
    """The state dict with each shared (tied) tensor once, under its first name."""
    seen: set[int] = set()
    tensors = {}
    for name, tensor in model.state_dict().items():
        key = tensor.untyped_storage().data_ptr()
        if key in seen:
            continue
        seen.add(key)
        tensors[name] = tensor.detach().contiguous().cpu()
    return tensors


def _family_of(model: nn.Module) -> str:
    for name, family in FAMILIES.items():
        if type(model) is family.model:
            return name
    raise ConfigError(f"{type(model).__name__} is not one of the families {sorted(FAMILIES)}")


def save_checkpoint(
    out: str | os.PathLike,
    checkpoint: Checkpoint,
    *,
    versions: dict[str, str],
    extra_files: dict[str, bytes] | None = None,
    weights: dict[str, torch.Tensor] | None = None,
) -> Path:
    """Write the whole checkpoint folder atomically; replaces an earlier checkpoint in `out`.

    `weights` (a `unique_state_dict`) are stored instead of the model's own: the trainer keeps the best
    weights there and the latest in the training state.
    """
    family = _family_of(checkpoint.model)
    files = {
        WEIGHTS_NAME: save_safetensors(
            weights if weights is not None else unique_state_dict(checkpoint.model)
        ),
        TOKENIZER_NAME: checkpoint.tokenizer.to_str(pretty=True).encode(),
        HISTORY_NAME: json.dumps(checkpoint.history).encode(),
        **(extra_files or {}),
    }
    if checkpoint.training_state is not None:
        buffer = io.BytesIO()
        torch.save(checkpoint.training_state, buffer)
        files[STATE_NAME] = buffer.getvalue()
    meta = {
        "format_version": CHECKPOINT_FORMAT,
        "family": family,
        "config": asdict(checkpoint.model.config),
        "step": checkpoint.step,
        "metrics": checkpoint.metrics,
        "versions": versions,
        "extra": checkpoint.extra,
        "files": sorted(files),
    }
    files[CHECKPOINT_NAME] = json.dumps(meta, indent=2, sort_keys=True).encode()
    return write_folder_atomically(
        out, files, marker=CHECKPOINT_NAME, error=CheckpointError, what="checkpoint", legacy=UNLISTED_FILES
    )


def check_checkpoint_target(out: str | os.PathLike) -> None:
    """Raise CheckpointError unless saving to `out` loses nothing (see onnxformer.builder.atomic):
    called before training, so a refused folder costs no training time."""
    check_replaceable(
        Path(out), marker=CHECKPOINT_NAME, error=CheckpointError, what="checkpoint", legacy=UNLISTED_FILES
    )


def read_checkpoint_meta(folder: str | os.PathLike) -> dict[str, Any]:
    path = Path(folder)
    if not path.is_dir():
        raise CheckpointError(f"{path} is not a folder; pass the folder `onnxformer train` wrote (--out)")
    meta_path = path / CHECKPOINT_NAME
    if not meta_path.is_file():
        raise CheckpointError(f"{path} is not a checkpoint: it has no {CHECKPOINT_NAME}")
    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise CheckpointError(f"{meta_path} is not valid JSON; train again or restore the folder") from None
    version = meta.get("format_version") if isinstance(meta, dict) else None
    if version != CHECKPOINT_FORMAT:
        raise CheckpointError(
            f"{meta_path} has format_version {version}, this onnxformer reads {CHECKPOINT_FORMAT}; "
            "train again with this version"
        )
    if meta.get("family") not in FAMILIES:
        raise CheckpointError(f"{meta_path} names family {meta.get('family')!r}; known: {sorted(FAMILIES)}")
    return meta


def load_checkpoint(
    folder: str | os.PathLike,
    *,
    family: str | None = None,
    with_training_state: bool = False,
) -> Checkpoint:
    """Rebuild the model from config + weights; `family` (if given) must match the checkpoint's."""
    path = Path(folder)
    meta = read_checkpoint_meta(path)
    if family is not None and meta["family"] != family:
        raise CheckpointError(
            f"{path} holds a {meta['family']} checkpoint, not {family}; pass a {family} checkpoint "
            f"or use the {meta['family']} commands"
        )
    spec = FAMILIES[meta["family"]]
    config = config_from_dict(spec.config, meta["config"])
    model = spec.model(config)
    try:
        tensors = load_safetensors((path / WEIGHTS_NAME).read_bytes())
    except FileNotFoundError:
        raise CheckpointError(f"{path} has no {WEIGHTS_NAME}; the checkpoint is incomplete") from None
    missing, unexpected = model.load_state_dict(tensors, strict=False)
    really_missing = [name for name in missing if name not in _shared_names(model)]
    if really_missing or unexpected:
        raise CheckpointError(
            f"{path / WEIGHTS_NAME} does not fit the config: missing {really_missing}, "
            f"unexpected {unexpected}"
        )
    try:
        tokenizer = Tokenizer.from_file(str(path / TOKENIZER_NAME))
    except Exception as error:  # tokenizers raises untyped errors
        raise CheckpointError(f"{path / TOKENIZER_NAME} cannot be loaded: {error}") from None
    state = None
    if with_training_state:
        state_path = path / STATE_NAME
        if not state_path.is_file():
            raise CheckpointError(f"{path} has no {STATE_NAME}; it cannot be resumed")
        # weights_only=True: tensors and plain containers only, never arbitrary pickled objects.
        try:
            state = torch.load(state_path, map_location="cpu", weights_only=True)
        except Exception as error:  # pickle.UnpicklingError for anything but plain data
            raise CheckpointError(
                f"{state_path} holds something other than tensors and plain data ({type(error).__name__}); "
                "it was not written by onnxformer and is refused"
            ) from None
    history_path = path / HISTORY_NAME
    history = json.loads(history_path.read_text()) if history_path.is_file() else {}
    return Checkpoint(
        family=meta["family"],
        model=model,
        tokenizer=tokenizer,
        step=int(meta["step"]),
        metrics=meta.get("metrics", {}),
        history=history,
        training_state=state,
        extra=meta.get("extra", {}),
    )


def _shared_names(model: nn.Module) -> set[str]:
    """Parameter names that alias another parameter (tied weights)."""
    owners: dict[int, str] = {}
    shared = set()
    for name, parameter in model.named_parameters(remove_duplicate=False):
        key = parameter.data_ptr()
        if key in owners:
            shared.add(name)
        else:
            owners[key] = name
    return shared
