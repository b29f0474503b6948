"""BERT: a bidirectional encoder (Devlin et al., 2019).

input_ids (+ segment ids) -> token + position + segment embeddings, LayerNorm
          -> encoder stack: N blocks (post-LN, as in the original) -> hidden states
hidden -> masked-LM head (dense, GELU, LayerNorm, tied decoder) -> mlm_logits
hidden[:, 0] ([CLS]) -> pooler (dense, tanh) -> pooler_output -> classifier -> class_logits
hidden -> mean over real tokens (or [CLS]) [-> L2 normalised] -> sentence_embedding

Each head is optional (`mlm_head`, `pooler`, `classifier`), so a checkpoint without one (a BertModel has
no masked-LM head, a sentence-transformers model no classifier) leaves no untrained parameters behind; an
absent head's output is None. `pooling` and `normalize` are sentence-transformers' Pooling and Normalize
modules: the embedding its `encode` returns.
"""

from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple

import torch
from torch import nn

from onnxformer.builder.families.config import from_preset, layer_options, relative_options, validate_common
from onnxformer.builder.layers.embedding import Embeddings, PositionKind
from onnxformer.builder.layers.feedforward import make_activation
from onnxformer.builder.layers.init import init_transformer_weights
from onnxformer.builder.layers.norms import make_norm
from onnxformer.builder.layers.options import BlockOptions, ResidualOptions
from onnxformer.builder.layers.stacks import EncoderStack, final_norm, rename_legacy_keys
from onnxformer.runtime.errors import ConfigError

BERT_PRESETS: dict[str, dict[str, Any]] = {
    "tiny": {"d_model": 128, "n_layers": 2, "n_heads": 4, "d_ff": 256, "max_len": 64},
    "small": {"d_model": 384, "n_layers": 6, "n_heads": 12, "d_ff": 1536, "max_len": 512},
}
# Checkpoint keys from before the encoder stack ("blocks.0..." at the model's top level).
LEGACY_KEYS = {"blocks.": "encoder.blocks.", "relative.": "encoder.relative.", "final_norm.": "encoder.norm."}


Pooling = Literal["mean", "cls"]
POOLINGS: tuple[Pooling, ...] = ("mean", "cls")


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
    type_vocab_size: int = 2
    num_labels: int = 2
    mlm_head: bool = True
    pooler: bool = True
    classifier: bool = True
    pooling: Pooling = "mean"
    normalize: bool = False
    block: BlockOptions = field(default_factory=lambda: BlockOptions(residual=ResidualOptions("post")))

    def __post_init__(self) -> None:
        validate_common(self)
        if self.num_labels < 1 or self.type_vocab_size < 1:
            raise ConfigError("num_labels and type_vocab_size must be >= 1")
        for name in ("mlm_head", "pooler", "classifier", "normalize"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(f"{name} must be true or false, got {getattr(self, name)!r}")
        if self.classifier and not self.pooler:
            raise ConfigError("the classifier reads the pooler's output: set pooler=True or classifier=False")
        if self.pooling not in POOLINGS:
            raise ConfigError(f"pooling must be one of {POOLINGS}, got {self.pooling!r}")

    @classmethod
    def preset(cls, name: str, **overrides: Any) -> "BERTConfig":
        return from_preset(cls, BERT_PRESETS, name, **overrides)


class BERTOutput(NamedTuple):
    hidden: torch.Tensor  # (B, T, D) last hidden state
    sentence_embedding: torch.Tensor  # (B, D) mean over real tokens (or [CLS]), L2-normalised if normalize
    mlm_logits: torch.Tensor | None  # (B, T, V); None without mlm_head
    pooled: torch.Tensor | None  # (B, D) the pooler's output; None without pooler
    class_logits: torch.Tensor | None  # (B, num_labels); None without classifier
    attentions: tuple[torch.Tensor, ...]  # per layer (B, H, T, T) when need_weights, else ()


def mean_pool(hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """(B, T, D), (B, T) -> (B, D): the average of the real tokens' vectors."""
    weights = attention_mask.to(hidden.dtype)[..., None]  # (B, T, 1)
    total = (hidden * weights).sum(dim=1)  # (B, D)
    return total / weights.sum(dim=1).clamp(min=1.0)  # (B, D)


def l2_normalize(vectors: torch.Tensor) -> torch.Tensor:
    """(B, D) -> (B, D) of unit length; a zero vector stays zero (the 1e-12 floor, as torch's normalize)."""
    norms = vectors.pow(2).sum(dim=-1, keepdim=True).sqrt()  # (B, 1)
    return vectors / norms.clamp(min=1e-12)


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
            eps=config.block.norm.eps,
        )
        self.encoder = EncoderStack(
            config.d_model,
            config.n_heads,
            config.d_ff,
            layer_options(config, config.n_layers),
            final_norm=final_norm(config.block),
            relative=relative_options(config),
            dropout=config.dropout,
        )
        d_model = config.d_model
        self.mlm_transform: nn.Sequential | None = None
        self.mlm_decoder: nn.Linear | None = None
        if config.mlm_head:
            self.mlm_transform = nn.Sequential(
                nn.Linear(d_model, d_model),
                make_activation(config.block.ffn.activation),
                make_norm(config.block.norm.kind, d_model, eps=config.block.norm.eps),
            )
            self.mlm_decoder = nn.Linear(d_model, config.vocab_size)
            self.mlm_decoder.weight = self.embeddings.token.weight  # tied, as in BERT
        self.pooler = nn.Sequential(nn.Linear(d_model, d_model), nn.Tanh()) if config.pooler else None
        self.classifier = None
        if config.classifier:
            self.classifier = nn.Sequential(nn.Dropout(config.dropout), nn.Linear(d_model, config.num_labels))
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
        mlm_logits = None  # (B, T, V) with the head
        if self.mlm_transform is not None and self.mlm_decoder is not None:  # set together, with the head
            mlm_logits = self.mlm_decoder(self.mlm_transform(hidden))
        pooled = None if self.pooler is None else self.pooler(hidden[:, 0])  # (B, D)
        class_logits = None if self.classifier is None else self.classifier(pooled)  # (B, num_labels)
        pool_cls = self.config.pooling == "cls"
        embedding = hidden[:, 0] if pool_cls else mean_pool(hidden, inputs.attention_mask)  # (B, D)
        if self.config.normalize:
            embedding = l2_normalize(embedding)  # (B, D)
        return BERTOutput(hidden, embedding, mlm_logits, pooled, class_logits, out.attentions)
