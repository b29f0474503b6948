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
from dataclasses import dataclass
from typing import Any, Literal

from torch import nn

from onnxformer.builder.export import wrappers
from onnxformer.builder.layers import (
    DecoderBlock,
    EncoderBlock,
    FeedForward,
    LearnedPositionalEmbedding,
    MultiHeadAttention,
    RelativePositionBias,
    ResidualNorm,
    RMSNorm,
    RopeScalingOptions,
    RotaryEmbedding,
    SinusoidalPositionalEncoding,
)

InputKind = Literal["float", "mask", "positions"]


@dataclass(frozen=True)
class BlockDims:
    d_model: int = 64
    n_heads: int = 4
    d_ff: int = 128
    max_len: int = 128  # size of the learned position table
    n_kv_heads: int | None = None  # a model's key/value heads (None: n_heads)
    head_size: int | None = None  # a model's head width (None: d_model / n_heads)

    @property
    def head_dim(self) -> int:
        return self.head_size if self.head_size is not None else self.d_model // self.n_heads

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


def encoder_spec(norm: str, activation: str, position: str) -> BlockSpec:
    def build(d: BlockDims) -> nn.Module:
        block = EncoderBlock(
            d.d_model,
            d.n_heads,
            d.d_ff,
            norm_position=norm,
            activation=activation,
            rotary=position == "rotary",
        )
        relative = RelativePositionBias(d.n_heads, bidirectional=True) if position == "relative" else None
        return wrappers.Encoder(block, relative)

    return BlockSpec(
        name=f"encoder_block.{norm}_ln.{activation}" + ("" if position == "none" else f".{position}"),
        kind="encoder_block",
        options={"norm_position": norm, "activation": activation, "position": position, "causal": False},
        build=build,
        inputs=(_hidden(), _mask("attention_mask", "sequence")),
        outputs=("hidden_states_out",),
    )


def decoder_spec(norm: str, activation: str, position: str, *, cross: bool, cached: bool) -> BlockSpec:
    def build(d: BlockDims) -> nn.Module:
        block = DecoderBlock(
            d.d_model,
            d.n_heads,
            d.d_ff,
            cross_attention=cross,
            norm_position=norm,
            activation=activation,
            rotary=position == "rotary",
        )
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
    name = f"decoder_block.{norm}_ln.{activation}" + (".cross" if cross else "")
    name += ("" if position == "none" else f".{position}") + (".cached" if cached else "")
    return BlockSpec(
        name=name,
        kind="decoder_block",
        options={
            "norm_position": norm,
            "activation": activation,
            "position": position,
            "causal": True,
            "cross_attention": cross,
            "cached": cached,
        },
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
    specs = [
        BlockSpec(
            f"ffn.{activation}",
            "feed_forward",
            {"activation": activation},
            lambda d, a=activation: wrappers.FeedForwardGraph(FeedForward(d.d_model, d.d_ff, activation=a)),
            (_hidden(),),
            ("output",),
        )
        for activation in ("relu", "gelu")
    ]
    specs += [
        BlockSpec(
            f"residual.{norm}_ln",
            "residual_norm",
            {"norm_position": norm},
            lambda d, n=norm: wrappers.Residual(ResidualNorm(d.d_model, norm_position=n)),
            (_hidden(), _hidden("sublayer_output")),
            ("sublayer_input", "hidden_states_out"),
        )
        for norm in ("pre", "post")
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
    self_attention = {"causal": False, "cross_attention": False, "cached": False, "position": "none"}

    def attention(**options):
        return lambda d: wrappers.SelfAttention(MultiHeadAttention(d.d_model, d.n_heads, **options))

    def ffn(activation: str, **options):
        return lambda d: wrappers.FeedForwardGraph(
            FeedForward(d.d_model, d.d_ff, activation=activation, **options)
        )

    def rotary(**options):
        return lambda d: wrappers.Rotary(RotaryEmbedding(d.head_dim, **options))

    rotary_inputs = (_heads("x", "sequence"), InputSpec("positions", ("batch", "sequence"), "positions"))
    llama3 = {"scaling": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0}
    specs = [
        BlockSpec(
            "norm.rms",
            "norm",
            {"norm": "rms", "eps": 1e-6},
            lambda d: wrappers.Norm(RMSNorm(d.d_model, eps=1e-6)),
            (_hidden(),),
            ("output",),
        ),
        BlockSpec(
            "residual.pre_ln.rms",
            "residual_norm",
            {"norm_position": "pre", "norm": "rms", "eps": 1e-6},
            lambda d: wrappers.Residual(ResidualNorm(d.d_model, norm="rms", eps=1e-6)),
            (_hidden(), _hidden("sublayer_output")),
            ("sublayer_input", "hidden_states_out"),
        ),
    ]
    ffns = [
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
            {"activation": activation, "gated": gated, "bias": bias},
            ffn(activation, gated=gated, bias=bias),
            (_hidden(),),
            ("output",),
        )
        for name, activation, gated, bias in ffns
    ]
    attentions = [
        ("attention.gqa", {"n_kv_heads": GQA_HEADS}),
        ("attention.mqa", {"n_kv_heads": 1}),
        ("attention.head_dim", {"head_dim": FREE_HEAD_DIM}),
        ("attention.scale1", {"scale": 1.0}),
        ("attention.nobias", {"bias": False}),
    ]
    specs += [
        BlockSpec(
            name,
            "multi_head_attention",
            {**self_attention, **options},
            attention(**options),
            (_hidden(), _mask("attention_mask", "sequence")),
            ("output", "attention_weights"),
        )
        for name, options in attentions
    ]
    specs.append(
        _cached_attention(
            "attention.gqa_cached",
            {"n_kv_heads": GQA_HEADS},
            lambda d: wrappers.CachedCausalSelfAttention(
                MultiHeadAttention(d.d_model, d.n_heads, n_kv_heads=GQA_HEADS)
            ),
            GQA_HEADS,
        )
    )
    rotaries = [
        ("rotary.base", {"position": "rotary", "base": 500000.0}, rotary(base=500000.0)),
        (
            "rotary.linear",
            {"position": "rotary", "scaling": "linear", "factor": 4.0},
            rotary(scaling=RopeScalingOptions("linear", factor=4.0)),
        ),
        (
            "rotary.llama3",
            {"position": "rotary", "base": 500000.0, **llama3, "original_max_position_embeddings": 64},
            rotary(base=500000.0, scaling=LLAMA3_SCALING),
        ),
    ]
    specs += [
        BlockSpec(name, "positional_encoding", options, build, rotary_inputs, ("rotated",))
        for name, options, build in rotaries
    ]
    specs.append(_llama_decoder_spec())
    return specs


def _llama_decoder_spec() -> BlockSpec:
    """A Llama-style decoder block: pre-RMSNorm, rotary (llama3-scaled), SwiGLU, no biases, GQA cache."""
    options = {
        "norm": "rms",
        "eps": 1e-6,
        "activation": "silu",
        "gated": True,
        "attention_bias": False,
        "ffn_bias": False,
        "n_kv_heads": GQA_HEADS,
        "rotary_base": 500000.0,
        "rope_scaling": LLAMA3_SCALING,
    }

    def build(d: BlockDims) -> nn.Module:
        block = DecoderBlock(d.d_model, d.n_heads, d.d_ff, cross_attention=False, rotary=True, **options)
        return wrappers.Decoder(block, cached=True)

    past = ("batch", GQA_HEADS, "past_sequence", "head_dim")
    return BlockSpec(
        name="decoder_block.pre_rms.swiglu.rotary.gqa.cached",
        kind="decoder_block",
        options={
            "norm_position": "pre",
            "activation": "silu",
            "position": "rotary",
            "causal": True,
            "cross_attention": False,
            "cached": True,
            **{key: value for key, value in options.items() if key not in ("activation", "rope_scaling")},
            "rope_scaling": LLAMA3_SCALING.kind,
        },
        build=build,
        inputs=(
            _hidden(),
            _mask("attention_mask", "total_sequence"),
            InputSpec("past_key", past),
            InputSpec("past_value", past),
        ),
        outputs=("hidden_states_out", "present_key", "present_value"),
        cached=True,
    )


def block_catalog() -> list[BlockSpec]:
    """Every block export, in a stable order."""
    return [
        *_attention_specs(),
        *_position_specs(),
        *_sublayer_specs(),
        encoder_spec("post", "gelu", "none"),
        encoder_spec("pre", "gelu", "none"),
        encoder_spec("post", "relu", "none"),
        encoder_spec("pre", "gelu", "relative"),
        encoder_spec("pre", "gelu", "rotary"),
        decoder_spec("pre", "gelu", "none", cross=True, cached=False),
        decoder_spec("pre", "gelu", "none", cross=True, cached=True),
        decoder_spec("post", "gelu", "none", cross=True, cached=False),
        decoder_spec("pre", "relu", "none", cross=True, cached=False),
        decoder_spec("pre", "gelu", "none", cross=False, cached=True),
        decoder_spec("pre", "gelu", "relative", cross=True, cached=True),
        decoder_spec("pre", "gelu", "rotary", cross=False, cached=True),
        *_option_specs(),
    ]
