"""ModernBERT checkpoints (ModernBertModel, ModernBertForMaskedLM) as our BERT: BERT's encoder with
ModernBERT's choices, each an option on our parts.

    embeddings      token embedding and a LayerNorm; no position table     position "rotary"
    norms           LayerNorm without bias (norm_bias), eps norm_eps        norm.bias
    blocks          pre-LN, a final norm after the stack                    residual "pre"
                    layer 0: no norm before attention (an Identity)         residual.attention_norm
    attention       fused Wqkv, no biases (attention_bias)                  q/k/v cut out of Wqkv
    feed-forward    GeGLU with exact GELU (hidden_activation "gelu"),       ffn: gelu, gated
                    no biases (mlp_bias); Wi holds the gate, then the up    gate, up cut out of Wi
    layers          global, or a bidirectional window (layer_types)         one BlockOptions per layer
    rope            a base per layer type (full, sliding)                   rotary.base per layer
    masked-LM head  dense (classifier_bias), classifier_activation,         BERT's mlm_transform
                    LayerNorm; the decoder tied to the embeddings + bias

Local layers. A query of a sliding_attention layer sees the keys within local_attention // 2 slots on each
side, itself included (transformers' bidirectional sliding-window mask, `abs(q_idx - kv_idx) <=
sliding_window` with config.sliding_window = local_attention // 2): our bidirectional window of
local_attention // 2 + 1 (the keys fewer than that many slots away). Rotary positions count a row's real
tokens, which is transformers' 0 .. T - 1 on a right-padded row (the runtime pads on the right).

Checkpoints written by transformers 4.x have no layer_types and no rope_parameters: every
global_attn_every_n_layers-th layer from the first is global, and the bases are global_rope_theta and
local_rope_theta. The classification heads (dense, activation, norm on [CLS] or the mean, then a
classifier) are not BERT's pooler: ModernBertFor{Sequence,Token}Classification and the others are refused.
"""

import dataclasses
from pathlib import Path
from typing import Any

import torch

from onnxformer.builder.families import BERTConfig
from onnxformer.builder.layers.options import (
    AttentionOptions,
    BlockOptions,
    FeedForwardOptions,
    NormOptions,
    ResidualOptions,
    RotaryOptions,
)
from onnxformer.builder.pretrained.mapping import Take, chunk
from onnxformer.builder.pretrained.options import Architecture, activation, get, head_tied, rope_parameters
from onnxformer.runtime.errors import ModelImportError

PREFIX = "model."
LAYER_TYPES = ("sliding_attention", "full_attention")
# transformers' defaults when config.json gives no base: ModernBertConfig.default_theta
DEFAULT_THETA = {"full_attention": 160_000.0, "sliding_attention": 10_000.0}
OLD_THETA = {"full_attention": "global_rope_theta", "sliding_attention": "local_rope_theta"}  # 4.x
QKV = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj")
GATE_UP = ("ffn.gate", "ffn.up")  # Wi(x).chunk(2): act(first half) * second half


def _prefix(tensors: dict[str, torch.Tensor]) -> str:
    """ "model." in ModernBertForMaskedLM checkpoints, "" in a ModernBertModel's."""
    return PREFIX if f"{PREFIX}embeddings.tok_embeddings.weight" in tensors else ""


def _layer_types(hf: dict[str, Any], layers: int) -> list[str]:
    types = get(hf, "layer_types", default=None)
    if types is None:  # transformers 4.x: the rule its config computed
        every = get(hf, "global_attn_every_n_layers", default=3)
        types = ["sliding_attention" if i % every else "full_attention" for i in range(layers)]
    if not isinstance(types, list) or len(types) != layers or not set(types) <= set(LAYER_TYPES):
        raise ModelImportError(
            f"config.json layer_types={types!r} must list one of {LAYER_TYPES} per layer ({layers})"
        )
    return types


def _rotary(hf: dict[str, Any]) -> dict[str, RotaryOptions]:
    """Layer type -> its rotary options, as ModernBertConfig builds them: rope_parameters per layer type
    (5.x), a type without a base taking global_rope_theta / local_rope_theta (4.x) or transformers'
    default, and a 4.x rope_scaling applied to both."""
    parameters = get(hf, "rope_parameters", default=None) or {}
    if not isinstance(parameters, dict) or not set(parameters) <= set(LAYER_TYPES):
        raise ModelImportError(
            f"config.json rope_parameters={parameters!r} must hold one rope per layer type {LAYER_TYPES}"
        )
    scaling = get(hf, "rope_scaling", default=None) or {}
    rotary = {}
    for kind in LAYER_TYPES:
        rope = {**(parameters.get(kind) or {}), **scaling}
        theta = float(get(hf, OLD_THETA[kind], default=DEFAULT_THETA[kind]))
        rotary[kind] = RotaryOptions(*rope_parameters(rope, f"rope_parameters.{kind}", theta=theta))
    return rotary


def config(hf: dict[str, Any], tensors: dict[str, torch.Tensor], folder: Path) -> BERTConfig:
    prefix = _prefix(tensors)
    d_model, layers = get(hf, "hidden_size"), get(hf, "num_hidden_layers")
    hidden_act = activation(get(hf, "hidden_activation", default="gelu"), field="hidden_activation")
    mlm_head = "head.dense.weight" in tensors
    if mlm_head:
        head_act = activation(get(hf, "classifier_activation", default="gelu"), field="classifier_activation")
        if head_act != hidden_act:
            raise ModelImportError(
                f"config.json classifier_activation={get(hf, 'classifier_activation')!r} differs from "
                f"hidden_activation={get(hf, 'hidden_activation', default='gelu')!r}: onnxformer's masked-LM "
                "head applies the layers' activation, so it imports ModernBERT's only when they agree"
            )
        words = f"{prefix}embeddings.tok_embeddings.weight"
        if not head_tied(hf, tensors, head="decoder.weight", embedding=words, default=True):
            raise ModelImportError(
                "the masked-LM decoder is not tied to the token embeddings (tie_word_embeddings=false); "
                "onnxformer imports only the tied decoder ModernBERT checkpoints have"
            )
        if not get(hf, "decoder_bias", default=True):
            raise ModelImportError(
                "config.json decoder_bias=false: onnxformer's masked-LM decoder has a bias, as the "
                "released ModernBERT checkpoints' do; it imports only decoder_bias=true"
            )
    bias = bool(get(hf, "attention_bias", default=False))
    norm_bias = bool(get(hf, "norm_bias", default=False))
    norm = NormOptions(eps=float(get(hf, "norm_eps", default=1e-5)), bias=norm_bias)
    full = BlockOptions(
        norm=norm,
        residual=ResidualOptions("pre"),
        attention=AttentionOptions(qkv_bias=bias, out_bias=bias),
        ffn=FeedForwardOptions(hidden_act, gated=True, bias=bool(get(hf, "mlp_bias", default=False))),
    )
    window = get(hf, "local_attention", default=128)
    if isinstance(window, bool) or not isinstance(window, int) or window < 0:
        raise ModelImportError(f"config.json local_attention={window!r} must be a whole number >= 0")
    rotary = _rotary(hf)
    by_type = {
        "full_attention": dataclasses.replace(full, rotary=rotary["full_attention"]),
        "sliding_attention": dataclasses.replace(
            full,
            rotary=rotary["sliding_attention"],
            # transformers: |q - k| <= local_attention // 2; ours: |q - k| < window
            attention=dataclasses.replace(full.attention, sliding_window=window // 2 + 1),
        ),
    }
    blocks = [by_type[kind] for kind in _layer_types(hf, layers)]
    first = dataclasses.replace(blocks[0].residual, attention_norm=False)  # transformers: an Identity
    blocks[0] = dataclasses.replace(blocks[0], residual=first)
    return BERTConfig(
        vocab_size=get(hf, "vocab_size"),
        d_model=d_model,
        n_layers=layers,
        n_heads=get(hf, "num_attention_heads"),
        d_ff=get(hf, "intermediate_size"),
        max_len=get(hf, "max_position_embeddings"),
        dropout=float(get(hf, "mlp_dropout", default=0.0)),
        position="rotary",
        type_vocab_size=0,
        num_labels=1,
        mlm_head=mlm_head,
        pooler=False,
        classifier=False,
        mlm_transform_bias=bool(get(hf, "classifier_bias", default=False)),
        block=by_type["full_attention"],
        layers=tuple(blocks),
    )


def _kinds(bias: bool) -> tuple[str, ...]:
    return ("weight", "bias") if bias else ("weight",)


def mapping(ours: BERTConfig, tensors: dict[str, torch.Tensor]) -> tuple[dict[str, Take], dict[str, str]]:
    prefix = _prefix(tensors)
    norm, attention, ffn = (
        _kinds(ours.block.norm.bias),
        _kinds(ours.block.attention.qkv_bias),
        _kinds(ours.block.ffn.bias),
    )
    keys = {"embeddings.token.weight": Take(f"{prefix}embeddings.tok_embeddings.weight")}
    for kind in norm:
        keys[f"embeddings.norm.{kind}"] = Take(f"{prefix}embeddings.norm.{kind}")
        keys[f"encoder.norm.{kind}"] = Take(f"{prefix}final_norm.{kind}")
    # their layer's tensors (without .weight / .bias) -> (ours, the kinds it has)
    layer = {
        "attn_norm": ("self_attn_residual.norm", norm),
        "attn.Wo": ("self_attn.out_proj", attention),
        "mlp_norm": ("ffn_residual.norm", norm),
        "mlp.Wo": ("ffn.down", ffn),
    }
    for index, options in enumerate(ours.layers):
        mine, theirs = f"encoder.blocks.{index}.", f"{prefix}layers.{index}."
        for name, (ours_name, kinds) in layer.items():
            if name == "attn_norm" and not options.residual.attention_norm:
                continue  # layer 0's Identity
            for kind in kinds:
                keys[f"{mine}{ours_name}.{kind}"] = Take(f"{theirs}{name}.{kind}")
        for kind in attention:
            for part, ours_name in enumerate(QKV):
                keys[f"{mine}{ours_name}.{kind}"] = chunk(f"{theirs}attn.Wqkv.{kind}", part, 3, dim=0)
        for kind in ffn:
            for part, ours_name in enumerate(GATE_UP):
                keys[f"{mine}{ours_name}.{kind}"] = chunk(f"{theirs}mlp.Wi.{kind}", part, 2, dim=0)
    ignored = {}
    if ours.mlm_head:
        for kind in _kinds(ours.mlm_transform_bias):
            keys[f"mlm_transform.0.{kind}"] = Take(f"head.dense.{kind}")
        for kind in norm:
            keys[f"mlm_transform.2.{kind}"] = Take(f"head.norm.{kind}")
        keys["mlm_decoder.bias"] = Take("decoder.bias")
        ignored["decoder.weight"] = "tied to the token embeddings"
    return keys, ignored


NEUTRAL = {
    "tie_word_embeddings": "read where there is a masked-LM decoder to tie; nothing else is tied",
    "global_attn_every_n_layers": "read only when layer_types is absent (transformers 4.x)",
    "classifier_pooling": "the pooling of the classification heads, which are not imported",
    "deterministic_flash_attn": "flash attention's determinism, not what eager attention computes",
    "sparse_prediction": "with labels only: which tokens the loss reads (without, every logit is computed)",
    "sparse_pred_ignore_index": "with labels only: the label the sparse loss skips",
    "reference_compile": "whether transformers 4.x compiled the model, not what it computes",
    "repad_logits_with_grad": "a transformers 4.x training setting for unpadded batches",
    "layer_norm_eps": "not read by transformers' ModernBERT, whose norms use norm_eps",
    "position_embedding_type": "not read by transformers' ModernBERT, whose positions are rotary",
    "classifier_activation": "read where there is a masked-LM head (its activation)",
    "decoder_bias": "read where there is a masked-LM decoder",
}
ARCHITECTURE = Architecture("modernbert", config, mapping, NEUTRAL)
ARCHITECTURES = dict.fromkeys(("ModernBertModel", "ModernBertForMaskedLM"), ARCHITECTURE)
