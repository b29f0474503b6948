"""GPT: a decoder-only Transformer that predicts the next token (Radford et al., 2018/2019).

    input_ids -> token + position embeddings -> N causal decoder blocks (no cross-attention)
              -> final LayerNorm (pre-LN) -> LM head (tied to the token embedding) -> logits

Pre-LN by default, as in GPT-2. The KV cache goes in as `past_key_values` and comes out as `present`, one
(key, value) pair per layer, each (B, H, P + T, Dh); nothing is kept on the module.
"""

from dataclasses import dataclass
from typing import Any, NamedTuple

import torch
from torch import nn

from onnxformer.builder.families.config import from_preset, validate_common
from onnxformer.builder.layers import DecoderBlock, RelativePositionBias
from onnxformer.builder.layers.checks import check_tensor
from onnxformer.builder.layers.embedding import Embeddings, PositionKind, positions_from_mask
from onnxformer.builder.layers.feedforward import Activation
from onnxformer.builder.layers.init import init_transformer_weights
from onnxformer.builder.layers.residual import NormPosition
from onnxformer.runtime.errors import InputError

KeyValue = tuple[torch.Tensor, torch.Tensor]  # (B, H, P, Dh) each

GPT_PRESETS: dict[str, dict[str, Any]] = {
    "tiny": {"d_model": 128, "n_layers": 2, "n_heads": 4, "d_ff": 256, "max_len": 64},
    "small": {"d_model": 384, "n_layers": 6, "n_heads": 12, "d_ff": 1536, "max_len": 1024},
}


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
    norm_position: NormPosition = "pre"
    activation: Activation = "gelu"
    tie_embeddings: bool = True

    def __post_init__(self) -> None:
        validate_common(self)

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
        )
        self.relative = (
            RelativePositionBias(config.n_heads, bidirectional=False)
            if config.position == "relative"
            else None
        )
        self.blocks = nn.ModuleList(
            DecoderBlock(
                config.d_model,
                config.n_heads,
                config.d_ff,
                cross_attention=False,
                norm_position=config.norm_position,
                activation=config.activation,
                dropout=config.dropout,
                rotary=config.position == "rotary",
            )
            for _ in range(config.n_layers)
        )
        # Post-LN blocks end normalised already; pre-LN needs one last norm on the residual stream.
        self.final_norm = nn.LayerNorm(config.d_model) if config.norm_position == "pre" else nn.Identity()
        self.lm_head = nn.Linear(config.d_model, config.vocab_size, bias=False)
        if config.tie_embeddings:
            self.lm_head.weight = self.embeddings.token.weight
        init_transformer_weights(self, n_layers=config.n_layers)

    def forward(
        self,
        input_ids: torch.Tensor,  # (B, T)
        *,
        attention_mask: torch.Tensor | None = None,  # (B, P + T) 1 = real token, 0 = padding
        past_key_values: tuple[KeyValue, ...] | None = None,  # per layer, (B, H, P, Dh) each
        need_weights: bool = False,
    ) -> GPTOutput:
        check_tensor(input_ids, "input_ids", dims=("B", "T"))
        batch, length = input_ids.shape
        past = 0 if past_key_values is None else past_key_values[0][0].shape[2]
        if past_key_values is not None and len(past_key_values) != len(self.blocks):
            raise InputError(
                f"past_key_values has {len(past_key_values)} layers, the model {len(self.blocks)}"
            )
        if attention_mask is None:
            attention_mask = torch.ones(batch, past + length, dtype=torch.long, device=input_ids.device)
        check_tensor(attention_mask, "attention_mask", dims=("B", "S"), sizes={0: batch, 1: past + length})
        positions = positions_from_mask(attention_mask, length)  # (B, T)
        hidden = self.embeddings(input_ids, positions)  # (B, T, D)
        bias = None if self.relative is None else self.relative(length, past + length, device=hidden.device)
        present, attentions = [], []
        for index, block in enumerate(self.blocks):
            past_key, past_value = (None, None) if past_key_values is None else past_key_values[index]
            out = block(
                hidden,
                attention_mask=attention_mask,
                past_key=past_key,
                past_value=past_value,
                position_bias=bias,
                positions=positions,
                need_weights=need_weights,
            )
            hidden = out.hidden  # (B, T, D)
            present.append((out.present_key, out.present_value))
            if need_weights:
                attentions.append(out.self_weights)
        hidden = self.final_norm(hidden)  # (B, T, D)
        return GPTOutput(self.lm_head(hidden), tuple(present), hidden, tuple(attentions))
