"""What every family's config shares: field validation, the block options, and presets by name.

Every family config carries the same block option fields (the options of builder/layers, which a Hugging
Face architecture sets and our own presets leave at their defaults):

    norm            "layer" (LayerNorm) or "rms" (RMSNorm: T5, Llama)
    eps             the norms' epsilon (BERT 1e-12, GPT-2 1e-5, T5 and Llama 1e-6)
    gated           gated feed-forward: down(act(gate x) * up x) (SwiGLU, GEGLU)
    attention_bias  biases on the q/k/v/out projections
    ffn_bias        biases on the feed-forward projections
    n_kv_heads      key/value heads (< n_heads: grouped-query attention; None = n_heads)
    head_dim        width of one head (None = d_model / n_heads; T5's d_kv, Llama's head_dim)
    attention_scale the logits' factor (None = 1 / sqrt(head_dim); T5 uses 1.0)
    rotary_base     rope_theta of rotary positions
    rope_scaling    RopeScalingOptions (linear, llama3) or None

`block_options(config)` turns them into the stacks' keyword arguments: the one place they are unpacked.
"""

from dataclasses import dataclass, fields, replace
from typing import Any, TypeVar

from onnxformer.builder.layers.checks import check_dropout, check_heads, check_kv_heads, check_positive
from onnxformer.builder.layers.embedding import check_position_kind
from onnxformer.builder.layers.feedforward import ACTIVATIONS
from onnxformer.builder.layers.norms import NORMS, NormKind
from onnxformer.builder.layers.positions import RopeScalingOptions
from onnxformer.builder.layers.residual import NORM_POSITIONS
from onnxformer.runtime.errors import ConfigError

ConfigT = TypeVar("ConfigT")


@dataclass(frozen=True)
class BlockOptionFields:
    """The block option fields every family config inherits (see the module docstring); their defaults
    are the original Transformer's."""

    norm: NormKind = "layer"
    eps: float = 1e-5
    gated: bool = False
    attention_bias: bool = True
    ffn_bias: bool = True
    n_kv_heads: int | None = None
    head_dim: int | None = None
    attention_scale: float | None = None
    rotary_base: float = 10000.0
    rope_scaling: RopeScalingOptions | None = None


def validate_common(config: Any) -> None:
    """Checks on the shared field names (d_model, n_layers, n_heads, d_ff, vocab_size, max_len, ...)."""
    for name in ("d_model", "n_layers", "n_heads", "d_ff", "vocab_size", "max_len"):
        value = getattr(config, name)
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{name} must be an integer, got {value!r}")
    check_positive(
        d_model=config.d_model,
        n_layers=config.n_layers,
        n_heads=config.n_heads,
        d_ff=config.d_ff,
        vocab_size=config.vocab_size,
        max_len=config.max_len,
    )
    if config.head_dim is None:
        check_heads(config.d_model, config.n_heads)
    check_dropout(config.dropout)
    validate_block_options(config)
    check_position_kind(config.position)
    if config.norm_position not in NORM_POSITIONS:
        raise ConfigError(f"norm_position must be one of {NORM_POSITIONS}, got {config.norm_position!r}")
    if config.activation not in ACTIVATIONS:
        raise ConfigError(f"activation must be one of {ACTIVATIONS}, got {config.activation!r}")
    if config.position == "rotary" and head_width(config) % 2:
        raise ConfigError("rotary positions need an even head width (head_dim, or d_model / n_heads)")
    if config.position == "sinusoidal" and config.d_model % 2:
        raise ConfigError("sinusoidal positions need an even d_model")


def validate_block_options(config: Any) -> None:
    """Checks on the block option fields; a rope_scaling given as a dict (a saved config) becomes
    RopeScalingOptions."""
    if config.norm not in NORMS:
        raise ConfigError(f"norm must be one of {NORMS}, got {config.norm!r}")
    for name in ("gated", "attention_bias", "ffn_bias"):
        if not isinstance(getattr(config, name), bool):
            raise ConfigError(f"{name} must be true or false, got {getattr(config, name)!r}")
    check_positive(eps=config.eps, rotary_base=config.rotary_base)
    for name in ("n_kv_heads", "head_dim"):
        value = getattr(config, name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise ConfigError(f"{name} must be a whole number >= 1 or None (the default), got {value!r}")
    check_kv_heads(config.n_heads, kv_heads(config))
    if config.attention_scale is not None:
        check_positive(attention_scale=config.attention_scale)
    scaling = config.rope_scaling
    if isinstance(scaling, dict):
        try:
            scaling = RopeScalingOptions(**scaling)
        except TypeError as error:
            raise ConfigError(f"rope_scaling {config.rope_scaling!r}: {error}") from None
        object.__setattr__(config, "rope_scaling", scaling)  # frozen: normalised once, at construction
    if scaling is not None and not isinstance(scaling, RopeScalingOptions):
        raise ConfigError(f"rope_scaling must be RopeScalingOptions or None, got {scaling!r}")


def head_width(config: Any) -> int:
    """Dh: the config's head_dim, or d_model / n_heads."""
    return config.head_dim if config.head_dim is not None else config.d_model // config.n_heads


def kv_heads(config: Any) -> int:
    """Hkv: the key/value heads (n_heads unless grouped-query)."""
    return config.n_heads if config.n_kv_heads is None else config.n_kv_heads


def block_options(config: Any) -> dict[str, Any]:
    """The block option fields as the stacks' keyword arguments."""
    return {
        "norm": config.norm,
        "eps": config.eps,
        "gated": config.gated,
        "attention_bias": config.attention_bias,
        "ffn_bias": config.ffn_bias,
        "n_kv_heads": config.n_kv_heads,
        "head_dim": config.head_dim,
        "scale": config.attention_scale,
        "rotary_base": config.rotary_base,
        "rope_scaling": config.rope_scaling,
    }


def from_preset(
    cls: type[ConfigT], presets: dict[str, dict[str, Any]], name: str, **overrides: Any
) -> ConfigT:
    """`cls(**presets[name], **overrides)`, with clear errors for unknown presets or fields."""
    if name not in presets:
        raise ConfigError(f"unknown preset {name!r}; choose from {sorted(presets)}")
    known = {field.name for field in fields(cls)}
    unknown = sorted(set(overrides) - known)
    if unknown:
        raise ConfigError(f"unknown config field(s) {unknown} for {cls.__name__}; known: {sorted(known)}")
    return replace(cls(**presets[name]), **overrides)


def config_from_dict(cls: type[ConfigT], data: dict[str, Any]) -> ConfigT:
    """Rebuild a config saved with dataclasses.asdict, refusing unknown fields."""
    known = {field.name for field in fields(cls)}
    unknown = sorted(set(data) - known)
    if unknown:
        raise ConfigError(f"unknown config field(s) {unknown} for {cls.__name__}; known: {sorted(known)}")
    return cls(**data)
