"""GPT-NeoX and Pythia (GPTNeoXForCausalLM) as our GPT: pre-LN LayerNorm blocks with biases, exact GELU,
rotary positions on the first rotary_pct of each head (partial rotary), attention and feed-forward from
the same input when use_parallel_residual (x + attn(LN1 x) + MLP(LN2 x)), an untied head (embed_out).

NeoX stores q, k and v as one query_key_value tensor interleaved per head (for each head its query, key
and value rows in turn): cut per head here."""

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
from onnxformer.builder.pretrained.mapping import Take, map_head, per_head
from onnxformer.builder.pretrained.options import (
    Architecture,
    activation,
    decoder_sizes,
    get,
    head_tied,
    rope,
    rotary_fraction,
)

LAYER = {
    "attention.dense": "self_attn.out_proj",
    "mlp.dense_h_to_4h": "ffn.up",
    "mlp.dense_4h_to_h": "ffn.down",
    "input_layernorm": "self_attn_residual.norm",
    "post_attention_layernorm": "ffn_residual.norm",
}


def config(hf: dict[str, Any], tensors: dict[str, torch.Tensor], folder: Path) -> GPTConfig:
    theta, scaling = rope(hf, fraction=True)
    theta = float(get(hf, "rotary_emb_base", default=theta))  # 4.x's name for rope_theta
    bias = bool(get(hf, "attention_bias", default=True))
    return GPTConfig(
        **decoder_sizes(hf, max_len=2048, dropout="hidden_dropout"),
        tie_embeddings=head_tied(
            hf, tensors, head="embed_out.weight", embedding="gpt_neox.embed_in.weight", default=False
        ),
        block=BlockOptions(
            norm=NormOptions("layer", eps=float(get(hf, "layer_norm_eps", default=1e-5))),
            residual=ResidualOptions("pre", parallel=bool(get(hf, "use_parallel_residual", default=True))),
            attention=AttentionOptions(qkv_bias=bias, out_bias=bias),
            rotary=RotaryOptions(
                theta, scaling, fraction=rotary_fraction(hf, "partial_rotary_factor", "rotary_pct")
            ),
            ffn=FeedForwardOptions(activation(get(hf, "hidden_act", default="gelu"), field="hidden_act")),
        ),
    )


def mapping(ours: GPTConfig, tensors: dict[str, torch.Tensor]) -> tuple[dict[str, Take], dict[str, str]]:
    keys = {
        "embeddings.token.weight": Take("gpt_neox.embed_in.weight"),
        "decoder.norm.weight": Take("gpt_neox.final_layer_norm.weight"),
        "decoder.norm.bias": Take("gpt_neox.final_layer_norm.bias"),
    }
    biased = ours.block.attention.qkv_bias
    ignored = {}
    for i in range(ours.n_layers):
        ours_at, theirs = f"decoder.blocks.{i}.", f"gpt_neox.layers.{i}."
        for index, name in enumerate(("q_proj", "k_proj", "v_proj")):
            fused = f"{theirs}attention.query_key_value"
            keys[f"{ours_at}self_attn.{name}.weight"] = per_head(f"{fused}.weight", index, 3, ours.n_heads)
            if biased:
                keys[f"{ours_at}self_attn.{name}.bias"] = per_head(f"{fused}.bias", index, 3, ours.n_heads)
        for name, mine in LAYER.items():
            keys[f"{ours_at}{mine}.weight"] = Take(f"{theirs}{name}.weight")
            if biased or not name.startswith("attention."):
                keys[f"{ours_at}{mine}.bias"] = Take(f"{theirs}{name}.bias")
        for buffer in ("attention.bias", "attention.masked_bias", "attention.rotary_emb.inv_freq"):
            ignored[f"{theirs}{buffer}"] = (
                "a buffer of older checkpoints (the causal mask, rotary frequencies)"
            )
    return map_head(keys, ignored, tied=ours.tie_embeddings, theirs="embed_out.weight")


NEUTRAL = {
    "is_decoder": "GPTNeoXForCausalLM is causal whatever it says",
}
ARCHITECTURE = Architecture("gpt_neox", config, mapping, NEUTRAL)
