"""Encoder and decoder blocks: attention and feed-forward sublayers, each wrapped in residual + norm.

    Encoder block                         Decoder block
    x ──┬──────────────┐                  x ──┬─────────────────────┐
        │ [LN] pre     │                      │ [LN] pre            │
        │ self-attn    │ (bidirectional)      │ masked self-attn    │ (causal, past K/V in, present out)
        └──► + ◄───────┘                      └──► + ◄──────────────┘
             [LN] post                              [LN] post
        ┌────┴─────────┐                      ┌─────┴───────────────┐
        │ [LN] pre     │                      │ [LN] pre            │ (only with cross_attention=True)
        │ FFN          │                      │ cross-attn ◄─ memory│ (queries from x, K/V from encoder)
        └──► + ◄───────┘                      └──► + ◄──────────────┘
             [LN] post                              [LN] post
                                              ┌─────┴───────────────┐
                                              │ [LN] pre   FFN      │
                                              └──► + ◄──────────────┘
                                                    [LN] post

[LN] is LayerNorm or RMSNorm. A sandwich block also norms each sublayer's output before the sum (Gemma);
a parallel block feeds x to attention and FFN alike and adds both (GPT-NeoX: x + attn(LN x) + FFN(LN'x)).
A pre-LN block may leave out the [LN] before self-attention (ModernBERT's first layer, right after the
embeddings' norm).
A block takes its widths (d_model, n_heads, d_ff) and one `BlockOptions` (options.py): the norm, the
residual placement, the attention, rotary and feed-forward groups. Blocks map (B, T, D) to (B, T, D), so
they stack. Positional information enters either before the stack
(sinusoidal/learned, added to the embeddings by the family), as `position_bias` on the self-attention
logits (T5 relative bias, computed once per stack and shared), or as rotary positions inside
self-attention (options.rotary). A sliding window (options.attention) is causal in a decoder block and
bidirectional in an encoder block: the keys fewer than W slots away on either side.
"""

from typing import NamedTuple, TypedDict

import torch
from torch import nn

from onnxformer.builder.layers.attention import MultiHeadAttention
from onnxformer.builder.layers.checks import check_tensor
from onnxformer.builder.layers.feedforward import FeedForward
from onnxformer.builder.layers.norms import make_norm
from onnxformer.builder.layers.options import BlockOptions
from onnxformer.builder.layers.positions import RopeScalingOptions
from onnxformer.builder.layers.residual import ResidualNorm
from onnxformer.runtime.errors import ConfigError, InputError


class EncoderBlockOutput(NamedTuple):
    hidden: torch.Tensor  # (B, T, D)
    weights: torch.Tensor | None  # (B, H, T, T) when need_weights


class DecoderBlockOutput(NamedTuple):
    hidden: torch.Tensor  # (B, T, D)
    present_key: torch.Tensor  # (B, Hkv, P + T, Dh) self-attention cache to feed back as past_key
    present_value: torch.Tensor  # (B, Hkv, P + T, Dh)
    self_weights: torch.Tensor | None  # (B, H, T, P + T) when need_weights
    cross_weights: torch.Tensor | None  # (B, H, T, S) when need_weights and cross-attention


class _RotaryArguments(TypedDict, total=False):
    """MultiHeadAttention's rotary numbers, from a block's rotary group."""

    rotary_base: float
    rope_scaling: RopeScalingOptions | None
    rotary_fraction: float


class _AttentionArguments(TypedDict):
    """MultiHeadAttention's numbers, from a block's attention group."""

    qkv_bias: bool
    out_bias: bool
    n_kv_heads: int | None
    head_dim: int | None
    scale: float | None
    query_norm: nn.Module | None
    key_norm: nn.Module | None
    softcap: float | None
    sliding_window: int | None


def self_attention(
    d_model: int, n_heads: int, options: BlockOptions, *, dropout: float
) -> MultiHeadAttention:
    """The block's self-attention: its attention group, rotary positions when the block has them."""
    rotary = options.rotary
    scaling: _RotaryArguments = (
        {}
        if rotary is None
        else {"rotary_base": rotary.base, "rope_scaling": rotary.scaling, "rotary_fraction": rotary.fraction}
    )
    attention = _attention(options, n_heads, d_model)
    return MultiHeadAttention(
        d_model, n_heads, dropout=dropout, rotary=rotary is not None, **scaling, **attention
    )


def _cross_attention(d_model: int, n_heads: int, options: BlockOptions, dropout: float) -> MultiHeadAttention:
    """Queries from the decoder, keys and values from the encoder: no rotary positions, and no sliding
    window (the encoder output is seen whole)."""
    attention = _attention(options, n_heads, d_model)
    attention["sliding_window"] = None
    return MultiHeadAttention(d_model, n_heads, dropout=dropout, **attention)


def _attention(options: BlockOptions, n_heads: int, d_model: int) -> _AttentionArguments:
    """The attention group as MultiHeadAttention's numbers; QK-norm uses the block's norm at Dh."""
    a, norm = options.attention, options.norm
    width = options.head_width(d_model, n_heads)

    def head_norm() -> nn.Module | None:
        if not a.qk_norm:
            return None
        return make_norm(norm.kind, width, eps=norm.eps, weight_offset=norm.weight_offset, bias=norm.bias)

    return {
        "qkv_bias": a.qkv_bias,
        "out_bias": a.out_bias,
        "n_kv_heads": a.n_kv_heads,
        "head_dim": a.head_dim,
        "scale": a.scale,
        "query_norm": head_norm(),
        "key_norm": head_norm(),
        "softcap": a.softcap,
        "sliding_window": a.sliding_window,
    }


def _residual(d_model: int, options: BlockOptions, dropout: float, *, normed: bool = True) -> ResidualNorm:
    norm = options.norm
    return ResidualNorm(
        d_model,
        norm_position=options.residual.position,
        dropout=dropout,
        eps=norm.eps,
        norm=norm.kind,
        weight_offset=norm.weight_offset,
        bias=norm.bias,
        sandwich=options.residual.sandwich,
        normed=normed,
    )


def _feed_forward(d_model: int, d_ff: int, options: BlockOptions, dropout: float) -> FeedForward:
    ffn = options.ffn
    return FeedForward(
        d_model, d_ff, activation=ffn.activation, dropout=dropout, bias=ffn.bias, gated=ffn.gated
    )


class EncoderBlock(nn.Module):
    def __init__(
        self,
        d_model: int,
        n_heads: int,
        d_ff: int,
        options: BlockOptions | None = None,
        *,
        dropout: float = 0.0,
    ) -> None:
        super().__init__()
        options = BlockOptions() if options is None else options
        self.options = options
        self.self_attn = self_attention(d_model, n_heads, options, dropout=dropout)
        self.self_attn_residual = _residual(d_model, options, dropout, normed=options.residual.attention_norm)
        self.ffn = _feed_forward(d_model, d_ff, options, dropout)
        self.ffn_residual = _residual(d_model, options, dropout)
        self.d_model = d_model

    def forward(
        self,
        x: torch.Tensor,  # (B, T, D)
        *,
        attention_mask: torch.Tensor | None = None,  # (B, T) 1 = real token, 0 = padding
        position_bias: torch.Tensor | None = None,  # broadcastable to (B, H, T, T)
        positions: torch.Tensor | None = None,  # (B, T), for rotary
        need_weights: bool = False,
    ) -> EncoderBlockOutput:
        check_tensor(x, "x", dims=("B", "T", "D"), sizes={2: self.d_model})
        attn = self.self_attn(
            self.self_attn_residual.before(x),
            attention_mask=attention_mask,
            position_bias=position_bias,
            positions=positions,
            need_weights=need_weights,
        )
        return EncoderBlockOutput(self._merge(x, attn.output), attn.weights)

    def _merge(self, x: torch.Tensor, attended: torch.Tensor) -> torch.Tensor:
        """The attention output into the stream, then the FFN: in turn, or both from x (parallel)."""
        source = x if self.options.residual.parallel else None
        x = self.self_attn_residual.after(x, attended)  # (B, T, D)
        fed = x if source is None else source  # (B, T, D)
        return self.ffn_residual.after(x, self.ffn(self.ffn_residual.before(fed)))  # (B, T, D)


class DecoderBlock(nn.Module):
    def __init__(
        self,
        d_model: int,
        n_heads: int,
        d_ff: int,
        options: BlockOptions | None = None,
        *,
        cross_attention: bool = True,
        dropout: float = 0.0,
    ) -> None:
        super().__init__()
        options = BlockOptions() if options is None else options
        if cross_attention and options.residual.parallel:
            raise ConfigError(
                "residual.parallel is built for blocks without cross-attention (GPT-NeoX); a parallel "
                "decoder block with cross-attention is not"
            )
        self.options = options
        self.self_attn = self_attention(d_model, n_heads, options, dropout=dropout)
        self.self_attn_residual = _residual(d_model, options, dropout, normed=options.residual.attention_norm)
        self.cross_attn = _cross_attention(d_model, n_heads, options, dropout) if cross_attention else None
        self.cross_attn_residual = _residual(d_model, options, dropout) if cross_attention else None
        self.ffn = _feed_forward(d_model, d_ff, options, dropout)
        self.ffn_residual = _residual(d_model, options, dropout)
        self.d_model = d_model

    def forward(
        self,
        x: torch.Tensor,  # (B, T, D)
        *,
        attention_mask: torch.Tensor | None = None,  # (B, P + T) over past and new tokens
        memory: torch.Tensor | None = None,  # (B, S, D) encoder output, for cross-attention
        memory_key: torch.Tensor | None = None,  # (B, H, S, Dh) cross keys from project_memory, or memory
        memory_value: torch.Tensor | None = None,  # (B, H, S, Dh)
        memory_mask: torch.Tensor | None = None,  # (B, S) 1 = real source token
        past_key: torch.Tensor | None = None,  # (B, H, P, Dh)
        past_value: torch.Tensor | None = None,  # (B, H, P, Dh)
        position_bias: torch.Tensor | None = None,  # broadcastable to (B, H, T, P + T)
        positions: torch.Tensor | None = None,  # (B, T), for rotary
        need_weights: bool = False,
    ) -> DecoderBlockOutput:
        check_tensor(x, "x", dims=("B", "T", "D"), sizes={2: self.d_model})
        has_memory = memory is not None or memory_key is not None
        if self.cross_attn is None and has_memory:
            raise InputError("this decoder block has no cross-attention; build it with cross_attention=True")
        if self.cross_attn is not None and not has_memory:
            raise InputError(
                "this decoder block cross-attends: pass the encoder output as memory= "
                "(or its projections as memory_key=/memory_value=)"
            )
        attn = self.self_attn(
            self.self_attn_residual.before(x),
            attention_mask=attention_mask,
            causal=True,
            past_key=past_key,
            past_value=past_value,
            position_bias=position_bias,
            positions=positions,
            need_weights=need_weights,
        )
        source = x  # (B, T, D): the FFN's input too when the sublayers run in parallel (GPT-NeoX)
        x = self.self_attn_residual.after(x, attn.output)  # (B, T, D)
        cross_weights = None
        if self.cross_attn is not None:
            assert self.cross_attn_residual is not None  # built with cross_attn
            cross = self.cross_attn(
                self.cross_attn_residual.before(x),
                memory=memory,
                memory_key=memory_key,
                memory_value=memory_value,
                attention_mask=memory_mask,
                need_weights=need_weights,
            )
            x = self.cross_attn_residual.after(x, cross.output)  # (B, T, D)
            cross_weights = cross.weights
        fed = source if self.options.residual.parallel else x  # (B, T, D)
        x = self.ffn_residual.after(x, self.ffn(self.ffn_residual.before(fed)))  # (B, T, D)
        return DecoderBlockOutput(x, attn.present_key, attn.present_value, attn.weights, cross_weights)
