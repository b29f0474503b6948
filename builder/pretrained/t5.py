"""T5 checkpoints (T5ForConditionalGeneration: v1.0 ReLU with the tied, rescaled head; v1.1 and flan gated
GELU with an untied head) as our T5: RMSNorm with the checkpoint's eps, no biases, attention scale 1 (T5
folds 1/sqrt(d_kv) into its initialisation), head width d_kv, the relative bias of the first layer shared
by every layer, separate encoder and decoder layer counts.

transformers 4.x ties the head and rescales the decoder output by d_model**-0.5 both when
tie_word_embeddings is true; 5.x keeps the rescale as scale_decoder_outputs and unties the head when the
checkpoint holds an lm_head.weight of its own."""

from pathlib import Path
from typing import Any

import torch

from onnxformer.builder.families import T5Config
from onnxformer.builder.layers.feedforward import Activation
from onnxformer.builder.layers.options import AttentionOptions, BlockOptions, FeedForwardOptions, NormOptions
from onnxformer.builder.pretrained.mapping import Take, map_head
from onnxformer.builder.pretrained.options import Architecture, activation, get, head_tied, refuse

ATTENTION = {"q": "q_proj", "k": "k_proj", "v": "v_proj", "o": "out_proj"}


def _feed_forward(hf: dict[str, Any]) -> tuple[Activation, bool]:
    """(activation, gated) from feed_forward_proj ("relu", "gated-gelu", ...) and dense_act_fn."""
    projection = str(get(hf, "feed_forward_proj", default="relu"))
    gated = projection.startswith("gated-")
    name = projection.removeprefix("gated-")
    if gated and name == "gelu":
        name = "gelu_new"  # T5 v1.1's gated-gelu is the tanh approximation (transformers maps it so too)
    return activation(get(hf, "dense_act_fn", default=name), field="feed_forward_proj"), gated


def config(hf: dict[str, Any], tensors: dict[str, torch.Tensor], folder: Path) -> T5Config:
    refuse(hf, "is_decoder", False, "a T5 decoder on its own is not supported")
    act, gated = _feed_forward(hf)
    tied = head_tied(hf, tensors, head="lm_head.weight", embedding="shared.weight", default=True)
    layers = get(hf, "num_layers")
    decoder_layers = get(hf, "num_decoder_layers", default=layers)
    return T5Config(
        vocab_size=get(hf, "vocab_size"),
        d_model=get(hf, "d_model"),
        n_layers=layers,
        n_decoder_layers=decoder_layers if decoder_layers != layers else None,
        n_heads=get(hf, "num_heads"),
        d_ff=get(hf, "d_ff"),
        max_len=get(hf, "n_positions", default=512),
        dropout=float(get(hf, "dropout_rate", default=0.1)),
        position="relative",
        num_buckets=get(hf, "relative_attention_num_buckets", default=32),
        max_distance=get(hf, "relative_attention_max_distance", default=128),
        decoder_start_token_id=get(hf, "decoder_start_token_id", "pad_token_id", default=0),
        tie_embeddings=tied,
        scale_decoder_outputs=bool(get(hf, "scale_decoder_outputs", "tie_word_embeddings", default=True)),
        block=BlockOptions(
            norm=NormOptions("rms", eps=float(get(hf, "layer_norm_epsilon", default=1e-6))),
            attention=AttentionOptions(head_dim=get(hf, "d_kv"), scale=1.0, qkv_bias=False, out_bias=False),
            ffn=FeedForwardOptions(act, gated=gated, bias=False),
        ),
    )


def _stack(stack: str, layers: int, *, cross: bool, gated: bool) -> dict[str, Take]:
    keys = {}
    ffn_layer = 2 if cross else 1
    for i in range(layers):
        ours, theirs = f"{stack}.blocks.{i}.", f"{stack}.block.{i}.layer."
        for t, m in ATTENTION.items():
            keys[f"{ours}self_attn.{m}.weight"] = Take(f"{theirs}0.SelfAttention.{t}.weight")
            if cross:
                keys[f"{ours}cross_attn.{m}.weight"] = Take(f"{theirs}1.EncDecAttention.{t}.weight")
        keys[f"{ours}self_attn_residual.norm.weight"] = Take(f"{theirs}0.layer_norm.weight")
        if cross:
            keys[f"{ours}cross_attn_residual.norm.weight"] = Take(f"{theirs}1.layer_norm.weight")
        ffn = f"{theirs}{ffn_layer}."
        projections = {"gate": "wi_0", "up": "wi_1", "down": "wo"} if gated else {"up": "wi", "down": "wo"}
        for m, t in projections.items():
            keys[f"{ours}ffn.{m}.weight"] = Take(f"{ffn}DenseReluDense.{t}.weight")
        keys[f"{ours}ffn_residual.norm.weight"] = Take(f"{ffn}layer_norm.weight")
    keys[f"{stack}.relative.bias.weight"] = Take(
        f"{stack}.block.0.layer.0.SelfAttention.relative_attention_bias.weight"
    )
    keys[f"{stack}.norm.weight"] = Take(f"{stack}.final_layer_norm.weight")
    return keys


def mapping(ours: T5Config, tensors: dict[str, torch.Tensor]) -> tuple[dict[str, Take], dict[str, str]]:
    keys = {"embeddings.token.weight": Take("shared.weight")}
    keys |= _stack("encoder", ours.n_layers, cross=False, gated=ours.block.ffn.gated)
    keys |= _stack("decoder", ours.decoder_layers, cross=True, gated=ours.block.ffn.gated)
    ignored = {
        "encoder.embed_tokens.weight": "a tied copy of shared.weight",
        "decoder.embed_tokens.weight": "a tied copy of shared.weight",
    }
    return map_head(keys, ignored, tied=ours.tie_embeddings)


NEUTRAL = {"is_gated_act": "derived from feed_forward_proj, which the import reads"}
ARCHITECTURE = Architecture("t5", config, mapping, NEUTRAL)
