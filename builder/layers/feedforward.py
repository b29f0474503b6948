"""The position-wise feed-forward network (Vaswani et al., 2017, 3.3): FFN(x) = W2 act(W1 x + b1) + b2.

The same two-layer MLP is applied to every position independently; it widens to F (usually 4 D) and back.
GELU defaults to the exact erf form (Hendrycks & Gimpel, 2016) rather than the tanh approximation: it is
what BERT's reference defines, and it exports as a single Erf so PyTorch and ONNX agree to fp32 rounding.
"gelu_tanh" is the tanh approximation 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) that GPT-2
(gelu_new) and T5 v1.1 were trained with; "silu" is x * sigmoid(x) (Llama).

Gated (Shazeer, 2020, "GLU Variants Improve Transformer"): FFN(x) = W_down (act(W_gate x) * W_up x), three
projections instead of two. SwiGLU = gated silu (Llama), GEGLU = gated gelu_tanh (T5 v1.1).
"""

from typing import Literal

import torch
from torch import nn

from onnxformer.builder.layers.checks import check_dropout, check_positive, check_tensor
from onnxformer.runtime.errors import ConfigError

Activation = Literal["relu", "gelu", "gelu_tanh", "silu"]
ACTIVATIONS: tuple[Activation, ...] = ("relu", "gelu", "gelu_tanh", "silu")


def make_activation(name: Activation) -> nn.Module:
    if name == "relu":
        return nn.ReLU()
    if name == "gelu":
        return nn.GELU(approximate="none")
    if name == "gelu_tanh":
        return nn.GELU(approximate="tanh")
    if name == "silu":
        return nn.SiLU()
    raise ConfigError(f"activation must be one of {ACTIVATIONS}, got {name!r}")


class FeedForward(nn.Module):
    """up -> act -> down, or with `gated=True` down(act(gate(x)) * up(x)); `bias=False` has no biases."""

    def __init__(
        self,
        d_model: int,
        d_ff: int,
        *,
        activation: Activation = "gelu",
        dropout: float = 0.0,
        bias: bool = True,
        gated: bool = False,
    ) -> None:
        super().__init__()
        check_positive(d_model=d_model, d_ff=d_ff)
        check_dropout(dropout)
        self.d_model = d_model
        self.gate = nn.Linear(d_model, d_ff, bias=bias) if gated else None
        self.up = nn.Linear(d_model, d_ff, bias=bias)
        self.activation = make_activation(activation)
        self.dropout = nn.Dropout(dropout)
        self.down = nn.Linear(d_ff, d_model, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x (B, T, D) -> (B, T, D)."""
        check_tensor(x, "x", dims=("B", "T", "D"), sizes={2: self.d_model})
        if self.gate is None:
            hidden = self.activation(self.up(x))  # (B, T, F)
        else:
            hidden = self.activation(self.gate(x)) * self.up(x)  # (B, T, F)
        return self.down(self.dropout(hidden))  # (B, T, D)
