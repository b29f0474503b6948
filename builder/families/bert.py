"""BERT: a bidirectional encoder (Devlin et al., 2019).

input_ids (+ segment ids) -> token + position + segment embeddings, LayerNorm
          -> encoder stack: N blocks (post-LN, as in the original) -> hidden states
hidden -> masked-LM head (dense, GELU, LayerNorm, tied decoder) -> mlm_logits
hidden[:, 0] ([CLS]) -> pooler (dense, tanh or relu) -> pooler_output -> classifier -> class_logits
hidden -> pool over real tokens (mean, [CLS], max or last) [-> dense, activation] [-> L2 normalised]
       -> sentence_embedding

Each head is optional (`mlm_head`, `pooler`, `classifier`), so a checkpoint without one (a BertModel has
no masked-LM head, a sentence-transformers model no classifier) leaves no untrained parameters behind; an
absent head's output is None. `pooling`, `projection` and `normalize` are sentence-transformers' Pooling,
Dense and Normalize modules: the embedding its `encode` returns. `type_vocab_size` 0 is a model without
token types (DistilBERT); the pooler's activation is tanh in BERT (and RoBERTa's classification head),
relu in DistilBERT's pre-classifier.

The parts are options: ModernBERT (Warner et al., 2024) is this model with rotary positions (the
embeddings add none), pre-LN blocks and the stack's final norm, GeGLU, norms and projections without
biases (`block.norm.bias`, `mlm_transform_bias`), and `layers` alternating global attention and a
bidirectional sliding window, each with its own rotary base; its first layer has no norm before
self-attention (`residual.attention_norm`).
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


Pooling = Literal["mean", "cls", "max", "last"]
POOLINGS: tuple[Pooling, ...] = ("mean", "cls", "max", "last")
PoolerActivation = Literal["tanh", "relu"]
POOLER_ACTIVATIONS: tuple[PoolerActivation, ...] = ("tanh", "relu")
ProjectionActivation = Literal["identity", "tanh", "relu", "gelu"]
PROJECTION_ACTIVATIONS: tuple[ProjectionActivation, ...] = ("identity", "tanh", "relu", "gelu")


@dataclass(frozen=True)
class ProjectionOptions:
    """A dense layer on the pooled embedding (sentence-transformers' Dense module): d_out wide."""

    d_out: int
    bias: bool = True
    activation: ProjectionActivation = "tanh"

    def __post_init__(self) -> None:
        if isinstance(self.d_out, bool) or not isinstance(self.d_out, int) or self.d_out < 1:
            raise ConfigError(f"projection.d_out must be an integer >= 1, got {self.d_out!r}")
        if not isinstance(self.bias, bool):
            raise ConfigError(f"projection.bias must be true or false, got {self.bias!r}")
        if self.activation not in PROJECTION_ACTIVATIONS:
            raise ConfigError(
                f"projection.activation must be one of {PROJECTION_ACTIVATIONS}, got {self.activation!r}"
            )


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
    pooler_activation: PoolerActivation = "tanh"
    pooling: Pooling = "mean"
    projection: ProjectionOptions | None = None
    normalize: bool = False
    mlm_transform_bias: bool = True  # the masked-LM transform's dense bias (ModernBERT has none)
    block: BlockOptions = field(default_factory=lambda: BlockOptions(residual=ResidualOptions("post")))
    layers: tuple[BlockOptions, ...] = ()  # one per layer where they differ from block (config.py)

    def __post_init__(self) -> None:
        validate_common(self)
        if self.num_labels < 1 or self.type_vocab_size < 0:
            raise ConfigError("num_labels must be >= 1 and type_vocab_size >= 0 (0: no token types)")
        for name in ("mlm_head", "pooler", "classifier", "normalize", "mlm_transform_bias"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(f"{name} must be true or false, got {getattr(self, name)!r}")
        if self.classifier and not self.pooler:
            raise ConfigError("the classifier reads the pooler's output: set pooler=True or classifier=False")
        if self.pooling not in POOLINGS:
            raise ConfigError(f"pooling must be one of {POOLINGS}, got {self.pooling!r}")
        if self.pooler_activation not in POOLER_ACTIVATIONS:
            raise ConfigError(
                f"pooler_activation must be one of {POOLER_ACTIVATIONS}, got {self.pooler_activation!r}"
            )
        if isinstance(self.projection, dict):  # a saved config (dataclasses.asdict)
            object.__setattr__(self, "projection", ProjectionOptions(**self.projection))
        if self.projection is not None and not isinstance(self.projection, ProjectionOptions):
            raise ConfigError(f"projection must be ProjectionOptions or None, got {self.projection!r}")

    @classmethod
    def preset(cls, name: str, **overrides: Any) -> "BERTConfig":
        return from_preset(cls, BERT_PRESETS, name, **overrides)


class BERTOutput(NamedTuple):
    hidden: torch.Tensor  # (B, T, D) last hidden state
    sentence_embedding: torch.Tensor  # (B, D) pooled [, projected to (B, d_out)] [, L2-normalised]
    mlm_logits: torch.Tensor | None  # (B, T, V); None without mlm_head
    pooled: torch.Tensor | None  # (B, D) the pooler's output; None without pooler
    class_logits: torch.Tensor | None  # (B, num_labels); None without classifier
    attentions: tuple[torch.Tensor, ...]  # per layer (B, H, T, T) when need_weights, else ()


def mean_pool(hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """(B, T, D), (B, T) -> (B, D): the average of the real tokens' vectors."""
    weights = attention_mask.to(hidden.dtype)[..., None]  # (B, T, 1)
    total = (hidden * weights).sum(dim=1)  # (B, D)
    return total / weights.sum(dim=1).clamp(min=1.0)  # (B, D)


def max_pool(hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """(B, T, D), (B, T) -> (B, D): each feature's largest value over the real tokens (padding is -inf, as
    sentence-transformers' Pooling fills it)."""
    padding = (attention_mask == 0)[..., None]  # (B, T, 1)
    return hidden.masked_fill(padding, float("-inf")).amax(dim=1)  # (B, D)


def last_token_pool(hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """(B, T, D), (B, T) -> (B, D): the vector of each row's last real token, wherever the padding is."""
    steps = torch.arange(hidden.shape[1], device=hidden.device)  # (T,)
    last = (steps * attention_mask.to(steps.dtype)).amax(dim=1)  # (B,)
    index = last[:, None, None].expand(-1, 1, hidden.shape[2])  # (B, 1, D)
    return hidden.gather(1, index)[:, 0]  # (B, D)


def pool(hidden: torch.Tensor, attention_mask: torch.Tensor, kind: Pooling) -> torch.Tensor:
    """(B, T, D), (B, T) -> (B, D) by sentence-transformers' pooling `kind`."""
    if kind == "cls":
        return hidden[:, 0]  # (B, D): right padding keeps [CLS] first
    if kind == "max":
        return max_pool(hidden, attention_mask)
    if kind == "last":
        return last_token_pool(hidden, attention_mask)
    return mean_pool(hidden, attention_mask)


def projection_activation(name: ProjectionActivation) -> nn.Module:
    if name == "identity":
        return nn.Identity()
    if name == "tanh":
        return nn.Tanh()
    return make_activation(name)


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
            segments=config.type_vocab_size,  # 0: none
            norm=True,
            norm_bias=config.block.norm.bias,
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
            norm = config.block.norm
            self.mlm_transform = nn.Sequential(
                nn.Linear(d_model, d_model, bias=config.mlm_transform_bias),
                make_activation(config.block.ffn.activation),
                make_norm(norm.kind, d_model, eps=norm.eps, bias=norm.bias),
            )
            self.mlm_decoder = nn.Linear(d_model, config.vocab_size)
            self.mlm_decoder.weight = self.embeddings.token.weight  # tied, as in BERT
        self.pooler = None
        if config.pooler:
            pooler_activation = nn.Tanh() if config.pooler_activation == "tanh" else nn.ReLU()
            self.pooler = nn.Sequential(nn.Linear(d_model, d_model), pooler_activation)
        self.classifier = None
        if config.classifier:
            self.classifier = nn.Sequential(nn.Dropout(config.dropout), nn.Linear(d_model, config.num_labels))
        self.projection = None
        if config.projection is not None:
            dense = config.projection
            self.projection = nn.Sequential(
                nn.Linear(d_model, dense.d_out, bias=dense.bias), projection_activation(dense.activation)
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
        mlm_logits = None  # (B, T, V) with the head
        if self.mlm_transform is not None and self.mlm_decoder is not None:  # set together, with the head
            mlm_logits = self.mlm_decoder(self.mlm_transform(hidden))
        pooled = None if self.pooler is None else self.pooler(hidden[:, 0])  # (B, D)
        class_logits = None if self.classifier is None else self.classifier(pooled)  # (B, num_labels)
        embedding = pool(hidden, inputs.attention_mask, self.config.pooling)  # (B, D)
        if self.projection is not None:
            embedding = self.projection(embedding)  # (B, d_out)
        if self.config.normalize:
            embedding = l2_normalize(embedding)  # (B, D)
        return BERTOutput(hidden, embedding, mlm_logits, pooled, class_logits, out.attentions)
