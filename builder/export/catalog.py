"""The catalogue of per-block exports: every block kind under each option that changes its graph.

Options are varied one at a time from a base configuration, so each value of each option (pre/post-LN,
ReLU/GELU, every positional encoding, causal or not, with and without cross-attention, with and without
past key/values) is exported and proven at least once, without the full cross product. The options of
today's architectures (RMSNorm, tanh-GELU, SiLU, gated FFNs, no biases, grouped-query and multi-query
attention, a free head width, T5's unit scale, rope base and scaling) each have their own block too, and
one Llama-style decoder block combines them.

Dimension names are the symbolic axes of the exported graphs:
batch (B), sequence (T), past_sequence (P), total_sequence (P + T), memory_sequence (S).
"""

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, Literal

from torch import nn

from onnxformer.builder.export import wrappers
from onnxformer.builder.layers import (
    Activation,
    AttentionOptions,
    BlockOptions,
    DecoderBlock,
    EncoderBlock,
    FeedForward,
    FeedForwardOptions,
    LearnedPositionalEmbedding,
    MultiHeadAttention,
    NormOptions,
    NormPosition,
    RelativePositionBias,
    ResidualNorm,
    ResidualOptions,
    RMSNorm,
    RopeScalingOptions,
    RotaryEmbedding,
    RotaryOptions,
    SinusoidalPositionalEncoding,
)
from onnxformer.builder.layers.blocks import self_attention

InputKind = Literal["float", "mask", "positions"]


@dataclass(frozen=True)
class BlockDims:
    d_model: int = 64
    n_heads: int = 4
    d_ff: int = 128
    max_len: int = 128  # size of the learned position table
    n_kv_heads: int | None = None  # a model's key/value heads (None: n_heads)
    head_width: int | None = None  # a model's head width (None: d_model / n_heads)

    @property
    def head_dim(self) -> int:
        return self.head_width if self.head_width is not None else self.d_model // self.n_heads

    @property
    def kv_heads(self) -> int:
        return self.n_heads if self.n_kv_heads is None else self.n_kv_heads

    def fixed_sizes(self) -> dict[str, int]:
        """The axis names that are fixed by the configuration, with their sizes."""
        return {
            "d_model": self.d_model,
            "n_heads": self.n_heads,
            "kv_heads": self.kv_heads,
            "head_dim": self.head_dim,
        }


@dataclass(frozen=True)
class InputSpec:
    name: str
    dims: tuple[str | int, ...]  # axis names (dynamic) or sizes (fixed)
    kind: InputKind = "float"


@dataclass(frozen=True)
class BlockSpec:
    name: str  # file stem: <kind>.<option>.<option>...
    kind: str
    options: dict[str, Any]
    build: Callable[[BlockDims], nn.Module]
    inputs: tuple[InputSpec, ...]
    outputs: tuple[str, ...]
    cached: bool = False  # validated at past length 0 and > 0
    max_positions: int | None = None  # longest P + T the graph accepts (learned table)

    @property
    def filename(self) -> str:
        return f"{self.name}.onnx"


def _hidden(name: str = "hidden_states", length: str = "sequence", width: str = "d_model") -> InputSpec:
    return InputSpec(name, ("batch", length, width))


def _heads(name: str, length: str) -> InputSpec:
    return InputSpec(name, ("batch", "n_heads", length, "head_dim"))


def _kv_heads(name: str, length: str) -> InputSpec:
    return InputSpec(name, ("batch", "kv_heads", length, "head_dim"))


def _mask(name: str, length: str) -> InputSpec:
    return InputSpec(name, ("batch", length), "mask")


def block_options(
    norm_position: NormPosition, activation: Activation, position: str = "none"
) -> BlockOptions:
    """The catalogue's blocks: the defaults but for the norm's place, the activation and rotary positions."""
    options = BlockOptions(residual=ResidualOptions(norm_position), ffn=FeedForwardOptions(activation))
    return replace(options, rotary=RotaryOptions()) if position == "rotary" else options


def _block_name(
    kind: str, options: BlockOptions, parts: list[str], *, n_heads: int | None = None, cached: bool = False
) -> str:
    """<kind>.<norm place>_<norm>.<ffn>[.cross][.<position>][.gqa|.mqa][.window<W>][.cached], from the
    values."""
    heads = options.attention.n_kv_heads
    grouped = heads is not None and n_heads is not None and heads != n_heads
    tags = ["mqa" if heads == 1 else "gqa"] if grouped else []
    if options.attention.sliding_window is not None:
        tags.append(f"window{options.attention.sliding_window}")
    return ".".join([kind, options.name(), *parts, *tags, *(["cached"] if cached else [])])


def _described(options: BlockOptions, position: str, **flags: bool) -> dict[str, Any]:
    return {"position": position, **flags, **options.described()}


def encoder_spec(options: BlockOptions, position: str) -> BlockSpec:
    """An encoder block of `options`; `position` "relative" adds T5's bias (computed by the wrapper)."""

    def build(d: BlockDims) -> nn.Module:
        block = EncoderBlock(d.d_model, d.n_heads, d.d_ff, options)
        relative = RelativePositionBias(d.n_heads, bidirectional=True) if position == "relative" else None
        return wrappers.Encoder(block, relative)

    parts = [] if position == "none" else [position]
    return BlockSpec(
        name=_block_name("encoder_block", options, parts),
        kind="encoder_block",
        options=_described(options, position, causal=False),
        build=build,
        inputs=(_hidden(), _mask("attention_mask", "sequence")),
        outputs=("hidden_states_out",),
    )


def decoder_spec(
    options: BlockOptions, position: str, *, cross: bool, cached: bool, n_heads: int | None = None
) -> BlockSpec:
    """A decoder block of `options`; `n_heads` names a grouped-query block ".gqa" (None: never)."""

    def build(d: BlockDims) -> nn.Module:
        block = DecoderBlock(d.d_model, d.n_heads, d.d_ff, options, cross_attention=cross)
        relative = RelativePositionBias(d.n_heads, bidirectional=False) if position == "relative" else None
        wrapper = wrappers.CrossDecoder if cross else wrappers.Decoder
        return wrapper(block, cached=cached, relative=relative)

    inputs = [_hidden(), _mask("attention_mask", "total_sequence" if cached else "sequence")]
    if cross:
        inputs += [
            _hidden("encoder_hidden_states", "memory_sequence"),
            _mask("encoder_attention_mask", "memory_sequence"),
        ]
    outputs = ["hidden_states_out"]
    if cached:
        # kv_heads is n_heads unless the dims say otherwise (a grouped-query model's own blocks).
        inputs += [_kv_heads("past_key", "past_sequence"), _kv_heads("past_value", "past_sequence")]
        outputs += ["present_key", "present_value"]
    parts = [*(["cross"] if cross else []), *([] if position == "none" else [position])]
    return BlockSpec(
        name=_block_name("decoder_block", options, parts, n_heads=n_heads, cached=cached),
        kind="decoder_block",
        options=_described(options, position, causal=True, cross_attention=cross, cached=cached),
        build=build,
        inputs=tuple(inputs),
        outputs=tuple(outputs),
        cached=cached,
    )


def _attention_specs() -> list[BlockSpec]:
    def mha(d: BlockDims, rotary: bool = False) -> MultiHeadAttention:
        return MultiHeadAttention(d.d_model, d.n_heads, rotary=rotary)

    return [
        BlockSpec(
            "sdpa",
            "scaled_dot_product_attention",
            {"causal": False},
            lambda d: wrappers.AttentionProduct(causal=False),
            (
                _heads("query", "sequence"),
                _heads("key", "memory_sequence"),
                _heads("value", "memory_sequence"),
                _mask("attention_mask", "memory_sequence"),
            ),
            ("output", "attention_weights"),
        ),
        BlockSpec(
            "sdpa.causal",
            "scaled_dot_product_attention",
            {"causal": True},
            lambda d: wrappers.AttentionProduct(causal=True),
            (
                _heads("query", "sequence"),
                _heads("key", "total_sequence"),
                _heads("value", "total_sequence"),
                _mask("attention_mask", "total_sequence"),
            ),
            ("output", "attention_weights"),
            cached=True,
        ),
        BlockSpec(
            "mha.self",
            "multi_head_attention",
            {"causal": False, "cross_attention": False, "cached": False, "position": "none"},
            lambda d: wrappers.SelfAttention(mha(d)),
            (_hidden(), _mask("attention_mask", "sequence")),
            ("output", "attention_weights"),
        ),
        BlockSpec(
            "mha.self.causal.cached",
            "multi_head_attention",
            {"causal": True, "cross_attention": False, "cached": True, "position": "none"},
            lambda d: wrappers.CachedCausalSelfAttention(mha(d)),
            (
                _hidden(),
                _mask("attention_mask", "total_sequence"),
                _heads("past_key", "past_sequence"),
                _heads("past_value", "past_sequence"),
            ),
            ("output", "present_key", "present_value", "attention_weights"),
            cached=True,
        ),
        BlockSpec(
            "mha.self.causal.rotary.cached",
            "multi_head_attention",
            {"causal": True, "cross_attention": False, "cached": True, "position": "rotary"},
            lambda d: wrappers.CachedCausalSelfAttention(mha(d, rotary=True)),
            (
                _hidden(),
                _mask("attention_mask", "total_sequence"),
                _heads("past_key", "past_sequence"),
                _heads("past_value", "past_sequence"),
            ),
            ("output", "present_key", "present_value", "attention_weights"),
            cached=True,
        ),
        BlockSpec(
            "mha.cross",
            "multi_head_attention",
            {"causal": False, "cross_attention": True, "cached": False, "position": "none"},
            lambda d: wrappers.CrossAttention(mha(d)),
            (
                _hidden(),
                _hidden("encoder_hidden_states", "memory_sequence"),
                _mask("encoder_attention_mask", "memory_sequence"),
            ),
            ("output", "attention_weights"),
        ),
    ]


def _position_specs() -> list[BlockSpec]:
    positions = InputSpec("positions", ("batch", "sequence"), "positions")
    return [
        BlockSpec(
            "position.sinusoidal",
            "positional_encoding",
            {"position": "sinusoidal"},
            lambda d: wrappers.AbsolutePosition(SinusoidalPositionalEncoding(d.d_model)),
            (positions,),
            ("encodings",),
        ),
        BlockSpec(
            "position.learned",
            "positional_encoding",
            {"position": "learned", "max_len": BlockDims().max_len},
            lambda d: wrappers.AbsolutePosition(LearnedPositionalEmbedding(d.max_len, d.d_model)),
            (positions,),
            ("encodings",),
            max_positions=BlockDims().max_len,
        ),
        BlockSpec(
            "position.relative.bidirectional",
            "positional_encoding",
            {"position": "relative", "bidirectional": True},
            lambda d: wrappers.RelativeBias(RelativePositionBias(d.n_heads, bidirectional=True)),
            (InputSpec("attention_logits", ("batch", "n_heads", "sequence", "sequence")),),
            ("biased_logits",),
        ),
        BlockSpec(
            "position.relative.causal",
            "positional_encoding",
            {"position": "relative", "bidirectional": False},
            lambda d: wrappers.RelativeBias(RelativePositionBias(d.n_heads, bidirectional=False)),
            (InputSpec("attention_logits", ("batch", "n_heads", "sequence", "total_sequence")),),
            ("biased_logits",),
            cached=True,
        ),
        BlockSpec(
            "position.rotary",
            "positional_encoding",
            {"position": "rotary"},
            lambda d: wrappers.Rotary(RotaryEmbedding(d.head_dim)),
            (_heads("x", "sequence"), positions),
            ("rotated",),
        ),
    ]


def _sublayer_specs() -> list[BlockSpec]:
    def ffn(activation: Activation) -> Callable[[BlockDims], nn.Module]:
        return lambda d: wrappers.FeedForwardGraph(FeedForward(d.d_model, d.d_ff, activation=activation))

    def residual(norm: NormPosition) -> Callable[[BlockDims], nn.Module]:
        return lambda d: wrappers.Residual(ResidualNorm(d.d_model, norm_position=norm))

    activations: tuple[Activation, ...] = ("relu", "gelu")
    norms: tuple[NormPosition, ...] = ("pre", "post")
    specs = [
        BlockSpec(
            f"ffn.{activation}",
            "feed_forward",
            {"ffn.activation": activation},
            ffn(activation),
            (_hidden(),),
            ("output",),
        )
        for activation in activations
    ]
    specs += [
        BlockSpec(
            f"residual.{norm}_ln",
            "residual_norm",
            {"residual.position": norm},
            residual(norm),
            (_hidden(), _hidden("sublayer_output")),
            ("sublayer_input", "hidden_states_out"),
        )
        for norm in norms
    ]
    return specs


GQA_HEADS = BlockDims().n_heads // 2  # key/value heads of the grouped-query blocks
FREE_HEAD_DIM = 8  # a head width != d_model / n_heads
LLAMA3_SCALING = RopeScalingOptions(
    "llama3", factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0, original_max_position_embeddings=64
)  # at head width 16 its wavelengths (6 .. 2e4) fall in the kept, blended and scaled bands alike


def _cached_attention(name: str, options: dict[str, Any], build, kv_heads: int) -> BlockSpec:
    past = ("batch", kv_heads, "past_sequence", "head_dim")
    return BlockSpec(
        name,
        "multi_head_attention",
        {"causal": True, "cross_attention": False, "cached": True, "position": "none", **options},
        build,
        (
            _hidden(),
            _mask("attention_mask", "total_sequence"),
            InputSpec("past_key", past),
            InputSpec("past_value", past),
        ),
        ("output", "present_key", "present_value", "attention_weights"),
        cached=True,
    )


def _option_specs() -> list[BlockSpec]:
    """One block per option of today's architectures, the rest of the block at its defaults."""
    unmasked = {"causal": False, "cross_attention": False, "cached": False, "position": "none"}

    def attention(options: AttentionOptions):
        block = BlockOptions(norm=NormOptions("rms", eps=1e-6), attention=options)
        return lambda d: wrappers.SelfAttention(self_attention(d.d_model, d.n_heads, block, dropout=0.0))

    def ffn(activation: Activation, **options: bool):
        return lambda d: wrappers.FeedForwardGraph(
            FeedForward(d.d_model, d.d_ff, activation=activation, **options)
        )

    def rotary(options: RotaryOptions):
        return lambda d: wrappers.Rotary(
            RotaryEmbedding(d.head_dim, base=options.base, scaling=options.scaling, fraction=options.fraction)
        )

    rotary_inputs = (_heads("x", "sequence"), InputSpec("positions", ("batch", "sequence"), "positions"))
    specs = [
        BlockSpec(
            "norm.rms",
            "norm",
            {"norm.kind": "rms", "norm.eps": 1e-6},
            lambda d: wrappers.Norm(RMSNorm(d.d_model, eps=1e-6)),
            (_hidden(),),
            ("output",),
        ),
        BlockSpec(
            "norm.rms.offset",
            "norm",
            {"norm.kind": "rms", "norm.eps": 1e-6, "norm.weight_offset": 1.0},
            lambda d: wrappers.Norm(RMSNorm(d.d_model, eps=1e-6, weight_offset=1.0)),
            (_hidden(),),
            ("output",),
        ),
        BlockSpec(
            "residual.pre_ln.rms",
            "residual_norm",
            {"residual.position": "pre", "norm.kind": "rms", "norm.eps": 1e-6},
            lambda d: wrappers.Residual(ResidualNorm(d.d_model, norm="rms", eps=1e-6)),
            (_hidden(), _hidden("sublayer_output")),
            ("sublayer_input", "hidden_states_out"),
        ),
    ]
    ffns: list[tuple[str, Activation, bool, bool]] = [
        ("ffn.gelu_tanh", "gelu_tanh", False, True),
        ("ffn.silu", "silu", False, True),
        ("ffn.swiglu", "silu", True, False),
        ("ffn.geglu", "gelu_tanh", True, False),
        ("ffn.relu.nobias", "relu", False, False),
    ]
    specs += [
        BlockSpec(
            name,
            "feed_forward",
            {"ffn.activation": activation, "ffn.gated": gated, "ffn.bias": bias},
            ffn(activation, gated=gated, bias=bias),
            (_hidden(),),
            ("output",),
        )
        for name, activation, gated, bias in ffns
    ]
    attentions = [
        ("attention.gqa", AttentionOptions(n_kv_heads=GQA_HEADS)),
        ("attention.mqa", AttentionOptions(n_kv_heads=1)),
        ("attention.head_dim", AttentionOptions(head_dim=FREE_HEAD_DIM)),
        ("attention.scale1", AttentionOptions(scale=1.0)),
        ("attention.nobias", AttentionOptions(qkv_bias=False, out_bias=False)),
        ("attention.qkv_bias", AttentionOptions(qkv_bias=True, out_bias=False)),
        ("attention.qk_norm", AttentionOptions(qk_norm=True, qkv_bias=False, out_bias=False)),
        ("attention.softcap", AttentionOptions(softcap=2.0)),
        ("attention.window", AttentionOptions(sliding_window=3)),  # bidirectional (ModernBERT's local layers)
    ]
    specs += [
        BlockSpec(
            name,
            "multi_head_attention",
            {**unmasked, **_attention_described(options)},
            attention(options),
            (_hidden(), _mask("attention_mask", "sequence")),
            ("output", "attention_weights"),
        )
        for name, options in attentions
    ]
    specs.append(
        _cached_attention(
            "attention.gqa_cached",
            {"attention.n_kv_heads": GQA_HEADS},
            lambda d: wrappers.CachedCausalSelfAttention(
                MultiHeadAttention(d.d_model, d.n_heads, n_kv_heads=GQA_HEADS)
            ),
            GQA_HEADS,
        )
    )
    rotaries = [
        ("rotary.base", RotaryOptions(base=500000.0)),
        ("rotary.linear", RotaryOptions(scaling=RopeScalingOptions("linear", factor=4.0))),
        ("rotary.llama3", RotaryOptions(base=500000.0, scaling=LLAMA3_SCALING)),
        ("rotary.partial", RotaryOptions(fraction=0.5)),
    ]
    described = [
        (name, {"position": "rotary", **_group_described("rotary", options)}, rotary(options))
        for name, options in rotaries
    ]
    specs += [
        BlockSpec(name, "positional_encoding", options, build, rotary_inputs, ("rotated",))
        for name, options, build in described
    ]
    specs.append(_llama_decoder_spec())
    specs += _architecture_decoder_specs()
    return specs


def _architecture_decoder_specs() -> list[BlockSpec]:
    """Cached decoder blocks of the imported architectures' own shapes: Mistral's sliding window, Gemma 2's
    sandwich norms (with its (1 + w) RMSNorm, soft-cap and GeGLU), GPT-NeoX's parallel sublayers with
    partial rotary."""
    heads = BlockDims().n_heads
    blocks = [
        BlockOptions(
            norm=NormOptions("rms", eps=1e-6),
            attention=AttentionOptions(sliding_window=4, qkv_bias=False, out_bias=False),
            rotary=RotaryOptions(),
            ffn=FeedForwardOptions("silu", gated=True, bias=False),
        ),
        BlockOptions(
            norm=NormOptions("rms", eps=1e-6, weight_offset=1.0),
            residual=ResidualOptions("pre", sandwich=True),
            attention=AttentionOptions(softcap=2.0, qkv_bias=False, out_bias=False),
            rotary=RotaryOptions(),
            ffn=FeedForwardOptions("gelu_tanh", gated=True, bias=False),
        ),
        BlockOptions(
            residual=ResidualOptions("pre", parallel=True),
            rotary=RotaryOptions(fraction=0.25),
        ),
    ]
    return [decoder_spec(options, "rotary", cross=False, cached=True, n_heads=heads) for options in blocks]


def _llama_decoder_spec() -> BlockSpec:
    """A Llama-style decoder block: pre-RMSNorm, rotary (llama3-scaled), SwiGLU, no biases, GQA cache."""
    options = BlockOptions(
        norm=NormOptions("rms", eps=1e-6),
        attention=AttentionOptions(n_kv_heads=GQA_HEADS, qkv_bias=False, out_bias=False),
        rotary=RotaryOptions(base=500000.0, scaling=LLAMA3_SCALING),
        ffn=FeedForwardOptions("silu", gated=True, bias=False),
    )
    spec = decoder_spec(options, "rotary", cross=False, cached=True, n_heads=BlockDims().n_heads)
    past = ("batch", GQA_HEADS, "past_sequence", "head_dim")
    inputs = (*spec.inputs[:2], InputSpec("past_key", past), InputSpec("past_value", past))
    return replace(spec, inputs=inputs)


def _group_described(group: str, options: Any) -> dict[str, Any]:
    """One option group as the manifest spells it ("attention.n_kv_heads"), the defaults left out."""
    return {
        key: value
        for key, value in BlockOptions(**{group: options}).described().items()
        if key.startswith(f"{group}.") and value != BlockOptions().described().get(key)
    }


def _attention_described(options: AttentionOptions) -> dict[str, Any]:
    return _group_described("attention", options)


def block_catalog() -> list[BlockSpec]:
    """Every block export, in a stable order."""
    return [
        *_attention_specs(),
        *_position_specs(),
        *_sublayer_specs(),
        encoder_spec(block_options("post", "gelu"), "none"),
        encoder_spec(block_options("pre", "gelu"), "none"),
        encoder_spec(block_options("post", "relu"), "none"),
        encoder_spec(block_options("pre", "gelu"), "relative"),
        encoder_spec(block_options("pre", "gelu", "rotary"), "rotary"),
        decoder_spec(block_options("pre", "gelu"), "none", cross=True, cached=False),
        decoder_spec(block_options("pre", "gelu"), "none", cross=True, cached=True),
        decoder_spec(block_options("post", "gelu"), "none", cross=True, cached=False),
        decoder_spec(block_options("pre", "relu"), "none", cross=True, cached=False),
        decoder_spec(block_options("pre", "gelu"), "none", cross=False, cached=True),
        decoder_spec(block_options("pre", "gelu"), "relative", cross=True, cached=True),
        decoder_spec(block_options("pre", "gelu", "rotary"), "rotary", cross=False, cached=True),
        *_option_specs(),
    ]
