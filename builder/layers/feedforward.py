"""The position-wise feed-forward network (Vaswani et al., 2017, 3.3): FFN(x) = W2 act(W1 x + b1) + b2.

The same two-layer MLP is applied to every position independently; it widens to F (usually 4 D) and back.
GELU defaults to the exact erf form (Hendrycks & Gimpel, 2016) rather than the tanh approximation: it is
what BERT's reference defines, and it exports as a single Erf so PyTorch and ONNX agree to fp32 rounding.
"""

from typing import Literal

import torch
from torch import nn

from onnxformer.builder.layers.checks import check_dropout, check_positive, check_tensor
from onnxformer.runtime.errors import ConfigError

Activation = Literal["relu", "gelu"]
ACTIVATIONS: tuple[Activation, ...] = ("relu", "gelu")


def make_activation(name: Activation) -> nn.Module:
    if name == "relu":
        return nn.ReLU()
    if name == "gelu":
        return nn.GELU(approximate="none")
    raise ConfigError(f"activation must be one of {ACTIVATIONS}, got {name!r}")


class FeedForward(nn.Module):
    def __init__(
        self,
        d_model: int,
        d_ff: int,
        *,
        activation: Activation = "gelu",
        dropout: float = 0.0,
        bias: bool = True,
    ) -> None:
        super().__init__()
        check_positive(d_model=d_model, d_ff=d_ff)
        check_dropout(dropout)
        self.d_model = d_model
        self.up = nn.Linear(d_model, d_ff, bias=bias)
        self.activation = make_activation(activation)
        self.dropout = nn.Dropout(dropout)
        self.down = nn.Linear(d_ff, d_model, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x (B, T, D) -> (B, T, D)."""
        check_tensor(x, "x", dims=("B", "T", "D"), sizes={2: self.d_model})
        hidden = self.dropout(self.activation(self.up(x)))  # (B, T, F)
        return self.down(hidden)  # (B, T, D)
