"""GPT: a decoder-only Transformer that predicts the next token (Radford et al., 2018/2019).

    input_ids -> token + position embeddings -> decoder stack: N causal blocks (no cross-attention)
              + final LayerNorm (pre-LN) -> LM head (tied to the token embedding) -> logits

Pre-LN by default, as in GPT-2. The Llama-style decoder (Touvron et al., 2023) is this family with other
block options, not another model: RMSNorm, rotary positions, SwiGLU, no biases, grouped-query attention
and an untied head (the `llama-tiny` and `llama-small` presets; `from_pretrained` sets them from a
checkpoint's config.json). The KV cache goes in as `past_key_values` and comes out as `present`, one
(key, value) pair per layer, each (B, H, P + T, Dh); nothing is kept on the module.
"""

from dataclasses import dataclass, field
from typing import Any, NamedTuple

import torch
from torch import nn

from onnxformer.builder.families.config import from_preset, layer_options, relative_options, validate_common
from onnxformer.builder.layers.checks import check_positive
from onnxformer.builder.layers.embedding import Embeddings, PositionKind
from onnxformer.builder.layers.init import init_transformer_weights
from onnxformer.builder.layers.options import BlockOptions
from onnxformer.builder.layers.stacks import DecoderStack, KeyValue, final_norm, rename_legacy_keys

# The Llama-style options, in the config shorthand (config.py). d_ff ~ 8/3 D keeps a gated FFN's three
# matrices at the parameter count of a plain 4 D one (Shazeer, 2020; Touvron et al., 2023, 2.2).
LLAMA: dict[str, Any] = {
    "position": "rotary",
    "norm": "rms",
    "eps": 1e-6,
    "activation": "silu",
    "gated": True,
    "attention_bias": False,
    "ffn_bias": False,
    "n_kv_heads": 2,
    "tie_embeddings": False,
    "dropout": 0.0,
}
GPT_PRESETS: dict[str, dict[str, Any]] = {
    "tiny": {"d_model": 128, "n_layers": 2, "n_heads": 4, "d_ff": 256, "max_len": 64},
    "small": {"d_model": 384, "n_layers": 6, "n_heads": 12, "d_ff": 1536, "max_len": 1024},
    "llama-tiny": {"d_model": 128, "n_layers": 2, "n_heads": 4, "d_ff": 344, "max_len": 64, **LLAMA},
    "llama-small": {"d_model": 384, "n_layers": 6, "n_heads": 6, "d_ff": 1024, "max_len": 1024, **LLAMA},
}
# Checkpoint keys from before the decoder stack (onnxformer <= 0.x wrote "blocks.0..." at the top level).
LEGACY_KEYS = {"blocks.": "decoder.blocks.", "relative.": "decoder.relative.", "final_norm.": "decoder.norm."}


@dataclass(frozen=True)
class GPTConfig:
    vocab_size: int = 512
    d_model: int = 128
    n_layers: int = 3
    n_heads: int = 4
    d_ff: int = 512
    max_len: int = 64
    dropout: float = 0.1
    position: PositionKind = "learned"
    tie_embeddings: bool = True
    logit_softcap: float | None = None  # logits -> cap * tanh(logits / cap) (Gemma 2's final soft-cap)
    embedding_scale: float | None = (
        None  # the token embeddings' factor; None: the positions' (Gemma: sqrt(D))
    )
    block: BlockOptions = field(default_factory=BlockOptions)  # pre-LN, GELU: GPT-2's
    layers: tuple[BlockOptions, ...] = ()  # one per layer where they differ from block (config.py)

    def __post_init__(self) -> None:
        validate_common(self)
        if self.logit_softcap is not None:
            check_positive(logit_softcap=self.logit_softcap)
        if self.embedding_scale is not None:
            check_positive(embedding_scale=self.embedding_scale)

    @classmethod
    def preset(cls, name: str, **overrides: Any) -> "GPTConfig":
        return from_preset(cls, GPT_PRESETS, name, **overrides)


class GPTOutput(NamedTuple):
    logits: torch.Tensor  # (B, T, V)
    present: tuple[KeyValue, ...]  # per layer, (B, H, P + T, Dh) each
    hidden: torch.Tensor  # (B, T, D) after the final norm
    attentions: tuple[torch.Tensor, ...]  # per layer (B, H, T, P + T) when need_weights, else ()


class GPT(nn.Module):
    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.config = config
        self.embeddings = Embeddings(
            config.vocab_size,
            config.d_model,
            position=config.position,
            max_len=config.max_len,
            dropout=config.dropout,
            scale=config.embedding_scale,
        )
        self.decoder = DecoderStack(
            config.d_model,
            config.n_heads,
            config.d_ff,
            layer_options(config, config.n_layers),
            cross_attention=False,
            final_norm=final_norm(config.block),
            relative=relative_options(config),
            dropout=config.dropout,
        )
        self.lm_head = nn.Linear(config.d_model, config.vocab_size, bias=False)
        if config.tie_embeddings:
            self.lm_head.weight = self.embeddings.token.weight
        init_transformer_weights(self, n_layers=config.n_layers)
        self.register_load_state_dict_pre_hook(rename_legacy_keys(LEGACY_KEYS))

    def forward(
        self,
        input_ids: torch.Tensor,  # (B, T)
        *,
        attention_mask: torch.Tensor | None = None,  # (B, P + T) 1 = real token, 0 = padding
        past_key_values: tuple[KeyValue, ...] | None = None,  # per layer, (B, H, P, Dh) each
        need_weights: bool = False,
    ) -> GPTOutput:
        inputs = self.decoder.prepare(input_ids, attention_mask, past_key_values)
        hidden = self.embeddings(input_ids, inputs.positions)  # (B, T, D)
        out = self.decoder(hidden, inputs, need_weights=need_weights)
        logits = self.lm_head(out.hidden)  # (B, T, V)
        cap = self.config.logit_softcap
        if cap is not None:
            logits = torch.tanh(logits / cap) * cap  # (B, T, V) within (-cap, cap)
        return GPTOutput(logits, out.present, out.hidden, out.self_attentions)
