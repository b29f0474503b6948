"""What every family's config shares: field checks, the block options and their shorthand, presets by name.

A family config holds the model's own fields (widths, vocabulary, context, dropout, the position kind)
and one `block: BlockOptions` (builder/layers/options.py), the options of its layers. Presets, model-config
files, the CLI and checkpoints written before BlockOptions existed name block options by a flat
shorthand, which `expand_shorthand` applies onto the block, the one place it is read:

    norm, eps                     block.norm.kind, block.norm.eps
    norm_position                 block.residual.position
    activation, gated, ffn_bias   block.ffn.activation, .gated, .bias
    attention_bias                block.attention.qkv_bias and .out_bias
    n_kv_heads, head_dim          block.attention.n_kv_heads, .head_dim
    attention_scale               block.attention.scale
    rotary_base, rope_scaling     block.rotary.base, .scaling (with position "rotary")

A saved config holds the block as nested groups (dataclasses.asdict); `config_from_dict` reads both forms.

A family whose layers differ (Gemma's local and global attention, SmolLM3's layers without rotary) also
holds `layers`: one BlockOptions per layer, which replaces `block` layer by layer. The layers must agree on
what the KV cache is made of (key/value heads, head width); `block` stays the stack's final norm and the
model's summary.
"""

import dataclasses
from dataclasses import fields, replace
from typing import Any, TypeVar

from onnxformer.builder.layers.checks import check_dropout, check_heads, check_kv_heads, check_positive
from onnxformer.builder.layers.embedding import check_position_kind
from onnxformer.builder.layers.options import BlockOptions, RotaryOptions, rope_scaling_from_dict
from onnxformer.builder.layers.stacks import RelativeOptions
from onnxformer.runtime.errors import ConfigError

ConfigT = TypeVar("ConfigT")

# shorthand name -> the (group, field) pairs it sets
SHORTHAND: dict[str, tuple[tuple[str, str], ...]] = {
    "norm": (("norm", "kind"),),
    "eps": (("norm", "eps"),),
    "norm_position": (("residual", "position"),),
    "activation": (("ffn", "activation"),),
    "gated": (("ffn", "gated"),),
    "ffn_bias": (("ffn", "bias"),),
    "attention_bias": (("attention", "qkv_bias"), ("attention", "out_bias")),
    "n_kv_heads": (("attention", "n_kv_heads"),),
    "head_dim": (("attention", "head_dim"),),
    "attention_scale": (("attention", "scale"),),
    "rotary_base": (("rotary", "base"),),
    "rope_scaling": (("rotary", "scaling"),),
}
ROTARY_DEFAULTS = {"rotary_base": 10000.0, "rope_scaling": None}  # what pre-BlockOptions configs saved


def validate_common(config: Any) -> None:
    """Checks on the shared field names (d_model, n_layers, n_heads, d_ff, vocab_size, max_len, ...) and on
    the block against them; a block given as a dict (a saved config) becomes BlockOptions."""
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
    check_dropout(config.dropout)
    check_position_kind(config.position)
    block = config.block
    if isinstance(block, dict):
        block = BlockOptions(**block)
    if not isinstance(block, BlockOptions):
        raise ConfigError(f"block must be BlockOptions, got {block!r}")
    if config.position == "rotary" and block.rotary is None:
        block = replace(block, rotary=RotaryOptions())
    if config.position != "rotary" and block.rotary is not None:
        raise ConfigError(
            f"block.rotary applies to rotary positions; set position='rotary' or block.rotary=None "
            f"(position is {config.position!r})"
        )
    object.__setattr__(config, "block", block)  # frozen: normalised once, at construction
    _validate_layers(config)
    if block.attention.head_dim is None:
        check_heads(config.d_model, config.n_heads)
    check_kv_heads(config.n_heads, kv_heads(config))
    if config.position == "rotary" and head_width(config) % 2:
        raise ConfigError("rotary positions need an even head width (head_dim, or d_model / n_heads)")
    if config.position == "sinusoidal" and config.d_model % 2:
        raise ConfigError("sinusoidal positions need an even d_model")


def _validate_layers(config: Any) -> None:
    layers = getattr(config, "layers", ())
    if not layers:
        object.__setattr__(config, "layers", ())
        return
    if isinstance(layers, BlockOptions) or not isinstance(layers, list | tuple):
        raise ConfigError(f"layers must be a list of BlockOptions, one per layer, got {layers!r}")
    layers = tuple(BlockOptions(**item) if isinstance(item, dict) else item for item in layers)
    if len(layers) != config.n_layers or not all(isinstance(item, BlockOptions) for item in layers):
        raise ConfigError(
            f"layers must hold one BlockOptions per layer ({config.n_layers}), got {len(layers)}"
        )
    shape = (config.block.head_width(config.d_model, config.n_heads), config.block.kv_heads(config.n_heads))
    for index, item in enumerate(layers):
        if (item.head_width(config.d_model, config.n_heads), item.kv_heads(config.n_heads)) != shape:
            raise ConfigError(
                f"layers[{index}] has another head width or number of key/value heads than block; every "
                "layer's KV cache must have the same shape"
            )
        if item.rotary is not None and config.position != "rotary":
            raise ConfigError(f"layers[{index}].rotary applies to rotary positions; set position='rotary'")
    object.__setattr__(config, "layers", layers)


def head_width(config: Any) -> int:
    """Dh: the block's head_dim, or d_model / n_heads."""
    return config.block.head_width(config.d_model, config.n_heads)


def kv_heads(config: Any) -> int:
    """Hkv: the key/value heads (n_heads unless grouped-query)."""
    return config.block.kv_heads(config.n_heads)


def relative_options(config: Any) -> RelativeOptions | None:
    """T5's relative bias for a config with relative positions (its buckets, where the family sets them)."""
    if config.position != "relative":
        return None
    defaults = RelativeOptions()
    return RelativeOptions(
        getattr(config, "num_buckets", defaults.num_buckets),
        getattr(config, "max_distance", defaults.max_distance),
    )


def layer_options(config: Any, n_layers: int) -> tuple[BlockOptions, ...]:
    """One BlockOptions per layer of a stack of n_layers: the config's `layers` where it has them, else
    its block in every layer."""
    layers = getattr(config, "layers", ())
    return tuple(layers) if layers else (config.block,) * n_layers


def expand_shorthand(cls: type, values: dict[str, Any]) -> dict[str, Any]:
    """`values` with the shorthand names applied onto its block (given, or the class's default)."""
    values = dict(values)
    given = {name: values.pop(name) for name in list(values) if name in SHORTHAND}
    block = values.get("block", _default(cls, "block"))
    position = values.get("position", _default(cls, "position"))
    values["block"] = _apply(BlockOptions(**block) if isinstance(block, dict) else block, given, position)
    return values


def block_from_shorthand(*, position: str = "none", **values: Any) -> BlockOptions:
    """BlockOptions from the flat shorthand, e.g. `block_from_shorthand(norm="rms", n_kv_heads=2)`;
    position "rotary" gives the block its rotary group."""
    unknown = sorted(set(values) - set(SHORTHAND))
    if unknown:
        raise ConfigError(f"unknown block option(s) {unknown}; the shorthand names are {sorted(SHORTHAND)}")
    block = _apply(BlockOptions(), values, position)
    return replace(block, rotary=RotaryOptions()) if position == "rotary" and block.rotary is None else block


def _apply(block: BlockOptions, given: dict[str, Any], position: str) -> BlockOptions:
    given = dict(given)
    if position != "rotary":
        for name, default in ROTARY_DEFAULTS.items():
            if name in given and given[name] == default:
                del given[name]  # a pre-BlockOptions config saved these whatever its positions
    if not given:
        return block
    groups = {group.name: getattr(block, group.name) for group in fields(block)}
    if position == "rotary" and groups["rotary"] is None:
        groups["rotary"] = RotaryOptions()
    for name, value in given.items():
        for group, field in SHORTHAND[name]:
            if groups[group] is None:
                raise ConfigError(f"{name} applies to rotary positions; set position='rotary' or drop it")
            if isinstance(value, dict) and field == "scaling":
                value = rope_scaling_from_dict(value)
            try:
                groups[group] = replace(groups[group], **{field: value})
            except ConfigError as error:  # name what the user wrote as well as where it goes
                raise ConfigError(f"{name}: {error}") from None
    return BlockOptions(**groups)


def _default(cls: type, name: str) -> Any:
    for item in fields(cls):
        if item.name == name:
            if item.default is not dataclasses.MISSING:
                return item.default
            if item.default_factory is not dataclasses.MISSING:
                return item.default_factory()
    return None


def _check_names(cls: type, names: set[str]) -> None:
    known = {field.name for field in fields(cls)} | set(SHORTHAND)
    unknown = sorted(names - known)
    if unknown:
        raise ConfigError(f"unknown config field(s) {unknown} for {cls.__name__}; known: {sorted(known)}")


def from_preset(
    cls: type[ConfigT], presets: dict[str, dict[str, Any]], name: str, **overrides: Any
) -> ConfigT:
    """`cls(**presets[name], **overrides)` with the shorthand applied, and clear errors for unknown presets or
    fields. A whole `block=` override replaces the preset's block options."""
    if name not in presets:
        raise ConfigError(f"unknown preset {name!r}; choose from {sorted(presets)}")
    _check_names(cls, set(overrides))
    values = dict(presets[name])
    if "block" in overrides:
        values = {key: value for key, value in values.items() if key not in SHORTHAND}
    return cls(**expand_shorthand(cls, {**values, **overrides}))


def config_from_dict(cls: type[ConfigT], data: dict[str, Any]) -> ConfigT:
    """Rebuild a config saved with dataclasses.asdict (nested block groups, or the flat shorthand of
    checkpoints written before BlockOptions), refusing unknown fields."""
    _check_names(cls, set(data))
    return cls(**expand_shorthand(cls, data))


def same_config(config: Any, saved: dict[str, Any]) -> bool:
    """Whether a saved config (a manifest's, a checkpoint's: JSON, perhaps from before a field existed)
    describes `config`: read back through the config class, so defaults and list/tuple spellings agree."""
    try:
        return config_from_dict(type(config), saved) == config
    except (ConfigError, TypeError):
        return False
