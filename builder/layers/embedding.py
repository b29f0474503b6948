"""Token embeddings plus, for the absolute encodings, the position's (and BERT's segment) embedding.

Relative and rotary encodings act inside attention, so for them this adds nothing positional: the family
builds a `RelativePositionBias` or sets `rotary=True` on its blocks instead.

With sinusoidal positions the token embeddings are multiplied by sqrt(d_model) before the encoding is added
(Vaswani et al., 2017, 3.4; the Annotated Transformer's Embeddings): the encoding's entries are of order 1,
and the tokens' N(0, 0.02) embeddings would otherwise be drowned by it (tiny GPT, sinusoidal, 200 steps
of 32: val loss 1.77 and 74% grammatical samples with the scale, 2.26 and 8% without). Learned position
tables start at the tokens' scale and learn theirs, so they are added as they are.
"""

import math
from typing import Literal

import torch
from torch import nn

from onnxformer.builder.layers.checks import check_dropout, check_positive, check_tensor
from onnxformer.builder.layers.positions import LearnedPositionalEmbedding, SinusoidalPositionalEncoding
from onnxformer.runtime.errors import ConfigError, InputError

PositionKind = Literal["sinusoidal", "learned", "relative", "rotary"]
POSITION_KINDS: tuple[PositionKind, ...] = ("sinusoidal", "learned", "relative", "rotary")


def check_position_kind(position: str) -> None:
    if position not in POSITION_KINDS:
        raise ConfigError(f"position must be one of {POSITION_KINDS}, got {position!r}")


def positions_from_mask(attention_mask: torch.Tensor, length: int) -> torch.Tensor:
    """(B, P + T) 0/1 mask -> (B, T) positions of the last T tokens, counting only real tokens.

    A left-padded row then numbers its first real token 0, exactly as when it runs alone, so batched and
    one-by-one generation agree. Padding positions get 0 (their outputs are never used).
    """
    counts = torch.cumsum(attention_mask.long(), dim=1) - 1  # (B, P + T)
    # narrow, not a slice: its size is `length` by construction, which torch.export can prove (a slice's
    # size from a symbolic start is data-dependent to it, and a rotary model's shape checks then fail).
    return counts.clamp(min=0).narrow(1, attention_mask.shape[1] - length, length)  # (B, T)


class Embeddings(nn.Module):
    def __init__(
        self,
        vocab_size: int,
        d_model: int,
        *,
        position: PositionKind,
        max_len: int,
        segments: int = 0,
        norm: bool = False,
        norm_bias: bool = True,
        dropout: float = 0.0,
        eps: float = 1e-5,
        scale: float | None = None,
    ) -> None:
        """`scale` multiplies the token embeddings; None: sqrt(d_model) with sinusoidal positions (Vaswani
        et al., 3.4), else 1. Gemma scales by sqrt(d_model) with rotary positions. `norm` ends with a
        LayerNorm (BERT; ModernBERT's has no bias: `norm_bias` False)."""
        super().__init__()
        check_positive(vocab_size=vocab_size, d_model=d_model, max_len=max_len)
        if scale is not None:
            check_positive(scale=scale)
        check_position_kind(position)
        check_dropout(dropout)
        self.vocab_size = vocab_size
        self.token = nn.Embedding(vocab_size, d_model)
        nn.init.normal_(self.token.weight, std=0.02)
        self.position: nn.Module | None = None
        self.scale = 1.0
        if position == "learned":
            self.position = LearnedPositionalEmbedding(max_len, d_model)
        elif position == "sinusoidal":
            self.position = SinusoidalPositionalEncoding(d_model)
            self.scale = math.sqrt(d_model)
        if scale is not None:
            self.scale = scale
        self.segment = nn.Embedding(segments, d_model) if segments else None
        self.norm = nn.LayerNorm(d_model, eps=eps, bias=norm_bias) if norm else None
        self.dropout = nn.Dropout(dropout)

    def forward(
        self,
        input_ids: torch.Tensor,  # (B, T) int64
        positions: torch.Tensor,  # (B, T) int64
        token_type_ids: torch.Tensor | None = None,  # (B, T) int64 segment ids
    ) -> torch.Tensor:
        check_tensor(input_ids, "input_ids", dims=("B", "T"))
        # Out-of-range ids would index past the table (and CUDA may clamp them silently): refuse them.
        if not torch.compiler.is_compiling() and input_ids.numel():
            low, high = int(input_ids.min()), int(input_ids.max())
            if low < 0 or high >= self.vocab_size:
                raise InputError(
                    f"token id {high if high >= self.vocab_size else low} is outside the vocabulary "
                    f"[0, {self.vocab_size}); encode text with the model's own tokenizer"
                )
        hidden = self.token(input_ids)  # (B, T, D)
        if self.scale != 1.0:
            hidden = hidden * self.scale  # (B, T, D)
        if self.position is not None:
            hidden = hidden + self.position(positions)  # (B, T, D)
        if token_type_ids is not None and self.segment is None:
            raise InputError("token_type_ids were given but this model has no segment embedding")
        if self.segment is not None:
            segments = torch.zeros_like(input_ids) if token_type_ids is None else token_type_ids
            check_tensor(segments, "token_type_ids", dims=("B", "T"), sizes=dict(enumerate(input_ids.shape)))
            if not torch.compiler.is_compiling() and segments.numel():
                low, high = int(segments.min()), int(segments.max())
                if low < 0 or high >= self.segment.num_embeddings:
                    raise InputError(
                        f"token_type_ids must be in [0, {self.segment.num_embeddings}), got values "
                        f"from {low} to {high}; use 0 for the first segment and 1 for the second"
                    )
            hidden = hidden + self.segment(segments)  # (B, T, D)
        if self.norm is not None:
            hidden = self.norm(hidden)
        return self.dropout(hidden)
