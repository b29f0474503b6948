"""GPT-2 checkpoints (GPT2LMHeadModel, GPT2Model) as our GPT: pre-LN, learned positions, tanh GELU, tied
head. GPT-2's linear layers are Conv1D, which store (in, out): transposed here. c_attn holds q, k and v
side by side in one (D, 3D) tensor: cut in three."""

from pathlib import Path
from typing import Any

import torch

from onnxformer.builder.families import GPTConfig
from onnxformer.builder.layers.options import BlockOptions, FeedForwardOptions, NormOptions
from onnxformer.builder.pretrained.mapping import Take, chunk, map_head, transposed
from onnxformer.builder.pretrained.options import Architecture, activation, get, head_tied, refuse


def _prefix(tensors: dict[str, torch.Tensor]) -> str:
    return "transformer." if "transformer.wte.weight" in tensors else ""


def config(hf: dict[str, Any], tensors: dict[str, torch.Tensor], folder: Path) -> GPTConfig:
    refuse(hf, "scale_attn_by_inverse_layer_idx", False, "per-layer attention scaling is not supported")
    refuse(hf, "reorder_and_upcast_attn", False, "it changes the attention's numerics")
    refuse(hf, "add_cross_attention", False, "a GPT-2 with cross-attention is not supported")
    refuse(hf, "scale_attn_weights", True, "attention without the 1/sqrt(d_k) scale is not supported")
    d_model = get(hf, "n_embd", "hidden_size")
    positions = get(hf, "n_positions", "max_position_embeddings")
    refuse(hf, "n_ctx", positions, "a context other than n_positions is not supported")
    return GPTConfig(
        vocab_size=get(hf, "vocab_size"),
        d_model=d_model,
        n_layers=get(hf, "n_layer", "num_hidden_layers"),
        n_heads=get(hf, "n_head", "num_attention_heads"),
        d_ff=get(hf, "n_inner", default=4 * d_model),
        max_len=positions,
        dropout=float(get(hf, "resid_pdrop", default=0.1)),
        position="learned",
        block=BlockOptions(
            norm=NormOptions(eps=float(get(hf, "layer_norm_epsilon", default=1e-5))),
            ffn=FeedForwardOptions(
                activation(get(hf, "activation_function", default="gelu_new"), field="activation_function")
            ),
        ),
        tie_embeddings=head_tied(
            hf, tensors, head="lm_head.weight", embedding=f"{_prefix(tensors)}wte.weight", default=True
        ),
    )


def mapping(ours: GPTConfig, tensors: dict[str, torch.Tensor]) -> tuple[dict[str, Take], dict[str, str]]:
    p = _prefix(tensors)
    keys = {
        "embeddings.token.weight": Take(f"{p}wte.weight"),
        "embeddings.position.weight": Take(f"{p}wpe.weight"),
        "decoder.norm.weight": Take(f"{p}ln_f.weight"),
        "decoder.norm.bias": Take(f"{p}ln_f.bias"),
    }
    ignored = {}
    for i in range(ours.n_layers):
        ours_at, theirs = f"decoder.blocks.{i}.", f"{p}h.{i}."
        for index, name in enumerate(("q_proj", "k_proj", "v_proj")):
            keys[f"{ours_at}self_attn.{name}.weight"] = chunk(
                f"{theirs}attn.c_attn.weight", index, 3, dim=1, transpose=True
            )
            keys[f"{ours_at}self_attn.{name}.bias"] = chunk(f"{theirs}attn.c_attn.bias", index, 3, dim=0)
        for mine, conv in (
            ("self_attn.out_proj", "attn.c_proj"),
            ("ffn.up", "mlp.c_fc"),
            ("ffn.down", "mlp.c_proj"),
        ):
            keys[f"{ours_at}{mine}.weight"] = transposed(f"{theirs}{conv}.weight")
            keys[f"{ours_at}{mine}.bias"] = Take(f"{theirs}{conv}.bias")
        for mine, norm in (("self_attn_residual.norm", "ln_1"), ("ffn_residual.norm", "ln_2")):
            keys[f"{ours_at}{mine}.weight"] = Take(f"{theirs}{norm}.weight")
            keys[f"{ours_at}{mine}.bias"] = Take(f"{theirs}{norm}.bias")
        ignored[f"{theirs}attn.bias"] = "the causal mask buffer of older checkpoints"
        ignored[f"{theirs}attn.masked_bias"] = "a constant buffer of older checkpoints"
    return map_head(keys, ignored, tied=ours.tie_embeddings)


# GPT2DoubleHeadsModel's sequence-summary head: GPT2LMHeadModel and GPT2Model have none.
NEUTRAL = {
    name: "the sequence-summary head of GPT2DoubleHeadsModel, which these architectures do not have"
    for name in ("summary_type", "summary_use_proj", "summary_activation", "summary_proj_to_labels")
}
ARCHITECTURE = Architecture("gpt2", config, mapping, NEUTRAL)
