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

[LN] is LayerNorm or RMSNorm (`norm=`, with the checkpoint's `eps=`). Blocks map (B, T, D) to (B, T, D), so
they stack. Positional information enters either before the stack
(sinusoidal/learned, added to the embeddings by the family), as `position_bias` on the self-attention
logits (T5 relative bias, computed once per stack and shared), or as `rotary=True` inside self-attention.
"""

from typing import NamedTuple

import torch
from torch import nn

from onnxformer.builder.layers.attention import MultiHeadAttention
from onnxformer.builder.layers.checks import check_tensor
from onnxformer.builder.layers.feedforward import Activation, FeedForward
from onnxformer.builder.layers.norms import NormKind
from onnxformer.builder.layers.positions import RopeScalingOptions
from onnxformer.builder.layers.residual import NormPosition, ResidualNorm
from onnxformer.runtime.errors import InputError


class EncoderBlockOutput(NamedTuple):
    hidden: torch.Tensor  # (B, T, D)
    weights: torch.Tensor | None  # (B, H, T, T) when need_weights


class DecoderBlockOutput(NamedTuple):
    hidden: torch.Tensor  # (B, T, D)
    present_key: torch.Tensor  # (B, Hkv, P + T, Dh) self-attention cache to feed back as past_key
    present_value: torch.Tensor  # (B, Hkv, P + T, Dh)
    self_weights: torch.Tensor | None  # (B, H, T, P + T) when need_weights
    cross_weights: torch.Tensor | None  # (B, H, T, S) when need_weights and cross-attention


class EncoderBlock(nn.Module):
    def __init__(
        self,
        d_model: int,
        n_heads: int,
        d_ff: int,
        *,
        norm_position: NormPosition = "pre",
        activation: Activation = "gelu",
        dropout: float = 0.0,
        rotary: bool = False,
        eps: float = 1e-5,
        norm: NormKind = "layer",
        gated: bool = False,
        attention_bias: bool = True,
        ffn_bias: bool = True,
        n_kv_heads: int | None = None,
        head_dim: int | None = None,
        scale: float | None = None,
        rotary_base: float = 10000.0,
        rope_scaling: RopeScalingOptions | None = None,
    ) -> None:
        super().__init__()
        residual = {"norm_position": norm_position, "dropout": dropout, "eps": eps, "norm": norm}
        attention = {
            "dropout": dropout,
            "bias": attention_bias,
            "n_kv_heads": n_kv_heads,
            "head_dim": head_dim,
            "scale": scale,
        }
        rope = {"rotary": rotary, "rotary_base": rotary_base, "rope_scaling": rope_scaling}
        self.self_attn = MultiHeadAttention(d_model, n_heads, **attention, **rope)
        self.self_attn_residual = ResidualNorm(d_model, **residual)
        self.ffn = FeedForward(
            d_model, d_ff, activation=activation, dropout=dropout, bias=ffn_bias, gated=gated
        )
        self.ffn_residual = ResidualNorm(d_model, **residual)
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
        x = self.self_attn_residual.after(x, attn.output)  # (B, T, D)
        x = self.ffn_residual.after(x, self.ffn(self.ffn_residual.before(x)))  # (B, T, D)
        return EncoderBlockOutput(x, attn.weights)


class DecoderBlock(nn.Module):
    def __init__(
        self,
        d_model: int,
        n_heads: int,
        d_ff: int,
        *,
        cross_attention: bool = True,
        norm_position: NormPosition = "pre",
        activation: Activation = "gelu",
        dropout: float = 0.0,
        rotary: bool = False,
        eps: float = 1e-5,
        norm: NormKind = "layer",
        gated: bool = False,
        attention_bias: bool = True,
        ffn_bias: bool = True,
        n_kv_heads: int | None = None,
        head_dim: int | None = None,
        scale: float | None = None,
        rotary_base: float = 10000.0,
        rope_scaling: RopeScalingOptions | None = None,
    ) -> None:
        super().__init__()
        residual = {"norm_position": norm_position, "dropout": dropout, "eps": eps, "norm": norm}
        attention = {
            "dropout": dropout,
            "bias": attention_bias,
            "n_kv_heads": n_kv_heads,
            "head_dim": head_dim,
            "scale": scale,
        }
        rope = {"rotary": rotary, "rotary_base": rotary_base, "rope_scaling": rope_scaling}
        self.self_attn = MultiHeadAttention(d_model, n_heads, **attention, **rope)
        self.self_attn_residual = ResidualNorm(d_model, **residual)
        self.cross_attn = MultiHeadAttention(d_model, n_heads, **attention) if cross_attention else None
        self.cross_attn_residual = ResidualNorm(d_model, **residual) if cross_attention else None
        self.ffn = FeedForward(
            d_model, d_ff, activation=activation, dropout=dropout, bias=ffn_bias, gated=gated
        )
        self.ffn_residual = ResidualNorm(d_model, **residual)
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
        x = self.self_attn_residual.after(x, attn.output)  # (B, T, D)
        cross_weights = None
        if self.cross_attn is not None:
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
        x = self.ffn_residual.after(x, self.ffn(self.ffn_residual.before(x)))  # (B, T, D)
        return DecoderBlockOutput(x, attn.present_key, attn.present_value, attn.weights, cross_weights)
