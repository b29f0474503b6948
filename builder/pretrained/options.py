"""Reading config.json fields the way transformers 4.x and 5.x write them, and what an architecture is."""

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from onnxformer.builder.layers.feedforward import Activation
from onnxformer.builder.layers.positions import RopeScalingOptions
from onnxformer.builder.pretrained.mapping import Take
from onnxformer.runtime.errors import ModelImportError

REQUIRED = object()
# transformers' hidden_act names -> ours. gelu_new, gelu_pytorch_tanh: the tanh form (GPT-2, T5 v1.1).
ACTIVATIONS: dict[str, Activation] = {
    "relu": "relu",
    "gelu": "gelu",
    "gelu_new": "gelu_tanh",
    "gelu_pytorch_tanh": "gelu_tanh",
    "silu": "silu",
    "swish": "silu",
}


@dataclass(frozen=True)
class Architecture:
    """How one transformers architecture becomes one of our families (the one whose config class its
    `config` returns): options plus a key mapping."""

    model_type: str  # config.json's model_type
    # (config.json, tensors, the folder) -> our config (a family's config class)
    config: Callable[[dict[str, Any], dict[str, torch.Tensor], Path], Any]
    # (our config, tensors) -> (our key -> Take, ignored checkpoint key -> why)
    mapping: Callable[[Any, dict[str, torch.Tensor]], tuple[dict[str, Take], dict[str, str]]]


def get(hf: dict[str, Any], *names: str, default: Any = REQUIRED) -> Any:
    """The first of `names` present in config.json (older and newer spellings), else the default."""
    for name in names:
        if name in hf and hf[name] is not None:
            return hf[name]
    if default is REQUIRED:
        raise ModelImportError(f"config.json has no {' or '.join(names)}; the folder's config is incomplete")
    return default


def activation(name: Any, *, field: str) -> Activation:
    if name not in ACTIVATIONS:
        raise ModelImportError(
            f"config.json {field}={name!r} is an activation onnxformer cannot represent; supported: "
            f"{sorted(ACTIVATIONS)}"
        )
    return ACTIVATIONS[name]


def refuse(hf: dict[str, Any], field: str, allowed: Any, why: str) -> None:
    """ModelImportError when config.json sets `field` to something other than `allowed`."""
    value = hf.get(field, allowed)
    if value != allowed and value is not None:
        raise ModelImportError(
            f"config.json {field}={value!r}: {why}; onnxformer imports only {field}={allowed!r}"
        )


def rope(hf: dict[str, Any]) -> tuple[float, RopeScalingOptions | None]:
    """(rope_theta, scaling): 4.x writes rope_theta and rope_scaling at the top level, 5.x one
    rope_parameters dict holding both."""
    parameters = hf.get("rope_parameters")
    scaling: dict[str, Any] | None
    if isinstance(parameters, dict):
        theta = parameters.get("rope_theta", hf.get("rope_theta", 10000.0))
        scaling = parameters
    else:
        theta = hf.get("rope_theta", 10000.0)
        scaling = hf.get("rope_scaling")
    if not scaling:
        return float(theta), None
    kind = scaling.get("rope_type", scaling.get("type", "default"))
    if kind == "default":
        return float(theta), None
    if kind not in ("linear", "llama3"):
        raise ModelImportError(
            f"config.json rope scaling type {kind!r} is not supported; "
            "onnxformer imports default, linear and llama3"
        )
    keys = ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings")
    return float(theta), RopeScalingOptions(kind=kind, **{k: scaling[k] for k in keys if k in scaling})


def head_tied(
    hf: dict[str, Any], tensors: dict[str, torch.Tensor], *, head: str, embedding: str, default: bool
) -> bool:
    """Whether the LM head is the token embedding, as transformers decides it: tied when
    tie_word_embeddings says so, unless the checkpoint holds a head of its own with other values
    (transformers 5 then unties, with a warning); untied needs the head's tensor."""
    tied = bool(get(hf, "tie_word_embeddings", default=default))
    if head not in tensors:
        if not tied:
            raise ModelImportError(f"config.json says the head is untied, but the weights have no {head}")
        return True
    return tied and embedding in tensors and torch.equal(tensors[head], tensors[embedding])
