"""What every family's config shares: field validation and presets by name."""

from dataclasses import fields, replace
from typing import Any, TypeVar

from onnxformer.builder.layers.checks import check_dropout, check_heads, check_positive
from onnxformer.builder.layers.embedding import check_position_kind
from onnxformer.builder.layers.feedforward import ACTIVATIONS
from onnxformer.builder.layers.residual import NORM_POSITIONS
from onnxformer.runtime.errors import ConfigError

ConfigT = TypeVar("ConfigT")


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
    check_heads(config.d_model, config.n_heads)
    check_dropout(config.dropout)
    check_position_kind(config.position)
    if config.norm_position not in NORM_POSITIONS:
        raise ConfigError(f"norm_position must be one of {NORM_POSITIONS}, got {config.norm_position!r}")
    if config.activation not in ACTIVATIONS:
        raise ConfigError(f"activation must be one of {ACTIVATIONS}, got {config.activation!r}")
    if config.position == "rotary" and (config.d_model // config.n_heads) % 2:
        raise ConfigError("rotary positions need an even head width d_model / n_heads")
    if config.position == "sinusoidal" and config.d_model % 2:
        raise ConfigError("sinusoidal positions need an even d_model")


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
