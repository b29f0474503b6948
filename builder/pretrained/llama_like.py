"""Llama-like decoders as our GPT, one row of a table each: RMSNorm, rotary positions with the checkpoint's
rope_theta and rope scaling, a gated SiLU feed-forward, grouped-query attention, a tied or untied head.

What sets the rows apart is small and stated in the row: which projections carry biases (Llama: all or
none, by `attention_bias`; Qwen2: q, k and v but not the output), whether each head's queries and keys
are RMS-normed (Qwen3), whether attention slides over the last `sliding_window` keys (Mistral), which
config.json settings the import refuses or knows to change nothing, and the checkpoint's names for a
layer's tensors. Everything else (the config keys, the model, the key mapping) is shared, so an
architecture of this kind is a row, not a copy of this module.
"""

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import torch

from onnxformer.builder.families import GPTConfig
from onnxformer.builder.layers.options import (
    AttentionOptions,
    BlockOptions,
    FeedForwardOptions,
    NormOptions,
    RotaryOptions,
)
from onnxformer.builder.pretrained.mapping import Take, map_head
from onnxformer.builder.pretrained.options import (
    Architecture,
    activation,
    decoder_sizes,
    get,
    head_tied,
    refuse,
    rope,
)
from onnxformer.runtime.errors import ModelImportError

# their name for a layer's tensor -> ours, under model.layers.<i>. and decoder.blocks.<i>.
LLAMA_LAYER = {
    "self_attn.q_proj": "self_attn.q_proj",
    "self_attn.k_proj": "self_attn.k_proj",
    "self_attn.v_proj": "self_attn.v_proj",
    "self_attn.o_proj": "self_attn.out_proj",
    "mlp.gate_proj": "ffn.gate",
    "mlp.up_proj": "ffn.up",
    "mlp.down_proj": "ffn.down",
}
OUTPUT_PROJECTION = "self_attn.o_proj"
QK_NORM_LAYER = {"self_attn.q_norm": "self_attn.query_norm", "self_attn.k_norm": "self_attn.key_norm"}


# Which layers slide when config.json has use_sliding_window but no layer_types, as transformers 5's config
# classes derive them: Qwen's layers from max_window_layers on, SmolLM3's layers without rotary.
def _qwen_sliding(hf: dict[str, Any], layer: int, rotary: bool) -> bool:
    return layer >= get(hf, "max_window_layers", default=28)


def _nope_sliding(hf: dict[str, Any], layer: int, rotary: bool) -> bool:
    return not rotary


_WINDOW_KEYS = {
    "sliding_window": "read with use_sliding_window, unused without it (as in transformers)",
    "max_window_layers": "read with use_sliding_window when there are no layer_types",
}


@dataclass(frozen=True)
class Row:
    """One Llama-like architecture: what its config.json and checkpoint say differently from Llama's."""

    model_type: str  # config.json's model_type
    biases: Callable[[dict[str, Any]], tuple[bool, bool]]  # config.json -> (q/k/v bias, output bias)
    refused: tuple[tuple[str, Any, str], ...] = ()  # (config.json field, the value imported, why)
    layer: dict[str, str] = field(default_factory=lambda: dict(LLAMA_LAYER))
    neutral: dict[str, str] = field(default_factory=dict)  # config.json keys that change nothing -> why
    qk_norm: bool = False  # an RMSNorm on each head's queries and keys (q_norm, k_norm) before rotary
    sliding_window: bool = False  # config.json sliding_window (null: none) bounds every layer's attention
    # Per-layer rows: with use_sliding_window, the layers layer_types names "sliding_attention" (or, without
    # layer_types, those this rule picks: config.json, layer index, has rotary) attend over sliding_window
    # keys; no_rope_layers leaves rotary out of the layers it marks 0 (SmolLM3's NoPE layers).
    sliding_layers: Callable[[dict[str, Any], int, bool], bool] | None = None


def _llama_biases(hf: dict[str, Any]) -> tuple[bool, bool]:
    bias = bool(get(hf, "attention_bias", default=False))
    return bias, bias


ROWS = {
    "LlamaForCausalLM": Row(
        "llama",
        _llama_biases,
        refused=(("pretraining_tp", 1, "tensor-parallel slicing changes the numerics"),),
        neutral={  # written by nanotron's conversion (SmolLM2); transformers' Llama reads neither
            "is_llama_config": "a marker of nanotron's conversion, read by nothing",
            "rope_interleaved": "transformers' Llama ignores it: it rotates halves whatever it says",
        },
    ),
    "Qwen2ForCausalLM": Row(
        "qwen2", lambda hf: (True, False), sliding_layers=_qwen_sliding, neutral=_WINDOW_KEYS
    ),
    "MistralForCausalLM": Row("mistral", lambda hf: (False, False), sliding_window=True),
    "SmolLM3ForCausalLM": Row(
        "smollm3",
        _llama_biases,
        sliding_layers=_nope_sliding,
        neutral={
            **_WINDOW_KEYS,
            "no_rope_layer_interval": "read through no_rope_layers, which transformers derives from it",
        },
    ),
    "Qwen3ForCausalLM": Row(
        "qwen3",
        _llama_biases,
        layer={**LLAMA_LAYER, **QK_NORM_LAYER},
        qk_norm=True,
        sliding_layers=_qwen_sliding,
        neutral=_WINDOW_KEYS,
    ),
}


def config(row: Row, hf: dict[str, Any], tensors: dict[str, torch.Tensor], folder: Path) -> GPTConfig:
    for name, allowed, why in row.refused:
        refuse(hf, name, allowed, why)
    layers = get(hf, "num_hidden_layers")
    theta, scaling = rope(hf)
    d_model, heads = get(hf, "hidden_size"), get(hf, "num_attention_heads")
    qkv_bias, out_bias = row.biases(hf)
    block = BlockOptions(
        norm=NormOptions("rms", eps=float(get(hf, "rms_norm_eps", default=1e-6))),
        attention=AttentionOptions(
            n_kv_heads=get(hf, "num_key_value_heads", default=heads),
            head_dim=get(hf, "head_dim", default=d_model // heads),
            qkv_bias=qkv_bias,
            out_bias=out_bias,
            qk_norm=row.qk_norm,
            sliding_window=get(hf, "sliding_window", default=None) if row.sliding_window else None,
        ),
        rotary=RotaryOptions(theta, scaling),
        ffn=FeedForwardOptions(
            activation(get(hf, "hidden_act", default="silu"), field="hidden_act"),
            gated=True,
            bias=bool(get(hf, "mlp_bias", default=False)),
        ),
    )
    return GPTConfig(
        **decoder_sizes(hf, max_len=2048),
        tie_embeddings=head_tied(
            hf, tensors, head="lm_head.weight", embedding="model.embed_tokens.weight", default=False
        ),
        block=block,
        layers=_layers(row, hf, block, layers) if row.sliding_layers is not None else (),
    )


def _layers(row: Row, hf: dict[str, Any], block: BlockOptions, layers: int) -> tuple[BlockOptions, ...]:
    """One BlockOptions per layer, as transformers 5 builds a per-layer row's layers: a window on the
    sliding layers when use_sliding_window, no rotary on the layers no_rope_layers marks 0."""
    assert row.sliding_layers is not None  # a per-layer row
    interval = get(hf, "no_rope_layer_interval", default=None)
    derived = [int(interval is None or (i + 1) % interval != 0) for i in range(layers)]
    rotary = get(hf, "no_rope_layers", default=derived)
    if not isinstance(rotary, list) or len(rotary) != layers or not set(rotary) <= {0, 1}:
        raise ModelImportError(f"config.json no_rope_layers={rotary!r} must hold 0 or 1 per layer ({layers})")
    window = get(hf, "sliding_window", default=None) if get(hf, "use_sliding_window", default=False) else None
    types = get(hf, "layer_types", default=None)
    if types is None:
        sliding = [window is not None and row.sliding_layers(hf, i, bool(rotary[i])) for i in range(layers)]
        types = ["sliding_attention" if slides else "full_attention" for slides in sliding]
    kinds = ("full_attention", "sliding_attention")
    if not isinstance(types, list) or len(types) != layers or not set(types) <= set(kinds):
        raise ModelImportError(
            f"config.json layer_types={types!r} must name one of {kinds} per layer ({layers})"
        )
    each = tuple(
        dataclasses.replace(
            block,
            attention=dataclasses.replace(
                block.attention, sliding_window=window if kind == "sliding_attention" else None
            ),
            rotary=block.rotary if uses else None,
        )
        for kind, uses in zip(types, rotary, strict=True)
    )
    return () if set(each) == {block} else each  # () when every layer is the block


def _has_bias(ours: GPTConfig, name: str) -> bool:
    attention = ours.block.attention
    if name in QK_NORM_LAYER:
        return False
    if name == OUTPUT_PROJECTION:
        return attention.out_bias
    return attention.qkv_bias if name.startswith("self_attn.") else ours.block.ffn.bias


def mapping(
    row: Row, ours: GPTConfig, tensors: dict[str, torch.Tensor]
) -> tuple[dict[str, Take], dict[str, str]]:
    keys = {
        "embeddings.token.weight": Take("model.embed_tokens.weight"),
        "decoder.norm.weight": Take("model.norm.weight"),
    }
    for i in range(ours.n_layers):
        ours_at, theirs = f"decoder.blocks.{i}.", f"model.layers.{i}."
        for name, mine in row.layer.items():
            keys[f"{ours_at}{mine}.weight"] = Take(f"{theirs}{name}.weight")
            if _has_bias(ours, name):
                keys[f"{ours_at}{mine}.bias"] = Take(f"{theirs}{name}.bias")
        keys[f"{ours_at}self_attn_residual.norm.weight"] = Take(f"{theirs}input_layernorm.weight")
        keys[f"{ours_at}ffn_residual.norm.weight"] = Take(f"{theirs}post_attention_layernorm.weight")
    ignored = {
        f"model.layers.{i}.self_attn.rotary_emb.inv_freq": "recomputed from rope_theta"
        for i in range(ours.n_layers)
    }
    return map_head(keys, ignored, tied=ours.tie_embeddings)


ARCHITECTURES = {
    name: Architecture(row.model_type, partial(config, row), partial(mapping, row), row.neutral)
    for name, row in ROWS.items()
}
