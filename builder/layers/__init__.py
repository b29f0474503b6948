"""The Transformer's parts, one concept per module. Shape legend: B batch, T query length, S key/source
length, P past length, D model width, H heads, Dh head width, F ffn width, V vocab."""

from onnxformer.builder.layers.attention import (
    AttentionOutput,
    MultiHeadAttention,
    ScaledDotProductAttention,
    scaled_dot_product_attention,
)
from onnxformer.builder.layers.blocks import (
    DecoderBlock,
    DecoderBlockOutput,
    EncoderBlock,
    EncoderBlockOutput,
)
from onnxformer.builder.layers.feedforward import ACTIVATIONS, Activation, FeedForward
from onnxformer.builder.layers.masks import causal_mask, padding_mask
from onnxformer.builder.layers.norms import NORMS, NormKind, RMSNorm, make_norm
from onnxformer.builder.layers.options import (
    AttentionOptions,
    BlockOptions,
    FeedForwardOptions,
    NormOptions,
    ResidualOptions,
    RotaryOptions,
)
from onnxformer.builder.layers.positions import (
    LearnedPositionalEmbedding,
    RelativePositionBias,
    RopeScalingOptions,
    RotaryEmbedding,
    SinusoidalPositionalEncoding,
    default_positions,
)
from onnxformer.builder.layers.residual import NORM_POSITIONS, NormPosition, ResidualNorm
from onnxformer.builder.layers.stacks import (
    DecoderStack,
    EncoderStack,
    RelativeOptions,
    StackInputs,
    final_norm,
)

__all__ = [
    "ACTIVATIONS",
    "NORMS",
    "NORM_POSITIONS",
    "Activation",
    "AttentionOptions",
    "AttentionOutput",
    "BlockOptions",
    "DecoderBlock",
    "DecoderBlockOutput",
    "DecoderStack",
    "EncoderBlock",
    "EncoderBlockOutput",
    "EncoderStack",
    "FeedForward",
    "FeedForwardOptions",
    "LearnedPositionalEmbedding",
    "MultiHeadAttention",
    "NormKind",
    "NormOptions",
    "NormPosition",
    "RMSNorm",
    "RelativeOptions",
    "RelativePositionBias",
    "ResidualNorm",
    "ResidualOptions",
    "RopeScalingOptions",
    "RotaryEmbedding",
    "RotaryOptions",
    "ScaledDotProductAttention",
    "SinusoidalPositionalEncoding",
    "StackInputs",
    "causal_mask",
    "default_positions",
    "final_norm",
    "make_norm",
    "padding_mask",
    "scaled_dot_product_attention",
]
