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
from onnxformer.builder.layers.positions import (
    LearnedPositionalEmbedding,
    RelativePositionBias,
    RopeScalingOptions,
    RotaryEmbedding,
    SinusoidalPositionalEncoding,
    default_positions,
)
from onnxformer.builder.layers.residual import NORM_POSITIONS, NormPosition, ResidualNorm
from onnxformer.builder.layers.stacks import DecoderStack, EncoderStack, StackInputs

__all__ = [
    "ACTIVATIONS",
    "NORMS",
    "NORM_POSITIONS",
    "Activation",
    "AttentionOutput",
    "DecoderBlock",
    "DecoderBlockOutput",
    "DecoderStack",
    "EncoderBlock",
    "EncoderBlockOutput",
    "EncoderStack",
    "FeedForward",
    "LearnedPositionalEmbedding",
    "MultiHeadAttention",
    "NormKind",
    "NormPosition",
    "RMSNorm",
    "RelativePositionBias",
    "ResidualNorm",
    "RopeScalingOptions",
    "RotaryEmbedding",
    "ScaledDotProductAttention",
    "SinusoidalPositionalEncoding",
    "StackInputs",
    "causal_mask",
    "default_positions",
    "make_norm",
    "padding_mask",
    "scaled_dot_product_attention",
]
