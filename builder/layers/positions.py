"""Positional encodings: where a token is, since attention alone is blind to order.

- `SinusoidalPositionalEncoding` (Vaswani et al., 2017, 3.5): fixed sines and cosines of geometric
  wavelengths, computed on the fly, so any length works (quality past the trained lengths is another
  matter: the model never saw those positions).
- `LearnedPositionalEmbedding` (GPT, BERT): a trained table of `max_len` rows. It cannot represent a
  position past its table, so it refuses one with a clear error instead of indexing out of range.
- `RelativePositionBias` (T5, Raffel et al., 2020, 2.1): a learned scalar per head and bucket of the
  distance key - query, added to the attention logits. Exact buckets for short distances, logarithmic
  buckets up to `max_distance`, one bucket beyond, so any length works.
- `RotaryEmbedding` (RoPE, Su et al., 2021): rotates each pair of query/key features by an angle
  proportional to the position, so q.k depends only on the distance. Any length works.

Absolute encodings take `positions` (B, T) rather than a length, so a left-padded row of a batch can start
its positions at its first real token, and a cached step can continue at P.
"""

import math
from dataclasses import dataclass
from typing import Literal

import torch
from torch import nn

from onnxformer.builder.layers.checks import check_positive, check_tensor
from onnxformer.runtime.errors import ConfigError, InputError


def default_positions(batch: int, length: int, *, past_length: int = 0, device=None) -> torch.Tensor:
    """(B, T) positions past_length .. past_length + T - 1 for every row."""
    positions = torch.arange(length, device=device) + past_length  # (T,)
    return positions[None, :].expand(batch, -1)  # (B, T)


class SinusoidalPositionalEncoding(nn.Module):
    """PE(pos, 2i) = sin(pos / base^(2i/D)), PE(pos, 2i+1) = cos(pos / base^(2i/D))."""

    inv_freq: torch.Tensor  # (D/2,) buffer

    def __init__(self, d_model: int, *, base: float = 10000.0) -> None:
        super().__init__()
        check_positive(d_model=d_model, base=base)
        if d_model % 2:
            raise ConfigError(f"sinusoidal encoding needs an even d_model, got {d_model}")
        self.d_model = d_model
        inv_freq = torch.exp(torch.arange(0, d_model, 2).float() * (-math.log(base) / d_model))  # (D/2,)
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def forward(self, positions: torch.Tensor) -> torch.Tensor:
        """positions (B, T) -> encodings (B, T, D), sin and cos interleaved."""
        check_tensor(positions, "positions", dims=("B", "T"))
        angles = positions[..., None].float() * self.inv_freq  # (B, T, D/2)
        pairs = torch.stack([torch.sin(angles), torch.cos(angles)], dim=-1)  # (B, T, D/2, 2)
        return pairs.flatten(-2)  # (B, T, D)


class LearnedPositionalEmbedding(nn.Module):
    """A trained (max_len, D) table; positions at or past max_len raise `InputError`."""

    def __init__(self, max_len: int, d_model: int) -> None:
        super().__init__()
        check_positive(max_len=max_len, d_model=d_model)
        self.max_len = max_len
        self.weight = nn.Parameter(torch.randn(max_len, d_model) * 0.02)

    def forward(self, positions: torch.Tensor) -> torch.Tensor:
        """positions (B, T) -> embeddings (B, T, D)."""
        check_tensor(positions, "positions", dims=("B", "T"))
        # A value check cannot be traced; the exported graph relies on the runtime's length check.
        if not torch.compiler.is_compiling() and positions.numel():
            lowest, highest = int(positions.min()), int(positions.max())
            if lowest < 0 or highest >= self.max_len:
                raise InputError(
                    f"position {highest if highest >= self.max_len else lowest} is outside the learned "
                    f"position table of max_len={self.max_len}; shorten the input to at most "
                    f"{self.max_len} tokens, raise max_len, or use a sinusoidal, relative or rotary encoding"
                )
        return nn.functional.embedding(positions, self.weight)  # (B, T, D)


class RelativePositionBias(nn.Module):
    """T5's bucketed relative position bias: (1, H, T, S) added to the attention logits.

    `bidirectional=True` (encoder) gives keys before and after the query their own buckets; `False`
    (decoder) only distinguishes past distances, since the causal mask hides the future anyway.
    """

    def __init__(
        self,
        n_heads: int,
        *,
        bidirectional: bool,
        num_buckets: int = 32,
        max_distance: int = 128,
    ) -> None:
        super().__init__()
        check_positive(n_heads=n_heads, num_buckets=num_buckets, max_distance=max_distance)
        exact = num_buckets // 2 if bidirectional else num_buckets
        if exact < 2 or max_distance <= exact // 2:
            raise ConfigError(
                f"num_buckets={num_buckets} and max_distance={max_distance} leave no room for logarithmic "
                "buckets; use num_buckets >= 4 and max_distance > num_buckets"
            )
        self.bidirectional = bidirectional
        self.num_buckets = num_buckets
        self.max_distance = max_distance
        self.bias = nn.Embedding(num_buckets, n_heads)

    def bucket(self, relative: torch.Tensor) -> torch.Tensor:
        """relative = key_pos - query_pos (any shape, int64) -> bucket ids in [0, num_buckets)."""
        buckets = self.num_buckets
        offset = torch.zeros_like(relative)
        if self.bidirectional:
            buckets //= 2
            offset = (relative > 0).long() * buckets  # keys after the query use the upper half
            distance = relative.abs()
        else:
            distance = (-relative).clamp(min=0)  # only keys at or before the query
        exact = buckets // 2
        # Distances >= exact share logarithmically wider buckets up to max_distance (T5, 2.1).
        log_ratio = torch.log(distance.clamp(min=1).float() / exact) / math.log(self.max_distance / exact)
        far = (exact + (log_ratio * (buckets - exact)).long()).clamp(max=buckets - 1)
        return offset + torch.where(distance < exact, distance, far)

    def forward(self, query_length: int, key_length: int, *, device=None) -> torch.Tensor:
        """Bias (1, H, T, S) for the last T of S positions (S - T = P cached keys before the queries)."""
        query_pos = torch.arange(query_length, device=device) + (key_length - query_length)  # (T,)
        key_pos = torch.arange(key_length, device=device)  # (S,)
        relative = key_pos[None, :] - query_pos[:, None]  # (T, S)
        values = self.bias(self.bucket(relative))  # (T, S, H)
        return values.permute(2, 0, 1)[None]  # (1, H, T, S)


RopeScaling = Literal["none", "linear", "llama3", "longrope"]
ROPE_SCALINGS: tuple[RopeScaling, ...] = ("none", "linear", "llama3", "longrope")


@dataclass(frozen=True)
class RopeScalingOptions:
    """A checkpoint's rope_scaling: "linear" divides positions by `factor` (Chen et al., 2023, position
    interpolation); "llama3" divides only the low frequencies by `factor`, keeps the high ones, and blends
    between (Llama 3.1): wavelengths longer than original_max_position_embeddings / low_freq_factor are
    scaled, shorter than original_max_position_embeddings / high_freq_factor kept. "longrope" (Phi-3's
    long-context checkpoints; Ding et al., 2024) divides each frequency by its own factor, `short_factor`
    while every position of a call is within original_max_position_embeddings and `long_factor` once one is
    past it (the whole call switches, as transformers does), and scales cos and sin by
    `attention_factor`."""

    kind: RopeScaling = "none"
    factor: float = 1.0
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0
    original_max_position_embeddings: int = 8192
    short_factor: tuple[float, ...] = ()  # longrope: one factor per rotated pair
    long_factor: tuple[float, ...] = ()
    attention_factor: float = 1.0  # longrope: cos and sin multiplied by it

    def __post_init__(self) -> None:
        if self.kind not in ROPE_SCALINGS:
            raise ConfigError(f"rope scaling must be one of {ROPE_SCALINGS}, got {self.kind!r}")
        for name in ("short_factor", "long_factor"):  # a saved config holds lists
            object.__setattr__(self, name, tuple(float(value) for value in getattr(self, name)))
        check_positive(attention_factor=self.attention_factor)
        if self.kind == "longrope" and (
            not self.short_factor or len(self.short_factor) != len(self.long_factor)
        ):
            raise ConfigError(
                "longrope scaling needs short_factor and long_factor of the same length (one per rotated "
                f"pair), got {len(self.short_factor)} and {len(self.long_factor)}"
            )
        check_positive(
            factor=self.factor, original_max_position_embeddings=self.original_max_position_embeddings
        )
        if self.kind == "llama3" and not 0 < self.low_freq_factor < self.high_freq_factor:
            raise ConfigError(
                f"llama3 rope scaling needs 0 < low_freq_factor < high_freq_factor, got "
                f"low_freq_factor={self.low_freq_factor}, high_freq_factor={self.high_freq_factor}"
            )


def scaled_inv_freq(inv_freq: torch.Tensor, scaling: RopeScalingOptions) -> torch.Tensor:
    """The rotary inverse frequencies (Dh/2,) after `scaling`."""
    if scaling.kind == "linear":
        return inv_freq / scaling.factor  # angle (p / factor) * f = p * (f / factor)
    if scaling.kind == "none":
        return inv_freq
    context = scaling.original_max_position_embeddings
    wavelength = 2 * math.pi / inv_freq  # (Dh/2,)
    # 0 at the long-wavelength edge (fully scaled), 1 at the short one (kept); linear in context / wavelength.
    smooth = (context / wavelength - scaling.low_freq_factor) / (
        scaling.high_freq_factor - scaling.low_freq_factor
    )
    blended = (1 - smooth) * inv_freq / scaling.factor + smooth * inv_freq  # (Dh/2,)
    long = wavelength > context / scaling.low_freq_factor
    short = wavelength < context / scaling.high_freq_factor
    return torch.where(long, inv_freq / scaling.factor, torch.where(short, inv_freq, blended))


class RotaryEmbedding(nn.Module):
    """Rotates feature pairs (i, i + Dh/2) of queries or keys by angle position * base^(-2i/Dh).

    `base` is the checkpoint's rope_theta (10000 in RoFormer and Llama 2, 500000 in Llama 3); `scaling`
    stretches the frequencies for contexts longer than the model was trained on (see RopeScalingOptions).
    With `fraction` < 1 only the first R = fraction * Dh features of each head rotate, pairs (i, i + R/2)
    at angle position * base^(-2i/R), and the rest pass unchanged (partial rotary: GPT-NeoX, Phi).
    """

    inv_freq: torch.Tensor  # (R/2,) buffer
    long_inv_freq: torch.Tensor | None  # (R/2,) buffer with longrope scaling

    def __init__(
        self,
        head_dim: int,
        *,
        base: float = 10000.0,
        scaling: RopeScalingOptions | None = None,
        fraction: float = 1.0,
    ) -> None:
        super().__init__()
        check_positive(head_dim=head_dim, base=base, fraction=fraction)
        rotated = int(head_dim * fraction)  # R, as transformers rounds it
        if fraction == 1 and head_dim % 2:
            raise ConfigError(f"rotary embedding needs an even head width, got {head_dim}")
        if rotated % 2 or rotated == 0 or fraction > 1:
            raise ConfigError(
                f"rotary embedding needs an even rotated width, got {rotated} (head width {head_dim} "
                f"times fraction {fraction})"
            )
        self.rotated = rotated
        inv_freq = base ** (-torch.arange(0, rotated, 2).float() / rotated)  # (R/2,)
        long_inv_freq: torch.Tensor | None = None
        self.original = 0  # longrope: the positions past which long_inv_freq applies
        self.attention_factor = 1.0
        if scaling is not None and scaling.kind == "longrope":
            if len(scaling.short_factor) != rotated // 2:
                raise ConfigError(
                    f"longrope needs one factor per rotated pair ({rotated // 2}), got "
                    f"{len(scaling.short_factor)}"
                )
            long_inv_freq = inv_freq / torch.tensor(scaling.long_factor)  # (R/2,)
            inv_freq = inv_freq / torch.tensor(scaling.short_factor)  # (R/2,)
            self.original = scaling.original_max_position_embeddings
            self.attention_factor = scaling.attention_factor
        elif scaling is not None:
            inv_freq = scaled_inv_freq(inv_freq, scaling)
        self.register_buffer("inv_freq", inv_freq, persistent=False)
        self.register_buffer("long_inv_freq", long_inv_freq, persistent=False)  # longrope's, else None

    def forward(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """x (B, H, T, Dh), positions (B, T) -> x rotated, same shape."""
        inv_freq = self.inv_freq  # (R/2,)
        if self.long_inv_freq is not None:  # longrope: the long factors once any position is past original
            inv_freq = torch.where(positions.max() + 1 > self.original, self.long_inv_freq, inv_freq)
        angles = positions[:, None, :, None].float() * inv_freq  # (B, 1, T, R/2)
        cos = torch.cos(angles).repeat(1, 1, 1, 2)  # (B, 1, T, R)
        sin = torch.sin(angles).repeat(1, 1, 1, 2)  # (B, 1, T, R)
        if self.attention_factor != 1.0:
            cos, sin = cos * self.attention_factor, sin * self.attention_factor
        if self.rotated == x.shape[-1]:
            return _rotate(x, cos, sin)
        turned, kept = x[..., : self.rotated], x[..., self.rotated :]  # (B, H, T, R), (B, H, T, Dh - R)
        return torch.cat([_rotate(turned, cos, sin), kept], dim=-1)  # (B, H, T, Dh)


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x (B, H, T, R) with pairs (i, i + R/2) rotated by the angles of cos and sin (B, 1, T, R)."""
    first, second = x.chunk(2, dim=-1)  # (B, H, T, R/2) each
    rotated_half = torch.cat([-second, first], dim=-1)  # (B, H, T, R)
    return x * cos + rotated_half * sin
