"""BlockOptions: one frozen value per block, checked on construction; each option the architectures need has
room here, and each either computes what its formula says (checked against float64 arithmetic written out
here) or is refused by name."""

import dataclasses
import json

import pytest
import torch

from onnxformer.builder.families import GPT, GPTConfig
from onnxformer.builder.families.config import block_from_shorthand, config_from_dict
from onnxformer.builder.layers import (
    AttentionOptions,
    BlockOptions,
    DecoderBlock,
    DecoderStack,
    EncoderBlock,
    FeedForwardOptions,
    MultiHeadAttention,
    NormOptions,
    ResidualOptions,
    RMSNorm,
    RotaryOptions,
    scaled_dot_product_attention,
)
from onnxformer.runtime.errors import ConfigError

D_MODEL, N_HEADS, D_FF = 32, 4, 64
HEAD_DIM = D_MODEL // N_HEADS
BATCH, LENGTH = 2, 6
# float64 against float64: only the order of additions differs
TOLERANCE = 1e-12


def hidden(dtype: torch.dtype = torch.float64) -> torch.Tensor:
    return torch.randn(BATCH, LENGTH, D_MODEL, dtype=dtype)  # (B, T, D)


def assert_close(got: torch.Tensor, expected: torch.Tensor, what: str) -> None:
    diff = (got - expected).abs().max().item()
    print(f"{what}: max abs diff {diff:.3g}")
    assert diff <= TOLERANCE, f"{what}: max abs diff {diff:.3g} > {TOLERANCE}"


# ---- the value itself -------------------------------------------------------------------------------


BAD_VALUES = [
    pytest.param(lambda: NormOptions("batch"), r"norm.kind must be one of", id="norm-kind"),
    pytest.param(lambda: NormOptions(eps=0.0), r"norm.eps must be a finite number > 0", id="eps"),
    pytest.param(lambda: NormOptions(weight_offset=1.0), r"weight_offset applies to RMSNorm", id="offset"),
    pytest.param(lambda: ResidualOptions("middle"), r"residual.position must be one of", id="position"),
    pytest.param(lambda: AttentionOptions(n_kv_heads=0), r"attention.n_kv_heads must be a whole", id="kv"),
    pytest.param(lambda: AttentionOptions(head_dim=2.5), r"attention.head_dim must be a whole", id="dh"),
    pytest.param(lambda: AttentionOptions(scale=-1.0), r"attention.scale must be a finite", id="scale"),
    pytest.param(lambda: AttentionOptions(softcap=float("inf")), r"attention.softcap must be", id="cap"),
    pytest.param(lambda: AttentionOptions(qkv_bias="yes"), r"attention.qkv_bias must be true", id="bias"),
    pytest.param(lambda: RotaryOptions(base=0.0), r"rotary.base must be", id="base"),
    pytest.param(lambda: RotaryOptions(scaling={"kind": "yarn"}), r"rope scaling must be one of", id="yarn"),
    pytest.param(lambda: FeedForwardOptions("swish"), r"ffn.activation must be one of", id="act"),
    pytest.param(
        lambda: BlockOptions(norm="rms"), r"block option group norm must be NormOptions", id="group"
    ),
    pytest.param(lambda: BlockOptions(attention={"heads": 2}), r"unknown attention option", id="unknown"),
    pytest.param(
        lambda: ResidualOptions("post", sandwich=True), r"residual.sandwich applies to pre", id="sw"
    ),
    pytest.param(
        lambda: ResidualOptions("post", parallel=True), r"residual.parallel applies to pre", id="par"
    ),
    pytest.param(lambda: RotaryOptions(fraction=1.5), r"rotary.fraction is a share", id="fraction"),
    pytest.param(
        lambda: MultiHeadAttention(D_MODEL, N_HEADS, rotary=True, rotary_fraction=0.2),
        r"even rotated width, got 1 \(head width 8 times fraction 0.2\)",
        id="odd-rotated",
    ),
    pytest.param(
        lambda: ResidualOptions("post", attention_norm=False),
        r"residual.attention_norm=False leaves out the norm before self-attention",
        id="encoder-window",
    ),
    pytest.param(
        lambda: DecoderBlock(D_MODEL, N_HEADS, D_FF, BlockOptions(residual=ResidualOptions(parallel=True))),
        r"a parallel decoder block with cross-attention is not",
        id="parallel-cross",
    ),
]


@pytest.mark.parametrize(("build", "message"), BAD_VALUES)
def test_a_bad_value_is_a_config_error_naming_the_option(build, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        build()


def test_the_value_is_frozen_and_round_trips_through_json() -> None:
    options = block_from_shorthand(
        position="rotary", norm="rms", eps=1e-6, n_kv_heads=2, attention_bias=False, gated=True
    )
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.norm = NormOptions()  # type: ignore[misc]
    saved = json.loads(json.dumps(dataclasses.asdict(options)))
    assert BlockOptions(**saved) == options
    described = options.described()
    assert described["attention.n_kv_heads"] == 2 and described["rotary.base"] == 10000.0
    assert len(described) == len(set(described)) and all("." in key for key in described)


def test_the_shorthand_and_the_groups_build_the_same_model_config() -> None:
    """A checkpoint written before BlockOptions (flat names) reads as the nested value."""
    legacy = {
        "vocab_size": 64, "d_model": 32, "n_layers": 2, "n_heads": 4, "d_ff": 64, "max_len": 16,
        "dropout": 0.0, "position": "rotary", "norm_position": "pre", "activation": "silu",
        "tie_embeddings": False, "norm": "rms", "eps": 1e-6, "gated": True, "attention_bias": False,
        "ffn_bias": False, "n_kv_heads": 2, "head_dim": None, "attention_scale": None,
        "rotary_base": 5e5, "rope_scaling": None,
    }  # fmt: skip
    config = config_from_dict(GPTConfig, legacy)
    assert config == config_from_dict(GPTConfig, dataclasses.asdict(config))
    assert config.block == BlockOptions(
        norm=NormOptions("rms", eps=1e-6),
        attention=AttentionOptions(n_kv_heads=2, qkv_bias=False, out_bias=False),
        rotary=RotaryOptions(base=5e5),
        ffn=FeedForwardOptions("silu", gated=True, bias=False),
    )


def test_rotary_options_without_rotary_positions_are_refused() -> None:
    with pytest.raises(ConfigError, match=r"block.rotary applies to rotary positions"):
        GPTConfig(position="learned", block=BlockOptions(rotary=RotaryOptions()))
    with pytest.raises(ConfigError, match=r"rotary_base applies to rotary positions"):
        config_from_dict(GPTConfig, {"position": "learned", "rotary_base": 5e5})


# ---- the options that are built: each against its formula ----------------------------------------------


def test_qkv_and_output_biases_are_separate() -> None:
    """Qwen2: biases on q, k and v, none on the output projection."""
    options = BlockOptions(attention=AttentionOptions(qkv_bias=True, out_bias=False))
    block = EncoderBlock(D_MODEL, N_HEADS, D_FF, options).double().eval()
    attention = block.self_attn
    assert attention.out_proj.bias is None
    assert all(getattr(attention, f"{p}_proj").bias is not None for p in "qkv")
    x = hidden()
    q, k, v = (getattr(attention, f"{p}_proj") for p in "qkv")
    heads = [t(x).view(BATCH, LENGTH, N_HEADS, HEAD_DIM).transpose(1, 2) for t in (q, k, v)]
    weights = torch.softmax(heads[0] @ heads[1].transpose(-1, -2) / HEAD_DIM**0.5, dim=-1)
    mixed = (weights @ heads[2]).transpose(1, 2).reshape(BATCH, LENGTH, D_MODEL)
    expected = mixed @ attention.out_proj.weight.T  # no output bias
    assert_close(attention(x).output, expected, "q/k/v bias without output bias")


def test_qk_norm_normalises_each_head_before_the_product() -> None:
    options = BlockOptions(norm=NormOptions("rms", eps=1e-6), attention=AttentionOptions(qk_norm=True))
    attention = EncoderBlock(D_MODEL, N_HEADS, D_FF, options).self_attn.double().eval()
    assert isinstance(attention.query_norm, RMSNorm) and attention.query_norm.weight.shape == (HEAD_DIM,)
    with torch.no_grad():
        attention.query_norm.weight.uniform_(0.5, 1.5)
        attention.key_norm.weight.uniform_(0.5, 1.5)
    x = hidden()

    def rms(t: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        return t / torch.sqrt(t.pow(2).mean(-1, keepdim=True) + 1e-6) * weight

    split = [
        getattr(attention, f"{p}_proj")(x).view(BATCH, LENGTH, N_HEADS, HEAD_DIM).transpose(1, 2)
        for p in "qkv"
    ]
    query, key = rms(split[0], attention.query_norm.weight), rms(split[1], attention.key_norm.weight)
    weights = torch.softmax(query @ key.transpose(-1, -2) / HEAD_DIM**0.5, dim=-1)
    mixed = (weights @ split[2]).transpose(1, 2).reshape(BATCH, LENGTH, D_MODEL)
    assert_close(attention(x).output, attention.out_proj(mixed), "QK-norm")


def test_attention_softcap_bounds_the_logits() -> None:
    query, key, value = (
        torch.randn(BATCH, N_HEADS, LENGTH, HEAD_DIM, dtype=torch.float64) * 8 for _ in "qkv"
    )
    cap = 5.0
    out, weights = scaled_dot_product_attention(query, key, value, softcap=cap)
    logits = query @ key.transpose(-1, -2) / HEAD_DIM**0.5  # (B, H, T, S), far beyond the cap
    assert logits.abs().max() > 3 * cap
    expected = torch.softmax(cap * torch.tanh(logits / cap), dim=-1)
    assert_close(weights, expected, "soft-capped weights")
    assert_close(out, expected @ value, "soft-capped output")
    block = EncoderBlock(D_MODEL, N_HEADS, D_FF, BlockOptions(attention=AttentionOptions(softcap=cap)))
    assert block.self_attn.softcap == cap


def test_norm_weight_offset_scales_by_one_plus_the_weight() -> None:
    """Gemma stores w and multiplies by (1 + w)."""
    options = BlockOptions(norm=NormOptions("rms", eps=1e-6, weight_offset=1.0))
    norm = EncoderBlock(D_MODEL, N_HEADS, D_FF, options).ffn_residual.norm.double()
    with torch.no_grad():
        norm.weight.uniform_(-0.5, 0.5)
    x = hidden()
    expected = x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * (1.0 + norm.weight)
    assert_close(norm(x), expected, "RMSNorm with weight offset 1")


def test_query_scale_other_than_inverse_sqrt_head_width() -> None:
    plain = MultiHeadAttention(D_MODEL, N_HEADS).double().eval()
    scaled = EncoderBlock(
        D_MODEL, N_HEADS, D_FF, BlockOptions(attention=AttentionOptions(scale=1.0))
    ).self_attn
    scaled = scaled.double().eval()
    scaled.load_state_dict(plain.state_dict())
    x = hidden()
    with torch.no_grad():  # scale 1 equals 1/sqrt(Dh) on queries multiplied by sqrt(Dh)
        plain.q_proj.weight.mul_(HEAD_DIM**0.5)
        plain.q_proj.bias.mul_(HEAD_DIM**0.5)
    assert_close(scaled(x).output, plain(x).output, "scale 1.0")


def test_final_logit_softcap() -> None:
    torch.manual_seed(0)
    base = dict(
        vocab_size=64, d_model=D_MODEL, n_layers=1, n_heads=N_HEADS, d_ff=D_FF, max_len=16, dropout=0.0
    )
    plain = GPT(GPTConfig(**base)).double().eval()
    capped = GPT(GPTConfig(**base, logit_softcap=0.5)).double().eval()
    capped.load_state_dict(plain.state_dict())
    ids = torch.randint(0, 64, (BATCH, LENGTH))
    raw = plain(ids).logits
    assert raw.abs().max() > 0.5
    assert_close(capped(ids).logits, 0.5 * torch.tanh(raw / 0.5), "final logit soft-cap")
    with pytest.raises(ConfigError, match=r"logit_softcap must be > 0"):
        GPTConfig(**base, logit_softcap=0.0)


def test_a_stack_takes_one_value_per_layer() -> None:
    """A per-layer pattern is a tuple: here soft-capping on every other layer."""
    local, wide = BlockOptions(attention=AttentionOptions(softcap=2.0)), BlockOptions()
    stack = DecoderStack(D_MODEL, N_HEADS, D_FF, (local, wide, local), cross_attention=False, final_norm=None)
    assert [block.self_attn.softcap for block in stack.blocks] == [2.0, None, 2.0]
    assert [block.options for block in stack.blocks] == [local, wide, local]
    with pytest.raises(ConfigError, match=r"one BlockOptions per layer"):
        DecoderStack(D_MODEL, N_HEADS, D_FF, (), cross_attention=False, final_norm=None)


# ---- the options the architectures issue built: sliding window, partial rotary, sandwich, parallel -------


def test_a_sliding_window_shows_each_query_its_last_keys() -> None:
    """Query at slot i sees keys i - W + 1 .. i: written out as a loop, first step and cached step."""
    window, total = 3, 9
    attention = MultiHeadAttention(D_MODEL, N_HEADS, sliding_window=window).double().eval()
    x = torch.randn(BATCH, total, D_MODEL, dtype=torch.float64)
    split = [
        getattr(attention, f"{p}_proj")(x).view(BATCH, total, N_HEADS, HEAD_DIM).transpose(1, 2)
        for p in "qkv"
    ]
    logits = split[0] @ split[1].transpose(-1, -2) / HEAD_DIM**0.5  # (B, H, T, T)
    allowed = torch.tensor([[i - window < j <= i for j in range(total)] for i in range(total)])
    weights = torch.softmax(logits.masked_fill(~allowed, float("-inf")), dim=-1)
    expected = attention.out_proj((weights @ split[2]).transpose(1, 2).reshape(BATCH, total, D_MODEL))
    assert_close(attention(x, causal=True).output, expected, "sliding window, full sequence")
    first = attention(x[:, :6], causal=True)
    cached = attention(x[:, 6:], causal=True, past_key=first.present_key, past_value=first.present_value)
    assert_close(cached.output, expected[:, 6:], "sliding window, cached steps past it")


def test_partial_rotary_turns_the_first_features_only() -> None:
    """fraction 0.5 of Dh 8: pairs (i, i + 2) of the first 4 features at angle p * base^(-2i/4)."""
    attention = MultiHeadAttention(D_MODEL, N_HEADS, rotary=True, rotary_fraction=0.5)
    rotary = attention.rotary.double()
    x = torch.randn(BATCH, N_HEADS, LENGTH, HEAD_DIM, dtype=torch.float64)
    positions = torch.arange(LENGTH).repeat(BATCH, 1) + 3  # (B, T)
    expected = x.clone()
    for i in range(2):
        angle = positions[:, None, :] * 10000.0 ** (-2 * i / 4)  # (B, 1, T)
        a, b = x[..., i], x[..., i + 2]
        expected[..., i] = a * torch.cos(angle) - b * torch.sin(angle)
        expected[..., i + 2] = b * torch.cos(angle) + a * torch.sin(angle)
    got = rotary(x, positions)
    # the angles are computed in fp32 (as in transformers): compare at fp32's precision
    diff = (got - expected).abs().max().item()
    print(f"partial rotary: max abs diff {diff:.3g}")
    assert diff <= 1e-5 and torch.equal(got[..., 4:], x[..., 4:])


def test_a_sandwich_norms_each_sublayer_output_before_the_sum() -> None:
    options = BlockOptions(norm=NormOptions("rms", eps=1e-6), residual=ResidualOptions(sandwich=True))
    block = DecoderBlock(D_MODEL, N_HEADS, D_FF, options, cross_attention=False).double().eval()
    with torch.no_grad():
        for parameter in block.parameters():
            parameter.uniform_(-0.5, 1.5)
    x = hidden()
    a, f = block.self_attn_residual, block.ffn_residual
    after_attention = x + a.output_norm(block.self_attn(a.norm(x), causal=True).output)
    expected = after_attention + f.output_norm(block.ffn(f.norm(after_attention)))
    assert_close(block(x).hidden, expected, "sandwich norms")


def test_parallel_sublayers_read_the_same_input() -> None:
    """GPT-NeoX: x + attn(LN1 x) + FFN(LN2 x)."""
    options = BlockOptions(residual=ResidualOptions(parallel=True))
    block = DecoderBlock(D_MODEL, N_HEADS, D_FF, options, cross_attention=False).double().eval()
    x = hidden()
    a, f = block.self_attn_residual, block.ffn_residual
    expected = x + block.self_attn(a.norm(x), causal=True).output + block.ffn(f.norm(x))
    assert_close(block(x).hidden, expected, "parallel residual")
    encoder = EncoderBlock(D_MODEL, N_HEADS, D_FF, options).double().eval()
    a, f = encoder.self_attn_residual, encoder.ffn_residual
    assert_close(
        encoder(x).hidden, x + encoder.self_attn(a.norm(x)).output + encoder.ffn(f.norm(x)), "encoder"
    )


def test_a_bidirectional_window_shows_each_query_its_neighbours() -> None:
    """Encoder self-attention with window W: query i sees keys j with |i - j| < W, padding hidden too
    (transformers' bidirectional sliding window |i - j| <= w is W = w + 1: ModernBERT's local layers)."""
    window, total = 3, 9
    block = EncoderBlock(
        D_MODEL, N_HEADS, D_FF, BlockOptions(attention=AttentionOptions(sliding_window=window))
    )
    attention = block.double().eval().self_attn
    x = torch.randn(BATCH, total, D_MODEL, dtype=torch.float64)
    mask = torch.ones(BATCH, total, dtype=torch.long)
    mask[1, 7:] = 0  # the second row right-padded
    near = torch.tensor([[abs(i - j) < window for j in range(total)] for i in range(total)])  # (T, T)
    allowed = near[None, None] & mask.bool()[:, None, None, :]  # (B, 1, T, T)

    def attend(inputs: torch.Tensor) -> torch.Tensor:
        split = [
            getattr(attention, f"{p}_proj")(inputs).view(BATCH, total, N_HEADS, HEAD_DIM).transpose(1, 2)
            for p in "qkv"
        ]
        logits = split[0] @ split[1].transpose(-1, -2) / HEAD_DIM**0.5  # (B, H, T, T)
        weights = torch.softmax(logits.masked_fill(~allowed, float("-inf")), dim=-1)
        return attention.out_proj((weights @ split[2]).transpose(1, 2).reshape(BATCH, total, D_MODEL))

    expected, got = attend(x), attention(x, attention_mask=mask).output
    assert_close(got[0], expected[0], "bidirectional window")
    assert_close(got[1, :7], expected[1, :7], "bidirectional window, padded row")
    a, f = block.self_attn_residual, block.ffn_residual
    after_attention = x + attend(a.norm(x))  # pre-LN, the default
    whole = after_attention + block.ffn(f.norm(after_attention))
    got = block(x, attention_mask=mask).hidden
    assert_close(got[0], whole[0], "encoder block with a window")
    assert_close(got[1, :7], whole[1, :7], "encoder block with a window, padded row")


def test_a_block_can_leave_out_the_norm_before_self_attention() -> None:
    """ModernBERT's first layer: x + attn(x), then x + FFN(LN x); LayerNorms without bias."""
    options = BlockOptions(
        norm=NormOptions(bias=False), residual=ResidualOptions("pre", attention_norm=False)
    )
    block = EncoderBlock(D_MODEL, N_HEADS, D_FF, options).double().eval()
    with torch.no_grad():
        block.ffn_residual.norm.weight.uniform_(0.5, 1.5)
    x = hidden()
    after_attention = x + block.self_attn(x).output
    centred = after_attention - after_attention.mean(-1, keepdim=True)
    normed = centred / (centred.pow(2).mean(-1, keepdim=True) + 1e-5).sqrt()
    expected = after_attention + block.ffn(normed * block.ffn_residual.norm.weight)
    assert_close(block(x).hidden, expected, "no norm before attention, norms without bias")
    assert block.ffn_residual.norm.bias is None
    assert not list(block.self_attn_residual.parameters())
