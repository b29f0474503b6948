"""Tensor-in, tuple-out views of the layers, one per exported graph.

ONNX graphs take named tensors and give a fixed tuple of outputs; these small modules fix which
arguments of a layer become graph inputs (their parameter names are the graph's input names) and which
results become outputs. They hold the layer they wrap, so its parameter names become the initializer names.
"""

from torch import nn

from onnxformer.builder.layers import (
    DecoderBlock,
    EncoderBlock,
    FeedForward,
    LearnedPositionalEmbedding,
    MultiHeadAttention,
    RelativePositionBias,
    ResidualNorm,
    RotaryEmbedding,
    ScaledDotProductAttention,
    SinusoidalPositionalEncoding,
)


class AttentionProduct(nn.Module):
    def __init__(self, *, causal: bool) -> None:
        super().__init__()
        self.attention = ScaledDotProductAttention()
        self.causal = causal

    def forward(self, query, key, value, attention_mask):  # (B,H,T,Dh) x3, (B,S) -> (B,H,T,Dh), (B,H,T,S)
        result = self.attention(
            query, key, value, attention_mask=attention_mask, causal=self.causal, need_weights=True
        )
        return result.output, result.weights


class SelfAttention(nn.Module):
    def __init__(self, attention: MultiHeadAttention) -> None:
        super().__init__()
        self.attention = attention

    def forward(self, hidden_states, attention_mask):  # (B, T, D), (B, T) -> (B, T, D), (B, H, T, T)
        result = self.attention(hidden_states, attention_mask=attention_mask, need_weights=True)
        return result.output, result.weights


class CachedCausalSelfAttention(nn.Module):
    def __init__(self, attention: MultiHeadAttention) -> None:
        super().__init__()
        self.attention = attention

    def forward(self, hidden_states, attention_mask, past_key, past_value):  # (B,T,D), (B,P+T), (B,H,P,Dh)
        result = self.attention(
            hidden_states,
            attention_mask=attention_mask,
            causal=True,
            past_key=past_key,
            past_value=past_value,
            need_weights=True,
        )
        return result.output, result.present_key, result.present_value, result.weights


class CrossAttention(nn.Module):
    def __init__(self, attention: MultiHeadAttention) -> None:
        super().__init__()
        self.attention = attention

    def forward(
        self, hidden_states, encoder_hidden_states, encoder_attention_mask
    ):  # (B,T,D), (B,S,D), (B,S)
        result = self.attention(
            hidden_states,
            memory=encoder_hidden_states,
            attention_mask=encoder_attention_mask,
            need_weights=True,
        )
        return result.output, result.weights


class AbsolutePosition(nn.Module):
    def __init__(self, encoding: SinusoidalPositionalEncoding | LearnedPositionalEmbedding) -> None:
        super().__init__()
        self.encoding = encoding

    def forward(self, positions):  # (B, T) -> (B, T, D)
        return (self.encoding(positions),)


class RelativeBias(nn.Module):
    """Adds T5's bias for the last T of S positions to attention logits (B, H, T, S)."""

    def __init__(self, bias: RelativePositionBias) -> None:
        super().__init__()
        self.relative = bias

    def forward(self, attention_logits):  # (B, H, T, S) -> (B, H, T, S)
        length, total = attention_logits.shape[2], attention_logits.shape[3]
        return (attention_logits + self.relative(length, total, device=attention_logits.device),)


class Rotary(nn.Module):
    def __init__(self, rotary: RotaryEmbedding) -> None:
        super().__init__()
        self.rotary = rotary

    def forward(self, x, positions):  # (B, H, T, Dh), (B, T) -> (B, H, T, Dh)
        return (self.rotary(x, positions),)


class FeedForwardGraph(nn.Module):
    def __init__(self, ffn: FeedForward) -> None:
        super().__init__()
        self.ffn = ffn

    def forward(self, hidden_states):  # (B, T, D) -> (B, T, D)
        return (self.ffn(hidden_states),)


class Norm(nn.Module):
    def __init__(self, norm: nn.Module) -> None:
        super().__init__()
        self.norm = norm

    def forward(self, hidden_states):  # (B, T, D) -> (B, T, D)
        return (self.norm(hidden_states),)


class Residual(nn.Module):
    def __init__(self, residual: ResidualNorm) -> None:
        super().__init__()
        self.residual = residual

    def forward(self, hidden_states, sublayer_output):  # (B, T, D) x2 -> sublayer input, merged (B, T, D)
        return self.residual.before(hidden_states), self.residual.after(hidden_states, sublayer_output)


class Encoder(nn.Module):
    def __init__(self, block: EncoderBlock, relative: RelativePositionBias | None = None) -> None:
        super().__init__()
        self.block = block
        self.relative = relative

    def forward(self, hidden_states, attention_mask):  # (B, T, D), (B, T) -> (B, T, D)
        length = hidden_states.shape[1]
        bias = None if self.relative is None else self.relative(length, length, device=hidden_states.device)
        return (self.block(hidden_states, attention_mask=attention_mask, position_bias=bias).hidden,)


class _DecoderGraph(nn.Module):
    """A decoder block's graph: past key/value inputs when `cached`, relative bias if given. `Decoder` and
    `CrossDecoder` choose its inputs (their forward signatures differ, so neither extends the other).

    Optional graph inputs come last in the signature: the exporter binds example inputs in order.
    """

    def __init__(
        self,
        block: DecoderBlock,
        *,
        cached: bool,
        relative: RelativePositionBias | None = None,
    ) -> None:
        super().__init__()
        self.block = block
        self.relative = relative
        self.cached = cached

    def _run(self, hidden_states, attention_mask, memory, memory_mask, past_key, past_value):
        length, total = hidden_states.shape[1], attention_mask.shape[1]
        bias = None if self.relative is None else self.relative(length, total, device=hidden_states.device)
        result = self.block(
            hidden_states,
            attention_mask=attention_mask,
            memory=memory,
            memory_mask=memory_mask,
            past_key=past_key,
            past_value=past_value,
            position_bias=bias,
        )
        if self.cached:
            return result.hidden, result.present_key, result.present_value
        return (result.hidden,)


class Decoder(_DecoderGraph):
    """A decoder block without cross-attention."""

    def forward(self, hidden_states, attention_mask, past_key=None, past_value=None):
        # (B, T, D), (B, P + T), (B, H, P, Dh) x2 -> (B, T, D)[, present key/value (B, H, P + T, Dh)]
        return self._run(hidden_states, attention_mask, None, None, past_key, past_value)


class CrossDecoder(_DecoderGraph):
    """A decoder block with cross-attention to the encoder output."""

    def forward(
        self,
        hidden_states,  # (B, T, D)
        attention_mask,  # (B, P + T)
        encoder_hidden_states,  # (B, S, D)
        encoder_attention_mask,  # (B, S)
        past_key=None,  # (B, H, P, Dh) when cached
        past_value=None,  # (B, H, P, Dh) when cached
    ):
        return self._run(
            hidden_states, attention_mask, encoder_hidden_states, encoder_attention_mask, past_key, past_value
        )
