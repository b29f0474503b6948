"""BERT: a bidirectional encoder (Devlin et al., 2019).

input_ids (+ segment ids) -> token + position + segment embeddings, LayerNorm
          -> encoder stack: N blocks (post-LN, as in the original) -> hidden states
hidden -> masked-LM head (dense, GELU, LayerNorm, tied decoder) -> mlm_logits
hidden[:, 0] ([CLS]) -> pooler (dense, tanh) -> classifier -> class_logits
hidden -> mean over real tokens -> sentence_embedding
"""

from dataclasses import dataclass
from typing import Any, NamedTuple

import torch
from torch import nn

from onnxformer.builder.families.config import from_preset, validate_common
from onnxformer.builder.layers.embedding import Embeddings, PositionKind
from onnxformer.builder.layers.feedforward import Activation
from onnxformer.builder.layers.init import init_transformer_weights
from onnxformer.builder.layers.residual import NormPosition
from onnxformer.builder.layers.stacks import EncoderStack, rename_legacy_keys
from onnxformer.runtime.errors import ConfigError

BERT_PRESETS: dict[str, dict[str, Any]] = {
    "tiny": {"d_model": 128, "n_layers": 2, "n_heads": 4, "d_ff": 256, "max_len": 64},
    "small": {"d_model": 384, "n_layers": 6, "n_heads": 12, "d_ff": 1536, "max_len": 512},
}
# Checkpoint keys from before the encoder stack ("blocks.0..." at the model's top level).
LEGACY_KEYS = {"blocks.": "encoder.blocks.", "relative.": "encoder.relative.", "final_norm.": "encoder.norm."}


@dataclass(frozen=True)
class BERTConfig:
    vocab_size: int = 512
    d_model: int = 128
    n_layers: int = 3
    n_heads: int = 4
    d_ff: int = 512
    max_len: int = 64
    dropout: float = 0.1
    position: PositionKind = "learned"
    norm_position: NormPosition = "post"
    activation: Activation = "gelu"
    type_vocab_size: int = 2
    num_labels: int = 2

    def __post_init__(self) -> None:
        validate_common(self)
        if self.num_labels < 1 or self.type_vocab_size < 1:
            raise ConfigError("num_labels and type_vocab_size must be >= 1")

    @classmethod
    def preset(cls, name: str, **overrides: Any) -> "BERTConfig":
        return from_preset(cls, BERT_PRESETS, name, **overrides)


class BERTOutput(NamedTuple):
    hidden: torch.Tensor  # (B, T, D) last hidden state
    sentence_embedding: torch.Tensor  # (B, D) mean over real tokens
    mlm_logits: torch.Tensor  # (B, T, V)
    class_logits: torch.Tensor  # (B, num_labels)
    attentions: tuple[torch.Tensor, ...]  # per layer (B, H, T, T) when need_weights, else ()


def mean_pool(hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """(B, T, D), (B, T) -> (B, D): the average of the real tokens' vectors."""
    weights = attention_mask.to(hidden.dtype)[..., None]  # (B, T, 1)
    total = (hidden * weights).sum(dim=1)  # (B, D)
    return total / weights.sum(dim=1).clamp(min=1.0)  # (B, D)


class BERT(nn.Module):
    def __init__(self, config: BERTConfig) -> None:
        super().__init__()
        self.config = config
        self.embeddings = Embeddings(
            config.vocab_size,
            config.d_model,
            position=config.position,
            max_len=config.max_len,
            segments=config.type_vocab_size,
            norm=True,
            dropout=config.dropout,
        )
        self.encoder = EncoderStack(
            config.n_layers,
            config.d_model,
            config.n_heads,
            config.d_ff,
            position=config.position,
            norm_position=config.norm_position,
            activation=config.activation,
            dropout=config.dropout,
        )
        self.mlm_transform = nn.Sequential(
            nn.Linear(config.d_model, config.d_model), nn.GELU(), nn.LayerNorm(config.d_model)
        )
        self.mlm_decoder = nn.Linear(config.d_model, config.vocab_size)
        self.mlm_decoder.weight = self.embeddings.token.weight  # tied, as in BERT
        self.pooler = nn.Sequential(nn.Linear(config.d_model, config.d_model), nn.Tanh())
        self.classifier = nn.Sequential(
            nn.Dropout(config.dropout), nn.Linear(config.d_model, config.num_labels)
        )
        init_transformer_weights(self, n_layers=config.n_layers)
        self.register_load_state_dict_pre_hook(rename_legacy_keys(LEGACY_KEYS))

    def forward(
        self,
        input_ids: torch.Tensor,  # (B, T)
        *,
        attention_mask: torch.Tensor | None = None,  # (B, T) 1 = real token, 0 = padding
        token_type_ids: torch.Tensor | None = None,  # (B, T) segment ids
        need_weights: bool = False,
    ) -> BERTOutput:
        inputs = self.encoder.prepare(input_ids, attention_mask)
        hidden = self.embeddings(input_ids, inputs.positions, token_type_ids)  # (B, T, D)
        out = self.encoder(hidden, inputs, need_weights=need_weights)
        hidden = out.hidden  # (B, T, D)
        mlm_logits = self.mlm_decoder(self.mlm_transform(hidden))  # (B, T, V)
        class_logits = self.classifier(self.pooler(hidden[:, 0]))  # (B, num_labels)
        embedding = mean_pool(hidden, inputs.attention_mask)  # (B, D)
        return BERTOutput(hidden, embedding, mlm_logits, class_logits, out.attentions)
