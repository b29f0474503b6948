"""Gemma 2 and Gemma 3 text decoders as our GPT: Llama's layer with Gemma's differences, each an option.

    embeddings      scaled by sqrt(hidden_size)                       GPTConfig.embedding_scale
    RMSNorm         (1 + w), w stored around 0                        norm.weight_offset = 1
    norms           before and after each sublayer ("sandwich")       residual.sandwich
    feed-forward    GeGLU with tanh GELU (hidden_activation)          ffn: gelu_tanh, gated
    attention       logits scaled by query_pre_attn_scalar^-1/2       attention.scale
                    soft-capped (Gemma 2: attn_logit_softcapping)     attention.softcap
                    QK-norm (Gemma 3: q_norm, k_norm)                 attention.qk_norm
    layers          sliding-window or global by layer_types           one BlockOptions per layer
    rope            Gemma 3: a base per layer type (local, global)    rotary.base per layer
    logits          soft-capped (Gemma 2: final_logit_softcapping)    GPTConfig.logit_softcap

Checkpoints written by transformers 4.x have no layer_types: the layers follow the rule 4.x computed
(Gemma 2 alternates, sliding first; Gemma 3 slides except every sliding_window_pattern-th layer), and
Gemma 3 gives the local base as rope_local_base_freq.
"""

import dataclasses
from pathlib import Path
from typing import Any

import torch

from onnxformer.builder.families import GPTConfig
from onnxformer.builder.layers.options import (
    AttentionOptions,
    BlockOptions,
    FeedForwardOptions,
    NormOptions,
    ResidualOptions,
    RotaryOptions,
)
from onnxformer.builder.pretrained.llama_like import LLAMA_LAYER, QK_NORM_LAYER
from onnxformer.builder.pretrained.mapping import Take, map_head
from onnxformer.builder.pretrained.options import (
    Architecture,
    activation,
    decoder_sizes,
    get,
    head_tied,
    refuse,
    rope,
    rope_parameters,
)
from onnxformer.runtime.errors import ModelImportError

# Gemma's norms -> ours: before and after attention, before and after the feed-forward.
NORMS = {
    "input_layernorm": "self_attn_residual.norm",
    "post_attention_layernorm": "self_attn_residual.output_norm",
    "pre_feedforward_layernorm": "ffn_residual.norm",
    "post_feedforward_layernorm": "ffn_residual.output_norm",
}
LAYER_TYPES = ("sliding_attention", "full_attention")


def _layer_types(hf: dict[str, Any], layers: int, *, gemma3: bool) -> list[str]:
    types = get(hf, "layer_types", default=None)
    if types is None:  # transformers 4.x: the rule its config computed
        if gemma3:
            pattern = get(hf, "sliding_window_pattern", "_sliding_window_pattern", default=6)
            types = [
                "full_attention" if (i + 1) % pattern == 0 else "sliding_attention" for i in range(layers)
            ]
        else:
            types = ["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(layers)]
    if not isinstance(types, list) or len(types) != layers or not set(types) <= set(LAYER_TYPES):
        raise ModelImportError(
            f"config.json layer_types={types!r} must list one of {LAYER_TYPES} per layer ({layers})"
        )
    return types


def _rotary(hf: dict[str, Any], *, gemma3: bool) -> dict[str, RotaryOptions]:
    """Layer type -> its rotary options: one rope for every layer (Gemma 2), one per type (Gemma 3)."""
    parameters = get(hf, "rope_parameters", default=None)
    if gemma3 and isinstance(parameters, dict) and set(parameters) <= set(LAYER_TYPES) and parameters:
        return {
            kind: RotaryOptions(*rope_parameters(parameters[kind], f"rope_parameters.{kind}"))
            for kind in LAYER_TYPES
        }
    theta, scaling = rope(hf)
    full = RotaryOptions(theta, scaling)
    if not gemma3:
        return dict.fromkeys(LAYER_TYPES, full)
    local = float(get(hf, "rope_local_base_freq", default=10000.0))  # 4.x: no scaling on local layers
    return {"sliding_attention": RotaryOptions(local), "full_attention": full}


def config(hf: dict[str, Any], tensors: dict[str, torch.Tensor], folder: Path, *, gemma3: bool) -> GPTConfig:
    refuse(hf, "use_bidirectional_attention", False, "bidirectional Gemma attention is not supported")
    d_model, heads = get(hf, "hidden_size"), get(hf, "num_attention_heads")
    layers = get(hf, "num_hidden_layers")
    bias = bool(get(hf, "attention_bias", default=False))
    soft = get(hf, "attn_logit_softcapping", default=None)
    window = get(hf, "sliding_window", default=None)
    norm = NormOptions("rms", eps=float(get(hf, "rms_norm_eps", default=1e-6)), weight_offset=1.0)
    full = BlockOptions(
        norm=norm,
        residual=ResidualOptions("pre", sandwich=True),
        attention=AttentionOptions(
            n_kv_heads=get(hf, "num_key_value_heads", default=heads),
            head_dim=get(hf, "head_dim", default=d_model // heads),
            scale=float(get(hf, "query_pre_attn_scalar")) ** -0.5,
            qkv_bias=bias,
            out_bias=bias,
            qk_norm=gemma3,
            softcap=None if soft is None else float(soft),
        ),
        ffn=FeedForwardOptions(
            activation(get(hf, "hidden_activation", default="gelu_pytorch_tanh"), field="hidden_activation"),
            gated=True,
            bias=False,
        ),
    )
    rotary = _rotary(hf, gemma3=gemma3)
    by_type = {
        "full_attention": dataclasses.replace(full, rotary=rotary["full_attention"]),
        "sliding_attention": dataclasses.replace(
            full,
            rotary=rotary["sliding_attention"],
            attention=dataclasses.replace(full.attention, sliding_window=window),
        ),
    }
    types = _layer_types(hf, layers, gemma3=gemma3)
    if window is None and "sliding_attention" in types:
        raise ModelImportError("config.json has sliding_attention layers but no sliding_window")
    capped = get(hf, "final_logit_softcapping", default=None)
    return GPTConfig(
        **decoder_sizes(hf, max_len=8192),
        tie_embeddings=head_tied(
            hf, tensors, head="lm_head.weight", embedding="model.embed_tokens.weight", default=True
        ),
        logit_softcap=None if capped is None else float(capped),
        embedding_scale=d_model**0.5,
        block=by_type["full_attention"],
        layers=tuple(by_type[kind] for kind in types),
    )


def mapping(ours: GPTConfig, tensors: dict[str, torch.Tensor]) -> tuple[dict[str, Take], dict[str, str]]:
    keys = {
        "embeddings.token.weight": Take("model.embed_tokens.weight"),
        "decoder.norm.weight": Take("model.norm.weight"),
    }
    layer = {**LLAMA_LAYER, **(QK_NORM_LAYER if ours.block.attention.qk_norm else {}), **NORMS}
    biased = ours.block.attention.qkv_bias
    for i in range(ours.n_layers):
        ours_at, theirs = f"decoder.blocks.{i}.", f"model.layers.{i}."
        for name, mine in layer.items():
            keys[f"{ours_at}{mine}.weight"] = Take(f"{theirs}{name}.weight")
            if biased and name.startswith("self_attn.") and name.endswith("_proj"):
                keys[f"{ours_at}{mine}.bias"] = Take(f"{theirs}{name}.bias")
    ignored: dict[str, str] = {}
    return map_head(keys, ignored, tied=ours.tie_embeddings)


def _config2(hf: dict[str, Any], tensors: dict[str, torch.Tensor], folder: Path) -> GPTConfig:
    return config(hf, tensors, folder, gemma3=False)


def _config3(hf: dict[str, Any], tensors: dict[str, torch.Tensor], folder: Path) -> GPTConfig:
    return config(hf, tensors, folder, gemma3=True)


NEUTRAL = {
    "hidden_act": "an older duplicate: Gemma computes with hidden_activation",
    "cache_implementation": "how transformers stores the cache, not what it computes",
}
NEUTRAL3 = {
    **NEUTRAL,
    "sliding_window_pattern": "read only when layer_types is absent (transformers 4.x)",
    "_sliding_window_pattern": "read only when layer_types is absent (transformers 4.x)",
    "rope_local_base_freq": "read only when rope_parameters has no per-layer-type bases (4.x)",
}
ARCHITECTURES = {
    "Gemma2ForCausalLM": Architecture("gemma2", _config2, mapping, NEUTRAL),
    "Gemma3ForCausalLM": Architecture("gemma3_text", _config3, mapping, NEUTRAL3),
}
