"""Scaled dot-product attention and multi-head attention (Vaswani et al., 2017, section 3.2).

    Attention(Q, K, V) = softmax(Q K^T / sqrt(d_k) + bias) V

The 1/sqrt(d_k) factor keeps the logits' variance near 1 whatever the head width: without it, dot products
of d_k-wide vectors grow like sqrt(d_k) and push softmax into regions with vanishing gradients (3.2.1).
`scale` overrides it: T5 uses 1.0 (its initialisation folds the factor into the query weights).

Grouped-query attention (Ainslie et al., 2023; multi-query when n_kv_heads = 1, Shazeer, 2019): the keys
and values have n_kv_heads < H heads, each shared by H / n_kv_heads query heads; the KV cache keeps only
the n_kv_heads heads, which is the point (a smaller cache), and they are repeated to H for the product.

Masked logits are filled with the dtype's most negative finite value rather than -inf, and the weights are
zeroed on masked keys after the softmax. So a row whose keys are all masked (a batch row made only of
padding) gives zero weights and a zero output instead of NaN, in PyTorch and in ONNX Runtime alike.
"""

import math
from typing import NamedTuple

import torch
from torch import nn

from onnxformer.builder.layers.checks import (
    check_dropout,
    check_heads,
    check_kv_heads,
    check_positive,
    check_same,
    check_tensor,
)
from onnxformer.builder.layers.masks import causal_mask, combine, padding_mask, window_mask
from onnxformer.builder.layers.positions import RopeScalingOptions, RotaryEmbedding, default_positions
from onnxformer.runtime.errors import InputError


class AttentionOutput(NamedTuple):
    output: torch.Tensor  # (B, T, D) for multi-head attention, (B, H, T, Dh) for the bare product
    present_key: torch.Tensor | None  # (B, Hkv, P + T, Dh) self-attention / (B, Hkv, S, Dh) cross
    present_value: torch.Tensor | None  # same shape as present_key
    weights: torch.Tensor | None  # (B, H, T, S) when need_weights, else None


def scaled_dot_product_attention(
    query: torch.Tensor,  # (B, H, T, Dh)
    key: torch.Tensor,  # (B, H, S, Dh)
    value: torch.Tensor,  # (B, H, S, Dh)
    *,
    mask: torch.Tensor | None = None,  # bool, broadcastable to (B, H, T, S), True = may attend
    bias: torch.Tensor | None = None,  # float, broadcastable to (B, H, T, S), added to the logits
    dropout: nn.Module | None = None,
    scale: float | None = None,  # None = 1 / sqrt(Dh)
    softcap: float | None = None,  # logits -> softcap * tanh(logits / softcap), before bias and mask
) -> tuple[torch.Tensor, torch.Tensor]:
    """Return (output (B, H, T, Dh), weights (B, H, T, S)); weights rows sum to 1 over unmasked keys."""
    if scale is None:
        scale = 1.0 / math.sqrt(query.shape[-1])
    logits = torch.matmul(query, key.transpose(-2, -1)) * scale  # (B, H, T, S)
    if softcap is not None:
        logits = torch.tanh(logits / softcap) * softcap  # (B, H, T, S), within (-softcap, softcap)
    if bias is not None:
        logits = logits + bias  # (B, H, T, S)
    if mask is not None:
        logits = logits.masked_fill(~mask, torch.finfo(logits.dtype).min)
    weights = torch.softmax(logits, dim=-1)  # (B, H, T, S)
    if mask is not None:
        weights = weights.masked_fill(~mask, 0.0)
    if dropout is not None:
        weights = dropout(weights)
    return torch.matmul(weights, value), weights  # (B, H, T, Dh), (B, H, T, S)


class ScaledDotProductAttention(nn.Module):
    """The bare attention product over already split heads, with padding and causal masks."""

    def __init__(self, *, dropout: float = 0.0) -> None:
        super().__init__()
        check_dropout(dropout)
        self.dropout = nn.Dropout(dropout)

    def forward(
        self,
        query: torch.Tensor,  # (B, H, T, Dh)
        key: torch.Tensor,  # (B, H, S, Dh)
        value: torch.Tensor,  # (B, H, S, Dh)
        *,
        attention_mask: torch.Tensor | None = None,  # (B, S) 1 = real key, 0 = padding
        causal: bool = False,
        bias: torch.Tensor | None = None,  # broadcastable to (B, H, T, S)
        need_weights: bool = False,
    ) -> AttentionOutput:
        check_tensor(query, "query", dims=("B", "H", "T", "Dh"))
        check_tensor(key, "key", dims=("B", "H", "S", "Dh"), sizes={3: query.shape[3]})
        check_tensor(value, "value", dims=("B", "H", "S", "Dh"), sizes={2: key.shape[2]})
        mask = _build_mask(attention_mask, causal, query.shape[0], query.shape[2], key.shape[2], query.device)
        output, weights = scaled_dot_product_attention(
            query, key, value, mask=mask, bias=bias, dropout=self.dropout
        )
        return AttentionOutput(output, None, None, weights if need_weights else None)


class MultiHeadAttention(nn.Module):
    """H attention heads in parallel on learned projections, concatenated and projected back (3.2.2).

    Self-attention when `memory` is None, cross-attention otherwise (queries from `x`, keys and values from
    `memory`, which may have another length). For cached decoding the keys and values of earlier steps come
    in as `past_key`/`past_value` and the concatenation goes out as `present_key`/`present_value`; nothing
    is stored on the module. With `rotary=True` queries and keys are rotated by their absolute positions
    (RoPE), and the cache holds keys already rotated.

    `n_kv_heads` < H gives grouped-query attention (1: multi-query): k_proj/v_proj have n_kv_heads * Dh
    outputs and the cache carries n_kv_heads heads. `head_dim` frees Dh from D / H (T5's d_kv, Llama's
    head_dim): the heads' inner width H * Dh is projected back to D. `scale` replaces 1 / sqrt(Dh).
    `qkv_bias` and `out_bias` set the projections' biases apart (Qwen2 has the first, not the second).
    `query_norm`/`key_norm` normalise each head's queries and keys over Dh before rotary (QK-norm, Qwen3);
    `softcap` bounds the logits (Gemma 2). `sliding_window` lets a query see only the keys fewer than
    `sliding_window` slots away, itself included: a causal query its last `sliding_window` keys (Mistral;
    the cache still holds every key, the mask hides the older ones), a bidirectional one
    `sliding_window - 1` on each side (ModernBERT's local layers).
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        *,
        dropout: float = 0.0,
        qkv_bias: bool = True,
        out_bias: bool = True,
        rotary: bool = False,
        rotary_base: float = 10000.0,
        rope_scaling: RopeScalingOptions | None = None,
        rotary_fraction: float = 1.0,
        n_kv_heads: int | None = None,
        head_dim: int | None = None,
        scale: float | None = None,
        query_norm: nn.Module | None = None,
        key_norm: nn.Module | None = None,
        softcap: float | None = None,
        sliding_window: int | None = None,
    ) -> None:
        super().__init__()
        if head_dim is None:
            head_dim = check_heads(d_model, n_heads)
        else:
            check_positive(d_model=d_model, n_heads=n_heads, head_dim=head_dim)
        n_kv_heads = n_heads if n_kv_heads is None else n_kv_heads
        check_kv_heads(n_heads, n_kv_heads)
        if scale is not None:
            check_positive(scale=scale)
        if softcap is not None:
            check_positive(softcap=softcap)
        if sliding_window is not None:
            check_positive(sliding_window=sliding_window)
        check_dropout(dropout)
        self.d_model = d_model
        self.n_heads = n_heads
        self.n_kv_heads = n_kv_heads
        self.head_dim = head_dim
        self.scale = scale
        self.softcap = softcap
        self.sliding_window = sliding_window
        inner, kv_inner = n_heads * head_dim, n_kv_heads * head_dim
        self.q_proj = nn.Linear(d_model, inner, bias=qkv_bias)
        self.k_proj = nn.Linear(d_model, kv_inner, bias=qkv_bias)
        self.v_proj = nn.Linear(d_model, kv_inner, bias=qkv_bias)
        self.out_proj = nn.Linear(inner, d_model, bias=out_bias)
        self.query_norm = query_norm
        self.key_norm = key_norm
        self.dropout = nn.Dropout(dropout)
        self.rotary = (
            RotaryEmbedding(head_dim, base=rotary_base, scaling=rope_scaling, fraction=rotary_fraction)
            if rotary
            else None
        )

    def _split_heads(self, x: torch.Tensor, heads: int) -> torch.Tensor:
        batch, length, _ = x.shape
        return x.view(batch, length, heads, self.head_dim).transpose(1, 2)  # (B, heads, L, Dh)

    def _repeat_kv(self, x: torch.Tensor) -> torch.Tensor:
        """(B, Hkv, S, Dh) -> (B, H, S, Dh): kv head j serves query heads j*g .. j*g + g - 1, g = H / Hkv."""
        group = self.n_heads // self.n_kv_heads
        if group == 1:
            return x
        batch, _, length, width = x.shape
        expanded = x[:, :, None].expand(batch, self.n_kv_heads, group, length, width)  # (B, Hkv, g, S, Dh)
        return expanded.reshape(batch, self.n_heads, length, width)  # (B, H, S, Dh)

    def forward(
        self,
        x: torch.Tensor,  # (B, T, D)
        *,
        memory: torch.Tensor | None = None,  # (B, S, D) for cross-attention
        memory_key: torch.Tensor | None = None,  # (B, Hkv, S, Dh) cross-attention keys from project_memory
        memory_value: torch.Tensor | None = None,  # (B, Hkv, S, Dh)
        attention_mask: torch.Tensor | None = None,  # (B, S): keys; self-attention S = P + T
        causal: bool = False,
        past_key: torch.Tensor | None = None,  # (B, Hkv, P, Dh)
        past_value: torch.Tensor | None = None,  # (B, Hkv, P, Dh)
        position_bias: torch.Tensor | None = None,  # broadcastable to (B, H, T, S)
        positions: torch.Tensor | None = None,  # (B, T) absolute query positions, for rotary
        need_weights: bool = False,
    ) -> AttentionOutput:
        check_tensor(x, "x", dims=("B", "T", "D"), sizes={2: self.d_model})
        if (past_key is None) != (past_value is None):
            raise InputError("past_key and past_value must be given together (or neither)")
        if (memory_key is None) != (memory_value is None):
            raise InputError("memory_key and memory_value must be given together (or neither)")
        if memory is not None and memory_key is not None:
            raise InputError("give either memory or its projections memory_key/memory_value, not both")
        cross = memory is not None or memory_key is not None
        if cross and (causal or past_key is not None):
            raise InputError(
                "cross-attention takes neither causal=True nor past_key/past_value: the memory is "
                "seen whole; cache its projections with project_memory() instead"
            )
        query = self._split_heads(self.q_proj(x), self.n_heads)  # (B, H, T, Dh)
        if self.query_norm is not None:
            query = self.query_norm(query)  # (B, H, T, Dh), over Dh
        if memory_key is not None:
            shape = {0: x.shape[0], 1: self.n_kv_heads, 3: self.head_dim}
            check_tensor(memory_key, "memory_key", dims=("B", "H", "S", "Dh"), sizes=shape)
            assert memory_value is not None  # given together with memory_key (checked above)
            check_tensor(memory_value, "memory_value", dims=("B", "H", "S", "Dh"), sizes=shape)
            key, value = memory_key, memory_value  # (B, Hkv, S, Dh)
        else:
            if memory is not None:
                check_tensor(memory, "memory", dims=("B", "S", "D"), sizes={2: self.d_model})
                check_same(memory.shape[0], x.shape[0], "memory batch must equal x batch")
            source = memory if memory is not None else x
            key = self._keys(source)  # (B, Hkv, T or S, Dh)
            value = self._split_heads(self.v_proj(source), self.n_kv_heads)  # (B, Hkv, T or S, Dh)
        past_length = 0 if past_key is None else past_key.shape[2]
        if self.rotary is not None and not cross:
            if positions is None:
                positions = default_positions(
                    x.shape[0], x.shape[1], past_length=past_length, device=x.device
                )  # (B, T)
            check_tensor(positions, "positions", dims=("B", "T"), sizes={0: x.shape[0], 1: x.shape[1]})
            query = self.rotary(query, positions)  # (B, H, T, Dh)
            key = self.rotary(key, positions)  # (B, Hkv, T, Dh)
        if past_key is not None:
            assert past_value is not None  # given together with past_key (checked above)
            shape = dict(enumerate((x.shape[0], self.n_kv_heads, past_length, self.head_dim)))
            check_tensor(past_key, "past_key", dims=("B", "H", "P", "Dh"), sizes=shape)
            check_tensor(past_value, "past_value", dims=("B", "H", "P", "Dh"), sizes=shape)
            key = torch.cat([past_key, key], dim=2)  # (B, Hkv, P + T, Dh)
            value = torch.cat([past_value, value], dim=2)  # (B, Hkv, P + T, Dh)
        window = None if cross else self.sliding_window
        mask = _build_mask(attention_mask, causal, x.shape[0], x.shape[1], key.shape[2], x.device, window)
        heads, weights = scaled_dot_product_attention(
            query,
            self._repeat_kv(key),  # (B, H, S, Dh)
            self._repeat_kv(value),  # (B, H, S, Dh)
            mask=mask,
            bias=position_bias,
            dropout=self.dropout,
            scale=self.scale,
            softcap=self.softcap,
        )  # (B, H, T, Dh), (B, H, T, S)
        batch, length = x.shape[0], x.shape[1]
        concat = heads.transpose(1, 2).reshape(batch, length, self.n_heads * self.head_dim)  # (B, T, H Dh)
        return AttentionOutput(self.out_proj(concat), key, value, weights if need_weights else None)

    def project_memory(self, memory: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """memory (B, S, D) -> the cross-attention keys and values (B, Hkv, S, Dh), once per input."""
        check_tensor(memory, "memory", dims=("B", "S", "D"), sizes={2: self.d_model})
        key = self._keys(memory)  # (B, Hkv, S, Dh)
        return key, self._split_heads(self.v_proj(memory), self.n_kv_heads)  # (B, Hkv, S, Dh) each

    def _keys(self, source: torch.Tensor) -> torch.Tensor:
        """source (B, S, D) -> keys (B, Hkv, S, Dh), QK-normed when the block asks."""
        key = self._split_heads(self.k_proj(source), self.n_kv_heads)  # (B, Hkv, S, Dh)
        return key if self.key_norm is None else self.key_norm(key)


def _build_mask(
    attention_mask: torch.Tensor | None,
    causal: bool,
    batch: int,
    query_length: int,
    key_length: int,
    device: torch.device,
    window: int | None = None,
) -> torch.Tensor | None:
    if attention_mask is not None:
        check_tensor(attention_mask, "attention_mask", dims=("B", "S"), sizes={0: batch})
        check_same(
            attention_mask.shape[1],
            key_length,
            "attention_mask length must equal the number of keys (past + new for self-attention)",
        )
    if causal:
        order = causal_mask(query_length, key_length, device=device, window=window)  # (1, 1, T, S)
    elif window is not None:
        order = window_mask(query_length, key_length, device=device, window=window)  # (1, 1, T, S)
    else:
        order = None
    return combine(padding_mask(attention_mask) if attention_mask is not None else None, order)
