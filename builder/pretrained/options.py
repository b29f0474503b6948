"""Reading config.json fields the way transformers 4.x and 5.x write them, and what an architecture is.

Every key of config.json is accounted for: an import reads it (the keys it uses, and the ones it refuses
away from one value), or it is in a list of keys known not to change what the model computes, each with the
reason (`NEUTRAL`, and an architecture's own `neutral`). `ConfigJson` records what the import read;
`check_accounted` refuses anything else by name, so a setting onnxformer does not know is never dropped.
"""

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass, field
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


_OUTPUTS = "what transformers returns, not what it computes"
_TOKEN_IDS = (
    "bos_token_id", "eos_token_id", "pad_token_id", "sep_token_id", "cls_token_id", "mask_token_id",
    "unk_token_id", "decoder_start_token_id",
)  # fmt: skip
_DROPOUTS = (
    "attention_dropout", "attention_probs_dropout_prob", "hidden_dropout_prob", "hidden_dropout",
    "classifier_dropout", "resid_pdrop", "embd_pdrop", "attn_pdrop", "dropout", "dropout_rate",
    "qa_dropout", "seq_classif_dropout", "mlp_dropout", "embedding_dropout", "summary_first_dropout",
)  # fmt: skip
_DECODING = (
    "max_length", "min_length", "do_sample", "early_stopping", "num_beams", "num_beam_groups",
    "diversity_penalty", "temperature", "top_k", "top_p", "typical_p", "repetition_penalty",
    "length_penalty", "no_repeat_ngram_size", "encoder_no_repeat_ngram_size", "bad_words_ids",
    "num_return_sequences", "output_scores", "return_dict_in_generate", "forced_bos_token_id",
    "forced_eos_token_id", "remove_invalid_values", "exponential_decay_length_penalty", "suppress_tokens",
    "begin_suppress_tokens", "max_new_tokens", "prefix",
)  # fmt: skip
# config.json keys of any architecture that leave the computation as it is -> why.
NEUTRAL: dict[str, str] = {
    "_name_or_path": "where the model was loaded from",
    "architectures": "chose the importer",
    "model_type": "chose the importer",
    "transformers_version": "the version that wrote the file",
    "dtype": "the stored weights' dtype: onnxformer reads them as fp32",
    "torch_dtype": "the stored weights' dtype: onnxformer reads them as fp32",
    "auto_map": "remote-code classes, which transformers itself ignores for a built-in architecture",
    "initializer_range": "the initialisation of untrained weights",
    "initializer_factor": "the initialisation of untrained weights",
    "initializer_cutoff_factor": "the initialisation of untrained weights",
    "gradient_checkpointing": "a training setting",
    "use_cache": _OUTPUTS,
    "output_past": _OUTPUTS,
    "output_attentions": _OUTPUTS,
    "output_hidden_states": _OUTPUTS,
    "return_dict": _OUTPUTS,
    "torchscript": _OUTPUTS,
    "chunk_size_feed_forward": "a chunked feed-forward computes the same values",
    "id2label": "the classes' names (their count sizes the classifier)",
    "label2id": "the classes' names",
    "problem_type": "the training loss",
    "finetuning_task": "a training note",
    "tokenizer_class": "the tokenizer is read from tokenizer.json",
    "task_specific_params": "prompts for transformers' pipelines",
    "is_encoder_decoder": "implied by the architecture",
    **dict.fromkeys(_TOKEN_IDS, "a special token's id, read by the tokenizer's roles and the generation"),
    **dict.fromkeys(_DROPOUTS, "a training setting; inference runs without dropout"),
    **dict.fromkeys(_DECODING, "a decoding setting (the generation defaults read the ones applied)"),
}
# Keys any architecture refuses away from one value: (the value imported, why).
COMMON_REFUSED: dict[str, tuple[Any, str]] = {
    "pruned_heads": ({}, "pruned attention heads change the layers' shapes"),
    "quantization_config": (None, "quantized weights are not read; give the fp32, fp16 or bf16 checkpoint"),
    "tie_encoder_decoder": (False, "an encoder tied to its decoder is not supported"),
}


class ConfigJson(dict):
    """config.json as an import reads it: a dict that records every key looked up (`read`)."""

    def __init__(self, data: dict[str, Any]) -> None:
        super().__init__(data)
        self.read: set[str] = set()

    def __getitem__(self, key: str) -> Any:
        self.read.add(key)
        return super().__getitem__(key)

    def get(self, key: str, default: Any = None) -> Any:
        self.read.add(key)
        return super().get(key, default)

    def __contains__(self, key: object) -> bool:
        if isinstance(key, str):
            self.read.add(key)
        return super().__contains__(key)


def refuse_common(hf: dict[str, Any]) -> None:
    for name, (allowed, why) in COMMON_REFUSED.items():
        value = hf.get(name, allowed)
        if value is not None and value != allowed and not (allowed == {} and value == []):
            raise ModelImportError(f"config.json {name}={value!r}: {why}")


def check_accounted(hf: ConfigJson, *, source: str, neutral: dict[str, str]) -> None:
    """ModelImportError naming the first config.json key that the import neither read nor knows to be
    neutral (a null value means unset, as in transformers)."""
    for name in sorted(hf):
        if name in hf.read or name in NEUTRAL or name in neutral:
            continue
        value = dict.__getitem__(hf, name)
        if value is None:
            continue
        raise ModelImportError(
            f"config.json {name}={value!r} is a setting the {source} import does not know: it may change "
            "what the model computes, so onnxformer refuses it rather than ignore it. If transformers "
            f"computes the same with and without it, report it (the {source} import lists such keys)"
        )


@dataclass(frozen=True)
class Architecture:
    """How one transformers architecture becomes one of our families (the one whose config class its
    `config` returns): options plus a key mapping."""

    model_type: str  # config.json's model_type
    # (config.json, tensors, the folder) -> our config (a family's config class)
    config: Callable[[dict[str, Any], dict[str, torch.Tensor], Path], Any]
    # (our config, tensors) -> (our key -> Take, ignored checkpoint key -> why)
    mapping: Callable[[Any, dict[str, torch.Tensor]], tuple[dict[str, Take], dict[str, str]]]
    # config.json keys of this architecture that the import does not read -> why they change nothing
    neutral: dict[str, str] = field(default_factory=dict)


def get(hf: dict[str, Any], *names: str, default: Any = REQUIRED) -> Any:
    """The first of `names` present in config.json (older and newer spellings), else the default."""
    for name in names:
        if name in hf and hf[name] is not None:
            return hf[name]
    if default is REQUIRED:
        raise ModelImportError(f"config.json has no {' or '.join(names)}; the folder's config is incomplete")
    return default


def decoder_sizes(hf: dict[str, Any], *, max_len: int, dropout: str = "attention_dropout") -> dict[str, Any]:
    """GPTConfig's sizes under the names Llama-era config.json files share (hidden_size, num_hidden_layers,
    num_attention_heads, intermediate_size, vocab_size, max_position_embeddings), with rotary positions;
    `max_len` where the file has no max_position_embeddings, `dropout` the field read as dropout."""
    return {
        "vocab_size": get(hf, "vocab_size"),
        "d_model": get(hf, "hidden_size"),
        "n_layers": get(hf, "num_hidden_layers"),
        "n_heads": get(hf, "num_attention_heads"),
        "d_ff": get(hf, "intermediate_size"),
        "max_len": get(hf, "max_position_embeddings", default=max_len),
        "dropout": float(get(hf, dropout, default=0.0)),
        "position": "rotary",
    }


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


# rope scaling kind -> the fields of rope_scaling / rope_parameters it uses (beside rope_type and theta)
ROPE_FIELDS = {
    "default": (),
    "linear": ("factor",),
    "llama3": ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"),
    "longrope": (
        "short_factor",
        "long_factor",
        "factor",
        "attention_factor",
        "original_max_position_embeddings",
    ),
}
ROPE_NAMES = ("rope_type", "type", "rope_theta")


def rope(hf: dict[str, Any], *, fraction: bool = False) -> tuple[float, RopeScalingOptions | None]:
    """(rope_theta, scaling): 4.x writes rope_theta and rope_scaling at the top level, 5.x one
    rope_parameters dict holding both. A field of either that the kind does not use is refused by name
    (a partial_rotary_factor, say, is never dropped; with `fraction` the caller reads it:
    `rotary_fraction`)."""
    parameters = hf.get("rope_parameters")
    theta = hf.get("rope_theta", 10000.0)
    if isinstance(parameters, dict):
        theta, scaling = rope_parameters(parameters, "rope_parameters", theta=theta, fraction=fraction)
    else:
        scaling_dict = hf.get("rope_scaling") or {}
        theta, scaling = rope_parameters(scaling_dict, "rope_scaling", theta=theta, fraction=fraction)
    if scaling is not None and scaling.kind == "longrope":
        scaling = _longrope(hf, scaling)
    return theta, scaling


def _longrope(hf: dict[str, Any], scaling: RopeScalingOptions) -> RopeScalingOptions:
    """longrope's context and attention factor as transformers settles them: config.json's top-level
    original_max_position_embeddings first (Phi-3 keeps it there), the factor max_position_embeddings /
    that context unless given, and the attention factor sqrt(1 + ln factor / ln context) unless given."""
    raw = hf.get("rope_parameters") or hf.get("rope_scaling") or {}
    context = get(hf, "original_max_position_embeddings", default=raw.get("original_max_position_embeddings"))
    if context is None:
        context = get(hf, "max_position_embeddings")
    factor = raw.get("factor") or get(hf, "max_position_embeddings") / context
    given = raw.get("attention_factor")
    attention = given if given is not None else (
        1.0 if factor <= 1.0 else math.sqrt(1 + math.log(factor) / math.log(context))
    )  # fmt: skip
    return dataclasses.replace(
        scaling, original_max_position_embeddings=context, factor=factor, attention_factor=float(attention)
    )


def rope_parameters(
    scaling: Any, where: str, *, theta: float = 10000.0, fraction: bool = False
) -> tuple[float, RopeScalingOptions | None]:
    """(rope_theta, scaling) from one rope dict (`where` names it in errors); its rope_theta wins over
    `theta`. With `fraction`, the caller reads partial_rotary_factor itself."""
    if not isinstance(scaling, dict):
        raise ModelImportError(f"config.json {where}={scaling!r} must be an object")
    theta = scaling.get("rope_theta", theta)
    kind = scaling.get("rope_type", scaling.get("type", "default"))
    if kind not in ROPE_FIELDS:
        raise ModelImportError(
            f"config.json rope scaling type {kind!r} is not supported; "
            f"onnxformer imports {', '.join(ROPE_FIELDS)}"
        )
    for name, value in scaling.items():
        whole = name == "partial_rotary_factor" and (fraction or value == 1.0)  # 1.0: every feature rotates
        if name not in ROPE_NAMES and name not in ROPE_FIELDS[kind] and value is not None and not whole:
            raise ModelImportError(
                f"config.json {where}.{name}={value!r} is not used by rope type {kind!r} as onnxformer "
                "imports it; it would change the positions, so the import stops rather than drop it"
            )
    if kind == "default":
        return float(theta), None
    fields = {name: scaling[name] for name in ROPE_FIELDS[kind] if scaling.get(name) is not None}
    return float(theta), RopeScalingOptions(kind=kind, **fields)


def rotary_fraction(hf: dict[str, Any], *names: str) -> float:
    """The share of each head's width that rotates: rope_parameters.partial_rotary_factor (5.x), else the
    first of `names` at the top level (4.x: partial_rotary_factor, NeoX's rotary_pct), else 1."""
    parameters = hf.get("rope_parameters")
    if isinstance(parameters, dict) and parameters.get("partial_rotary_factor") is not None:
        value = parameters["partial_rotary_factor"]
    else:
        value = get(hf, *names, default=1.0)
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= 1:
        raise ModelImportError(f"config.json partial rotary factor {value!r} must be a number in (0, 1]")
    return float(value)


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
