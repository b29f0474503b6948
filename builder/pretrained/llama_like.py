"""Llama checkpoints (LlamaForCausalLM) as our GPT with the Llama options: RMSNorm, rotary positions with
the checkpoint's rope_theta and rope scaling, SwiGLU, no biases, grouped-query attention, tied or untied
head."""

from pathlib import Path
from typing import Any

import torch

from onnxformer.builder.families import GPTConfig
from onnxformer.builder.pretrained.mapping import Take
from onnxformer.builder.pretrained.options import Architecture, activation, get, head_tied, refuse, rope

LAYER = {
    "self_attn.q_proj": "self_attn.q_proj",
    "self_attn.k_proj": "self_attn.k_proj",
    "self_attn.v_proj": "self_attn.v_proj",
    "self_attn.o_proj": "self_attn.out_proj",
    "mlp.gate_proj": "ffn.gate",
    "mlp.up_proj": "ffn.up",
    "mlp.down_proj": "ffn.down",
}


def config(hf: dict[str, Any], tensors: dict[str, torch.Tensor], folder: Path) -> GPTConfig:
    refuse(hf, "pretraining_tp", 1, "tensor-parallel slicing changes the numerics")
    theta, scaling = rope(hf)
    d_model, heads = get(hf, "hidden_size"), get(hf, "num_attention_heads")
    bias = bool(get(hf, "attention_bias", default=False))
    return GPTConfig(
        vocab_size=get(hf, "vocab_size"),
        d_model=d_model,
        n_layers=get(hf, "num_hidden_layers"),
        n_heads=heads,
        d_ff=get(hf, "intermediate_size"),
        max_len=get(hf, "max_position_embeddings", default=2048),
        dropout=float(get(hf, "attention_dropout", default=0.0)),
        position="rotary",
        norm_position="pre",
        activation=activation(get(hf, "hidden_act", default="silu"), field="hidden_act"),
        norm="rms",
        eps=float(get(hf, "rms_norm_eps", default=1e-6)),
        gated=True,
        attention_bias=bias,
        ffn_bias=bool(get(hf, "mlp_bias", default=False)),
        n_kv_heads=get(hf, "num_key_value_heads", default=heads),
        head_dim=get(hf, "head_dim", default=d_model // heads),
        rotary_base=theta,
        rope_scaling=scaling,
        tie_embeddings=head_tied(
            hf, tensors, head="lm_head.weight", embedding="model.embed_tokens.weight", default=False
        ),
    )


def mapping(ours: GPTConfig, tensors: dict[str, torch.Tensor]) -> tuple[dict[str, Take], dict[str, str]]:
    keys = {
        "embeddings.token.weight": Take("model.embed_tokens.weight"),
        "decoder.norm.weight": Take("model.norm.weight"),
    }
    for i in range(ours.n_layers):
        ours_at, theirs = f"decoder.blocks.{i}.", f"model.layers.{i}."
        for name, mine in LAYER.items():
            keys[f"{ours_at}{mine}.weight"] = Take(f"{theirs}{name}.weight")
            attention = name.startswith("self_attn")
            if ours.attention_bias if attention else ours.ffn_bias:
                keys[f"{ours_at}{mine}.bias"] = Take(f"{theirs}{name}.bias")
        keys[f"{ours_at}self_attn_residual.norm.weight"] = Take(f"{theirs}input_layernorm.weight")
        keys[f"{ours_at}ffn_residual.norm.weight"] = Take(f"{theirs}post_attention_layernorm.weight")
    ignored = {
        f"model.layers.{i}.self_attn.rotary_emb.inv_freq": "recomputed from rope_theta"
        for i in range(ours.n_layers)
    }
    if ours.tie_embeddings:
        ignored["lm_head.weight"] = "tied to the token embedding"
    else:
        keys["lm_head.weight"] = Take("lm_head.weight")
    return keys, ignored


ARCHITECTURE = Architecture("llama", config, mapping)
