"""A block's options as one value: `BlockOptions`, made of small groups, frozen and checked on construction.

    BlockOptions
    ├─ norm       NormOptions         which norm, its epsilon, a weight offset (Gemma's 1 + w), its bias
    ├─ residual   ResidualOptions     norm before or after each sublayer; sandwich; parallel sublayers;
    │                                 no norm before self-attention (ModernBERT's first layer)
    ├─ attention  AttentionOptions    key/value heads, head width, query scale, biases, QK-norm, soft-cap,
    │                                 sliding window (causal or bidirectional, as the block attends)
    ├─ rotary     RotaryOptions|None  rotary positions in self-attention (None: none)
    └─ ffn        FeedForwardOptions  activation, gated or not, biases

Blocks take their widths (d_model, n_heads, d_ff) and one BlockOptions; stacks take one per layer, so a
per-layer pattern (local and global attention in turn) is a tuple of values, not a flag threaded through
every constructor. Dropout is a training setting, not part of the architecture: blocks take it beside
their options. The leaf layers (attention, norms, feed-forward) keep plain numbers: the blocks hand
each its group. A new option is a field of its group plus the code that uses it.

The defaults are the original Transformer's.
"""

import math
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from onnxformer.builder.layers.feedforward import ACTIVATIONS, Activation
from onnxformer.builder.layers.norms import NORMS, NormKind
from onnxformer.builder.layers.positions import RopeScalingOptions
from onnxformer.builder.layers.residual import NORM_POSITIONS, NormPosition
from onnxformer.runtime.errors import ConfigError


def _choice(group: str, name: str, value: Any, choices: tuple) -> None:
    if value not in choices:
        raise ConfigError(f"{group}.{name} must be one of {choices}, got {value!r}")


def _flag(group: str, name: str, value: Any) -> None:
    if not isinstance(value, bool):
        raise ConfigError(f"{group}.{name} must be true or false, got {value!r}")


def _positive(group: str, name: str, value: Any, *, optional: bool = False, whole: bool = False) -> None:
    if value is None and optional:
        return
    kind = int if whole else (int, float)
    if isinstance(value, bool) or not isinstance(value, kind) or not math.isfinite(value) or value <= 0:
        what = "a whole number >= 1" if whole else "a finite number > 0"
        default = " or None (the default)" if optional else ""
        raise ConfigError(f"{group}.{name} must be {what}{default}, got {value!r}")


@dataclass(frozen=True)
class NormOptions:
    kind: NormKind = "layer"  # LayerNorm, or "rms" (T5, Llama)
    eps: float = 1e-5  # BERT 1e-12, GPT-2 1e-5, T5 and Llama 1e-6
    weight_offset: float = 0.0  # RMSNorm scales by (offset + weight): Gemma stores w and uses 1 + w
    bias: bool = True  # LayerNorm's shift (ModernBERT's norms have none); RMSNorm never has one

    def __post_init__(self) -> None:
        _choice("norm", "kind", self.kind, NORMS)
        _positive("norm", "eps", self.eps)
        _flag("norm", "bias", self.bias)
        if isinstance(self.weight_offset, bool) or not isinstance(self.weight_offset, int | float):
            raise ConfigError(f"norm.weight_offset must be a number, got {self.weight_offset!r}")
        if self.weight_offset and self.kind != "rms":
            raise ConfigError("norm.weight_offset applies to RMSNorm only; set norm.kind='rms' or offset 0")


@dataclass(frozen=True)
class ResidualOptions:
    position: NormPosition = "pre"  # norm before each sublayer (GPT-2, T5) or after the sum (BERT)
    sandwich: bool = False  # also a norm on each sublayer's output before the sum (Gemma 2)
    parallel: bool = False  # attention and FFN from the same input, summed once (GPT-J, NeoX, Phi)
    # False: self-attention reads the stream as it is, no norm before it (ModernBERT's first layer, whose
    # input the embeddings' norm has just normalised)
    attention_norm: bool = True

    def __post_init__(self) -> None:
        _choice("residual", "position", self.position, NORM_POSITIONS)
        _flag("residual", "sandwich", self.sandwich)
        _flag("residual", "parallel", self.parallel)
        _flag("residual", "attention_norm", self.attention_norm)
        for name in ("sandwich", "parallel"):
            if getattr(self, name) and self.position != "pre":
                raise ConfigError(f"residual.{name} applies to pre-LN blocks; set residual.position='pre'")
        if not self.attention_norm and self.position != "pre":
            raise ConfigError(
                "residual.attention_norm=False leaves out the norm before self-attention, which only "
                "pre-LN blocks have; set residual.position='pre'"
            )


@dataclass(frozen=True)
class AttentionOptions:
    n_kv_heads: int | None = None  # key/value heads (< n_heads: grouped-query); None = n_heads
    head_dim: int | None = None  # one head's width; None = d_model / n_heads
    scale: float | None = None  # the logits' factor; None = 1 / sqrt(head_dim) (T5: 1.0)
    qkv_bias: bool = True  # biases on the query, key and value projections (Qwen2: yes, Llama: no)
    out_bias: bool = True  # a bias on the output projection (Qwen2: no)
    qk_norm: bool = False  # the block's norm on each head's queries and keys before rotary (Qwen3)
    softcap: float | None = None  # logits -> softcap * tanh(logits / softcap) (Gemma 2)
    # a query sees the keys fewer than this many slots away, itself too: causal, its last this-many
    # (Mistral); bidirectional, this-many - 1 on each side (ModernBERT's local_attention // 2 + 1)
    sliding_window: int | None = None

    def __post_init__(self) -> None:
        _positive("attention", "n_kv_heads", self.n_kv_heads, optional=True, whole=True)
        _positive("attention", "head_dim", self.head_dim, optional=True, whole=True)
        _positive("attention", "scale", self.scale, optional=True)
        _positive("attention", "softcap", self.softcap, optional=True)
        _positive("attention", "sliding_window", self.sliding_window, optional=True, whole=True)
        for name in ("qkv_bias", "out_bias", "qk_norm"):
            _flag("attention", name, getattr(self, name))


def rope_scaling_from_dict(values: dict[str, Any]) -> RopeScalingOptions:
    """RopeScalingOptions from a saved config's dict; ConfigError naming a field it does not have."""
    try:
        return RopeScalingOptions(**values)
    except TypeError as error:
        raise ConfigError(f"rotary.scaling {values!r}: {error}") from None


@dataclass(frozen=True)
class RotaryOptions:
    base: float = 10000.0  # rope_theta
    scaling: RopeScalingOptions | None = None  # linear or llama3 frequency scaling
    fraction: float = 1.0  # the share of each head's width that rotates (NeoX, Phi: partial rotary)

    def __post_init__(self) -> None:
        _positive("rotary", "base", self.base)
        if isinstance(self.scaling, dict):  # a saved config
            object.__setattr__(self, "scaling", rope_scaling_from_dict(self.scaling))
        if self.scaling is not None and not isinstance(self.scaling, RopeScalingOptions):
            raise ConfigError(f"rotary.scaling must be RopeScalingOptions or None, got {self.scaling!r}")
        _positive("rotary", "fraction", self.fraction)
        if self.fraction > 1:
            raise ConfigError(
                f"rotary.fraction is a share of the head width, at most 1, got {self.fraction!r}"
            )


@dataclass(frozen=True)
class FeedForwardOptions:
    activation: Activation = "gelu"
    gated: bool = False  # down(act(gate x) * up x): SwiGLU (Llama), GEGLU (T5 v1.1)
    bias: bool = True

    def __post_init__(self) -> None:
        _choice("ffn", "activation", self.activation, ACTIVATIONS)
        _flag("ffn", "gated", self.gated)
        _flag("ffn", "bias", self.bias)


GROUPS: dict[str, type] = {
    "norm": NormOptions,
    "residual": ResidualOptions,
    "attention": AttentionOptions,
    "rotary": RotaryOptions,
    "ffn": FeedForwardOptions,
}


@dataclass(frozen=True)
class BlockOptions:
    norm: NormOptions = field(default_factory=NormOptions)
    residual: ResidualOptions = field(default_factory=ResidualOptions)
    attention: AttentionOptions = field(default_factory=AttentionOptions)
    rotary: RotaryOptions | None = None
    ffn: FeedForwardOptions = field(default_factory=FeedForwardOptions)

    def __post_init__(self) -> None:
        for name, group in GROUPS.items():  # a saved config holds each group as a dict
            value = getattr(self, name)
            if isinstance(value, dict):
                object.__setattr__(self, name, group_from_dict(group, value, name))
            elif not (value is None and name == "rotary") and not isinstance(value, group):
                raise ConfigError(f"block option group {name} must be {group.__name__}, got {value!r}")

    def kv_heads(self, n_heads: int) -> int:
        """Hkv for a block of n_heads query heads."""
        return n_heads if self.attention.n_kv_heads is None else self.attention.n_kv_heads

    def head_width(self, d_model: int, n_heads: int) -> int:
        """Dh: the attention group's head_dim, or d_model / n_heads."""
        return self.attention.head_dim if self.attention.head_dim is not None else d_model // n_heads

    def described(self) -> dict[str, Any]:
        """Every option under its one spelling, "group.name" (what the manifest records for a block)."""
        return _flatten(asdict(self))

    def name(self) -> str:
        """The block's file-name options, spelled from the values: "pre_ln.gelu", "pre_rms.swiglu.gqa"."""
        norm = "ln" if self.norm.kind == "layer" else self.norm.kind
        gated = {"silu": "swiglu", "gelu_tanh": "geglu", "gelu": "geglu_erf", "relu": "reglu"}
        ffn = gated[self.ffn.activation] if self.ffn.gated else self.ffn.activation
        residual = self.residual
        shape = "_sandwich" if residual.sandwich else "_parallel" if residual.parallel else ""
        return f"{residual.position}_{norm}{shape}.{ffn}"


def _flatten(values: dict[str, Any]) -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in values.items():
        if isinstance(value, dict):
            flat |= {f"{key}.{inner}": item for inner, item in _flatten(value).items()}
        else:
            flat[key] = list(value) if isinstance(value, tuple) else value  # as JSON holds it
    return flat


def group_from_dict(group: type, values: dict[str, Any], name: str) -> Any:
    """A group rebuilt from its saved dict, refusing names it does not have."""
    known = {item.name for item in fields(group)}
    unknown = sorted(set(values) - known)
    if unknown:
        raise ConfigError(f"unknown {name} option(s) {unknown}; {name} has {sorted(known)}")
    return group(**values)
