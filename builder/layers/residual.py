"""Residual connection with a norm (LayerNorm, or RMSNorm: see norms.py), placed before (pre-LN) or
after (post-LN) the sublayer.

    post-LN (Vaswani et al., 2017; BERT):   x = LayerNorm(x + Dropout(Sublayer(x)))
    pre-LN  (GPT-2, T5; Xiong et al., 2020): x = x + Dropout(Sublayer(LayerNorm(x)))
    sandwich (pre-LN + an output norm; Gemma 2 and 3, CogView's "sandwich LN", Ding et al., 2021):
                                             x = x + Dropout(LayerNorm'(Sublayer(LayerNorm(x))))

Post-LN normalises the residual stream itself and needs learning-rate warm-up to train stably; pre-LN keeps
an identity path from input to output, trains without careful warm-up, and needs one final LayerNorm after
the last block (the family adds it). The sandwich's output norm bounds what each sublayer adds to the
stream, which keeps very deep or low-precision models stable.

A block calls `before(x)` to get the sublayer's input and `after(x, y)` to merge the sublayer's output y.
"""

from typing import Literal

import torch
from torch import nn

from onnxformer.builder.layers.checks import check_dropout, check_positive
from onnxformer.builder.layers.norms import NormKind, make_norm
from onnxformer.runtime.errors import ConfigError

NormPosition = Literal["pre", "post"]
NORM_POSITIONS: tuple[NormPosition, ...] = ("pre", "post")


class ResidualNorm(nn.Module):
    def __init__(
        self,
        d_model: int,
        *,
        norm_position: NormPosition = "pre",
        dropout: float = 0.0,
        eps: float = 1e-5,
        norm: NormKind = "layer",
        weight_offset: float = 0.0,
        bias: bool = True,
        sandwich: bool = False,
        normed: bool = True,
    ) -> None:
        """`normed` False: a pre-LN sublayer reads x itself, no norm before it (ModernBERT's first layer)."""
        super().__init__()
        check_positive(d_model=d_model, eps=eps)
        check_dropout(dropout)
        if norm_position not in NORM_POSITIONS:
            raise ConfigError(f"norm_position must be one of {NORM_POSITIONS}, got {norm_position!r}")
        if sandwich and norm_position != "pre":
            raise ConfigError("a sandwich norm wraps a pre-LN sublayer; set norm_position='pre'")
        if not normed and norm_position != "pre":
            raise ConfigError("only a pre-LN sublayer can go without its norm; set norm_position='pre'")
        self.norm_position = norm_position
        self.norm = (
            make_norm(norm, d_model, eps=eps, weight_offset=weight_offset, bias=bias)
            if normed
            else nn.Identity()
        )
        self.output_norm = (
            make_norm(norm, d_model, eps=eps, weight_offset=weight_offset, bias=bias) if sandwich else None
        )
        self.dropout = nn.Dropout(dropout)

    def before(self, x: torch.Tensor) -> torch.Tensor:
        """The sublayer's input: LayerNorm(x) for pre-LN, x itself for post-LN. (B, T, D) -> (B, T, D)."""
        return self.norm(x) if self.norm_position == "pre" else x

    def after(self, x: torch.Tensor, sublayer_output: torch.Tensor) -> torch.Tensor:
        """Add the sublayer's output to the residual stream (normalised first in a sandwich, the sum after
        it for post-LN). (B, T, D)."""
        if self.output_norm is not None:
            sublayer_output = self.output_norm(sublayer_output)  # (B, T, D)
        merged = x + self.dropout(sublayer_output)  # (B, T, D)
        return self.norm(merged) if self.norm_position == "post" else merged
