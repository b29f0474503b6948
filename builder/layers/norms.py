"""Normalisation layers: LayerNorm (Ba et al., 2016) or RMSNorm (Zhang & Sennrich, 2019).

    LayerNorm(x) = (x - mean(x)) / sqrt(var(x) + eps) * weight + bias     (BERT, GPT-2, our defaults)
    RMSNorm(x)   = x / sqrt(mean(x^2) + eps) * weight                      (T5, Llama: no mean, no bias)

RMSNorm drops the re-centring and the bias: it is cheaper and trains as well. As T5 and Llama do, the mean
square is taken in fp32 whatever the input dtype, so half-precision inputs do not overflow in x^2.
The epsilon is a parameter everywhere: checkpoints differ (BERT 1e-12, T5 and Llama 1e-6).
"""

from typing import Literal

import torch
from torch import nn

from onnxformer.builder.layers.checks import check_positive
from onnxformer.runtime.errors import ConfigError

NormKind = Literal["layer", "rms"]
NORMS: tuple[NormKind, ...] = ("layer", "rms")


class RMSNorm(nn.Module):
    """`weight_offset` scales by (offset + weight): Gemma stores w around 0 and multiplies by 1 + w."""

    def __init__(self, d_model: int, *, eps: float = 1e-6, weight_offset: float = 0.0) -> None:
        super().__init__()
        check_positive(d_model=d_model, eps=eps)
        self.eps = eps
        self.weight_offset = weight_offset
        self.weight = nn.Parameter(torch.ones(d_model))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x (..., D) -> (..., D)."""
        # Half precision is widened to fp32 for the mean square; fp32 and float64 (the parity reference)
        # are computed as they come.
        wide = x.to(torch.promote_types(x.dtype, torch.float32))  # (..., D)
        scaled = wide * torch.rsqrt(wide.pow(2).mean(-1, keepdim=True) + self.eps)  # (..., D)
        weight = self.weight + self.weight_offset if self.weight_offset else self.weight  # (D,)
        return weight * scaled.to(x.dtype)


def make_norm(
    kind: NormKind, d_model: int, *, eps: float = 1e-5, weight_offset: float = 0.0, bias: bool = True
) -> nn.Module:
    """The norm of `kind` over the last axis of width d_model; `bias` False: a LayerNorm without its shift
    (ModernBERT's; RMSNorm has none either way)."""
    if kind == "layer":
        check_positive(d_model=d_model, eps=eps)
        if weight_offset:
            raise ConfigError("a weight offset applies to RMSNorm only; use norm kind 'rms' or offset 0")
        return nn.LayerNorm(d_model, eps=eps, bias=bias)
    if kind == "rms":
        return RMSNorm(d_model, eps=eps, weight_offset=weight_offset)
    raise ConfigError(f"norm must be one of {NORMS}, got {kind!r}")
