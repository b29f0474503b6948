"""Phi-3 and Phi-4-mini (Phi3ForCausalLM) as our GPT: Llama's layer with the query, key and value
projections fused in one qkv_proj (q rows, then k, then v: unequal parts under grouped-query attention) and
the gate and up projections in one gate_up_proj (gate first), a sliding window where the config sets one
(Phi-3-mini-4k: 2047), and partial rotary where it asks (Phi-4-mini: 0.75). The fused tensors are cut
into our separate projections at import; `optimize` packs them again for speed.

Rope scaling "longrope" (the 128k-context checkpoints) is the rotary group's `longrope` scaling: short
factors while every position of a call is within original_max_position_embeddings (config.json's top level,
where Phi-3 keeps it), long ones past it, cos and sin scaled by the attention factor."""

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
from onnxformer.builder.pretrained.mapping import Take, chunk, map_head, rows
from onnxformer.builder.pretrained.options import (
    Architecture,
    activation,
    decoder_sizes,
    get,
    head_tied,
    rope,
    rotary_fraction,
)


def config(hf: dict[str, Any], tensors: dict[str, torch.Tensor], folder: Path) -> GPTConfig:
    theta, scaling = rope(hf, fraction=True)
    d_model, heads = get(hf, "hidden_size"), get(hf, "num_attention_heads")
    return GPTConfig(
        **decoder_sizes(hf, max_len=4096),
        tie_embeddings=head_tied(
            hf, tensors, head="lm_head.weight", embedding="model.embed_tokens.weight", default=False
        ),
        block=BlockOptions(
            norm=NormOptions("rms", eps=float(get(hf, "rms_norm_eps", default=1e-5))),
            attention=AttentionOptions(
                n_kv_heads=get(hf, "num_key_value_heads", default=heads),
                head_dim=get(hf, "head_dim", default=d_model // heads),
                qkv_bias=False,
                out_bias=False,
                sliding_window=get(hf, "sliding_window", default=None),
            ),
            rotary=RotaryOptions(theta, scaling, fraction=rotary_fraction(hf, "partial_rotary_factor")),
            ffn=FeedForwardOptions(
                activation(get(hf, "hidden_act", default="silu"), field="hidden_act"), gated=True, bias=False
            ),
        ),
    )


def mapping(ours: GPTConfig, tensors: dict[str, torch.Tensor]) -> tuple[dict[str, Take], dict[str, str]]:
    keys = {
        "embeddings.token.weight": Take("model.embed_tokens.weight"),
        "decoder.norm.weight": Take("model.norm.weight"),
    }
    width = ours.block.head_width(ours.d_model, ours.n_heads)
    query, key = ours.n_heads * width, ours.block.kv_heads(ours.n_heads) * width
    parts = {"q_proj": (0, query), "k_proj": (query, query + key), "v_proj": (query + key, query + 2 * key)}
    for i in range(ours.n_layers):
        ours_at, theirs = f"decoder.blocks.{i}.", f"model.layers.{i}."
        for name, (start, stop) in parts.items():
            keys[f"{ours_at}self_attn.{name}.weight"] = rows(
                f"{theirs}self_attn.qkv_proj.weight", start, stop
            )
        keys[f"{ours_at}self_attn.out_proj.weight"] = Take(f"{theirs}self_attn.o_proj.weight")
        keys[f"{ours_at}ffn.gate.weight"] = chunk(f"{theirs}mlp.gate_up_proj.weight", 0, 2, dim=0)
        keys[f"{ours_at}ffn.up.weight"] = chunk(f"{theirs}mlp.gate_up_proj.weight", 1, 2, dim=0)
        keys[f"{ours_at}ffn.down.weight"] = Take(f"{theirs}mlp.down_proj.weight")
        keys[f"{ours_at}self_attn_residual.norm.weight"] = Take(f"{theirs}input_layernorm.weight")
        keys[f"{ours_at}ffn_residual.norm.weight"] = Take(f"{theirs}post_attention_layernorm.weight")
    ignored: dict[str, str] = {}
    return map_head(keys, ignored, tied=ours.tie_embeddings)


NEUTRAL = {
    "original_max_position_embeddings": "read with longrope scaling; no other rope type uses it",
}
ARCHITECTURE = Architecture("phi3", config, mapping, NEUTRAL)
