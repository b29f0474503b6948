"""The options of today's architectures on our layers (RMSNorm, tanh-GELU, SiLU, gated FFNs, biases off,
grouped-query attention, a free head width, the attention scale, rope base and scaling), each against a
formula written here or an equivalent plain configuration; the defaults stay what they were.

Shape legend: B batch, T query length, P past length, D model width, H heads, Hkv key/value heads,
Dh head width, F ffn width.
"""

import math

import pytest
import torch

from onnxformer.builder.families.config import block_from_shorthand
from onnxformer.builder.layers import (
    DecoderBlock,
    DecoderStack,
    EncoderBlock,
    FeedForward,
    MultiHeadAttention,
    ResidualNorm,
    RMSNorm,
    RopeScalingOptions,
    RotaryEmbedding,
    make_norm,
)
from onnxformer.runtime.errors import ConfigError, InputError

D_MODEL, N_HEADS, D_FF = 32, 4, 64
HEAD_DIM = D_MODEL // N_HEADS
BATCH, LENGTH = 2, 6


@pytest.fixture(autouse=True)
def _seed() -> None:
    torch.manual_seed(0)


def hidden(length: int = LENGTH) -> torch.Tensor:
    return torch.randn(BATCH, length, D_MODEL)  # (B, T, D)


def assert_close(got: torch.Tensor, expected: torch.Tensor, what: str, tol: float = 1e-5) -> None:
    diff = float((got - expected).detach().abs().max())
    print(f"{what}: max abs diff {diff:.2e}")
    assert diff <= tol, f"{what}: max abs diff {diff}"


def bias_names(module: torch.nn.Module) -> list[str]:
    return [name for name, _ in module.named_parameters() if name.endswith("bias")]


# ---------------------------------------------------------------------------------------------------------
# Norms.
# ---------------------------------------------------------------------------------------------------------


def test_rms_norm_matches_the_formula_and_has_no_bias() -> None:
    norm = RMSNorm(D_MODEL, eps=1e-6)
    with torch.no_grad():
        norm.weight.copy_(torch.randn(D_MODEL))
    x = hidden() * 3 + 1  # a mean far from 0: RMSNorm must not subtract it
    expected = x / torch.sqrt((x * x).mean(-1, keepdim=True) + 1e-6) * norm.weight
    assert_close(norm(x), expected, "RMSNorm vs formula")
    assert [name for name, _ in norm.named_parameters()] == ["weight"]
    layer = torch.nn.functional.layer_norm(x, (D_MODEL,), norm.weight, None, 1e-6)
    assert float((norm(x) - layer).detach().abs().max()) > 1e-2  # it really is not LayerNorm


def test_rms_norm_computes_in_fp32_for_half_inputs() -> None:
    norm = RMSNorm(D_MODEL).half()  # a half-precision model: weight and input fp16
    x = torch.full((1, 2, D_MODEL), 300.0, dtype=torch.float16)  # x^2 = 9e4 overflows fp16 (max 65504)
    out = norm(x)
    assert out.dtype == torch.float16
    assert torch.isfinite(out).all()
    assert_close(out.float(), torch.ones(1, 2, D_MODEL), "RMSNorm fp16", tol=1e-3)


@pytest.mark.parametrize("eps", [1e-12, 1e-6, 0.5])
def test_eps_reaches_every_norm(eps: float) -> None:
    residual = ResidualNorm(D_MODEL, norm="rms", eps=eps)
    assert isinstance(residual.norm, RMSNorm) and residual.norm.eps == eps
    block = EncoderBlock(D_MODEL, N_HEADS, D_FF, block_from_shorthand(norm="rms", eps=eps))
    assert {block.self_attn_residual.norm.eps, block.ffn_residual.norm.eps} == {eps}
    options = block_from_shorthand(position="rotary", norm="layer", eps=eps)
    stack = DecoderStack(
        D_MODEL, N_HEADS, D_FF, (options,) * 2, cross_attention=True, final_norm=options.norm
    )
    norms = [m for m in stack.modules() if isinstance(m, torch.nn.LayerNorm)]
    assert len(norms) == 2 * 3 + 1  # three sublayers per block, the final norm
    assert {m.eps for m in norms} == {eps}


def test_norm_defaults_are_unchanged() -> None:
    assert isinstance(ResidualNorm(D_MODEL).norm, torch.nn.LayerNorm)
    assert ResidualNorm(D_MODEL).norm.eps == 1e-5
    assert isinstance(make_norm("layer", D_MODEL), torch.nn.LayerNorm)


# ---------------------------------------------------------------------------------------------------------
# Feed-forward.
# ---------------------------------------------------------------------------------------------------------


def gelu_tanh(x: torch.Tensor) -> torch.Tensor:
    return 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))


def silu(x: torch.Tensor) -> torch.Tensor:
    return x / (1 + torch.exp(-x))


ACTIVATION_FORMULAS = {
    "relu": lambda x: torch.clamp(x, min=0),
    "gelu": lambda x: 0.5 * x * (1 + torch.erf(x / math.sqrt(2))),
    "gelu_tanh": gelu_tanh,
    "silu": silu,
}


@pytest.mark.parametrize("activation", list(ACTIVATION_FORMULAS))
@pytest.mark.parametrize("bias", [True, False])
def test_feed_forward_matches_the_formula(activation: str, bias: bool) -> None:
    ffn = FeedForward(D_MODEL, D_FF, activation=activation, bias=bias)
    x = hidden()
    act = ACTIVATION_FORMULAS[activation]
    up = x @ ffn.up.weight.T + (ffn.up.bias if bias else 0)  # (B, T, F)
    expected = act(up) @ ffn.down.weight.T + (ffn.down.bias if bias else 0)  # (B, T, D)
    assert_close(ffn(x), expected, f"ffn {activation} bias={bias}")


@pytest.mark.parametrize(("activation", "name"), [("silu", "SwiGLU"), ("gelu_tanh", "GEGLU")])
def test_gated_feed_forward_matches_the_formula(activation: str, name: str) -> None:
    ffn = FeedForward(D_MODEL, D_FF, activation=activation, gated=True, bias=False)
    assert sorted(n for n, _ in ffn.named_parameters()) == ["down.weight", "gate.weight", "up.weight"]
    x = hidden()
    act = ACTIVATION_FORMULAS[activation]
    expected = (act(x @ ffn.gate.weight.T) * (x @ ffn.up.weight.T)) @ ffn.down.weight.T  # (B, T, D)
    assert_close(ffn(x), expected, name)


def test_tanh_gelu_differs_from_exact_gelu() -> None:
    x = torch.linspace(-4, 4, 101)
    exact = FeedForward(1, 1, activation="gelu").activation(x)
    tanh = FeedForward(1, 1, activation="gelu_tanh").activation(x)
    assert 1e-5 < float((exact - tanh).abs().max()) < 1e-2


def test_default_feed_forward_has_no_gate() -> None:
    names = [name for name, _ in FeedForward(D_MODEL, D_FF).named_parameters()]
    assert names == ["up.weight", "up.bias", "down.weight", "down.bias"]


# ---------------------------------------------------------------------------------------------------------
# Biases off: no parameters at all, not zeros.
# ---------------------------------------------------------------------------------------------------------


def test_bias_off_leaves_no_bias_parameters() -> None:
    assert bias_names(MultiHeadAttention(D_MODEL, N_HEADS, qkv_bias=False, out_bias=False)) == []
    assert bias_names(FeedForward(D_MODEL, D_FF, bias=False, gated=True)) == []
    options = block_from_shorthand(norm="rms", attention_bias=False, ffn_bias=False)
    block = DecoderBlock(D_MODEL, N_HEADS, D_FF, options)
    assert bias_names(block) == []
    assert not any("bias" in key for key in block.state_dict())
    only_attention = EncoderBlock(D_MODEL, N_HEADS, D_FF, block_from_shorthand(attention_bias=False))
    assert {name.split(".")[0] for name in bias_names(only_attention)} == {
        "self_attn_residual",
        "ffn",
        "ffn_residual",
    }
    only_ffn = EncoderBlock(D_MODEL, N_HEADS, D_FF, block_from_shorthand(ffn_bias=False))
    assert {name.split(".")[0] for name in bias_names(only_ffn)} == {
        "self_attn",
        "self_attn_residual",
        "ffn_residual",
    }


# ---------------------------------------------------------------------------------------------------------
# Grouped-query attention, head width, scale.
# ---------------------------------------------------------------------------------------------------------


def test_gqa_with_as_many_kv_heads_is_plain_mha() -> None:
    plain = MultiHeadAttention(D_MODEL, N_HEADS).eval()
    grouped = MultiHeadAttention(D_MODEL, N_HEADS, n_kv_heads=N_HEADS).eval()
    grouped.load_state_dict(plain.state_dict())
    x = hidden()
    mask = torch.ones(BATCH, LENGTH)
    mask[1, :2] = 0
    a = plain(x, attention_mask=mask, causal=True, need_weights=True)
    b = grouped(x, attention_mask=mask, causal=True, need_weights=True)
    assert torch.equal(a.output, b.output) and torch.equal(a.weights, b.weights)


@pytest.mark.parametrize("n_kv_heads", [2, 1])
def test_gqa_equals_mha_with_repeated_key_value_weights(n_kv_heads: int) -> None:
    grouped = MultiHeadAttention(D_MODEL, N_HEADS, n_kv_heads=n_kv_heads, rotary=True).eval()
    assert grouped.k_proj.weight.shape == (n_kv_heads * HEAD_DIM, D_MODEL)
    plain = MultiHeadAttention(D_MODEL, N_HEADS, rotary=True).eval()
    group = N_HEADS // n_kv_heads
    state = grouped.state_dict()
    for key in ("k_proj.weight", "k_proj.bias", "v_proj.weight", "v_proj.bias"):
        per_head = state[key].unflatten(0, (n_kv_heads, HEAD_DIM))  # (Hkv, Dh[, D])
        state[key] = per_head.repeat_interleave(group, dim=0).flatten(0, 1)  # (H Dh[, D]): head h <- h // g
    plain.load_state_dict(state)
    x = hidden()
    a = grouped(x, causal=True, need_weights=True)
    b = plain(x, causal=True, need_weights=True)
    assert_close(a.output, b.output, f"GQA Hkv={n_kv_heads} vs repeated MHA")
    assert_close(a.weights, b.weights, f"GQA Hkv={n_kv_heads} weights")


@pytest.mark.parametrize("n_kv_heads", [2, 1])
def test_gqa_cached_decode_equals_full_recompute(n_kv_heads: int) -> None:
    options = block_from_shorthand(
        position="rotary", n_kv_heads=n_kv_heads, norm="rms", gated=True, activation="silu",
        attention_bias=False, ffn_bias=False,
    )  # fmt: skip
    block = DecoderBlock(D_MODEL, N_HEADS, D_FF, options, cross_attention=False).eval()
    x = hidden(LENGTH + 3)
    full = block(x)
    first = block(x[:, :LENGTH])
    assert first.present_key.shape == (BATCH, n_kv_heads, LENGTH, HEAD_DIM)
    past_key, past_value = first.present_key, first.present_value
    outputs = [first.hidden]
    for step in range(LENGTH, LENGTH + 3):
        out = block(x[:, step : step + 1], past_key=past_key, past_value=past_value)
        past_key, past_value = out.present_key, out.present_value
        outputs.append(out.hidden)
    assert past_key.shape == past_value.shape == (BATCH, n_kv_heads, LENGTH + 3, HEAD_DIM)
    assert_close(torch.cat(outputs, dim=1), full.hidden, f"GQA Hkv={n_kv_heads} cached vs full")
    assert_close(past_key, full.present_key, "GQA cache vs full keys")


def test_cross_attention_memory_projections_carry_kv_heads() -> None:
    attention = MultiHeadAttention(D_MODEL, N_HEADS, n_kv_heads=2).eval()
    memory = torch.randn(BATCH, 9, D_MODEL)
    key, value = attention.project_memory(memory)
    assert key.shape == value.shape == (BATCH, 2, 9, HEAD_DIM)
    x = hidden()
    assert_close(
        attention(x, memory_key=key, memory_value=value).output,
        attention(x, memory=memory).output,
        "cross GQA projections",
    )


def test_free_head_width() -> None:
    attention = MultiHeadAttention(D_MODEL, N_HEADS, head_dim=12, n_kv_heads=2).eval()
    assert attention.q_proj.weight.shape == (N_HEADS * 12, D_MODEL)
    assert attention.k_proj.weight.shape == (2 * 12, D_MODEL)
    assert attention.out_proj.weight.shape == (D_MODEL, N_HEADS * 12)
    out = attention(hidden(), causal=True)
    assert out.output.shape == (BATCH, LENGTH, D_MODEL)
    assert out.present_key.shape == (BATCH, 2, LENGTH, 12)
    odd = MultiHeadAttention(30, 4, head_dim=8)  # d_model need not divide by n_heads any more
    assert odd(torch.randn(1, 3, 30)).output.shape == (1, 3, 30)


def test_unit_scale_equals_default_with_query_scaled_by_sqrt_head_dim() -> None:
    unit = MultiHeadAttention(D_MODEL, N_HEADS, scale=1.0).eval()
    default = MultiHeadAttention(D_MODEL, N_HEADS).eval()
    state = unit.state_dict()
    state["q_proj.weight"] = state["q_proj.weight"] * math.sqrt(HEAD_DIM)
    state["q_proj.bias"] = state["q_proj.bias"] * math.sqrt(HEAD_DIM)
    default.load_state_dict(state)
    x = hidden()
    assert_close(unit(x).output, default(x).output, "scale=1 vs default with sqrt(Dh) query")
    same = MultiHeadAttention(D_MODEL, N_HEADS).eval()
    same.load_state_dict(unit.state_dict())
    assert float((unit(x).output - same(x).output).detach().abs().max()) > 1e-4  # the scale is really used


def test_attention_defaults_are_unchanged() -> None:
    attention = MultiHeadAttention(D_MODEL, N_HEADS)
    assert (attention.n_kv_heads, attention.head_dim, attention.scale) == (N_HEADS, HEAD_DIM, None)
    shapes = {name: tuple(p.shape) for name, p in attention.named_parameters()}
    assert shapes == {
        f"{proj}.{kind}": (D_MODEL, D_MODEL) if kind == "weight" else (D_MODEL,)
        for proj in ("q_proj", "k_proj", "v_proj", "out_proj")
        for kind in ("weight", "bias")
    }


# ---------------------------------------------------------------------------------------------------------
# Rotary base and scaling.
# ---------------------------------------------------------------------------------------------------------


def llama3_inv_freq(head_dim: int, base: float, factor: float, low: float, high: float, context: int):
    """Llama 3.1's frequency rule, one frequency at a time."""
    result = []
    for i in range(0, head_dim, 2):
        freq = base ** (-i / head_dim)
        wavelength = 2 * math.pi / freq
        if wavelength < context / high:
            result.append(freq)
        elif wavelength > context / low:
            result.append(freq / factor)
        else:
            smooth = (context / wavelength - low) / (high - low)
            result.append((1 - smooth) * freq / factor + smooth * freq)
    return torch.tensor(result, dtype=torch.float64)


def test_rotary_base() -> None:
    rotary = RotaryEmbedding(16, base=500000.0)
    expected = torch.tensor([500000.0 ** (-i / 16) for i in range(0, 16, 2)])
    assert_close(rotary.inv_freq, expected, "rope base 5e5", tol=1e-7)


def test_linear_rope_divides_positions_by_factor() -> None:
    scaled = RotaryEmbedding(HEAD_DIM, scaling=RopeScalingOptions("linear", factor=4.0))
    plain = RotaryEmbedding(HEAD_DIM)
    x = torch.randn(BATCH, N_HEADS, LENGTH, HEAD_DIM)
    positions = torch.arange(LENGTH)[None].expand(BATCH, -1) * 3  # (B, T)
    assert_close(scaled(x, positions), plain(x, positions / 4.0), "linear rope vs positions / 4")


@pytest.mark.parametrize("context", [64, 8192])
def test_llama3_rope_matches_the_formula(context: int) -> None:
    options = RopeScalingOptions(
        "llama3",
        factor=8.0,
        low_freq_factor=1.0,
        high_freq_factor=4.0,
        original_max_position_embeddings=context,
    )
    rotary = RotaryEmbedding(64, base=500000.0, scaling=options)
    expected = llama3_inv_freq(64, 500000.0, 8.0, 1.0, 4.0, context)
    ratio = rotary.inv_freq.double() / expected.double()  # frequencies span 1 .. 4e-7: relative
    assert_close(ratio, torch.ones_like(ratio), f"llama3 rope context={context} (relative)", tol=1e-6)
    plain = RotaryEmbedding(64, base=500000.0).inv_freq
    kept = torch.isclose(rotary.inv_freq, plain)
    divided = torch.isclose(rotary.inv_freq, plain / 8.0)
    assert kept.any() and divided.any() and (~kept & ~divided).any()  # all three bands present


# ---------------------------------------------------------------------------------------------------------
# Errors.
# ---------------------------------------------------------------------------------------------------------

BAD_OPTIONS = {
    "kv-not-dividing": (
        lambda: MultiHeadAttention(D_MODEL, N_HEADS, n_kv_heads=3),
        r"n_heads=4 is not divisible by n_kv_heads=3.*choose n_kv_heads from \[1, 2, 4\]",
    ),
    "kv-zero": (lambda: MultiHeadAttention(D_MODEL, N_HEADS, n_kv_heads=0), r"n_kv_heads must be positive"),
    "kv-in-block": (
        lambda: DecoderBlock(D_MODEL, N_HEADS, D_FF, block_from_shorthand(n_kv_heads=3)),
        r"not divisible by n_kv_heads=3",
    ),
    "head-dim": (lambda: MultiHeadAttention(D_MODEL, N_HEADS, head_dim=0), r"head_dim must be > 0"),
    "scale": (lambda: MultiHeadAttention(D_MODEL, N_HEADS, scale=0.0), r"scale must be > 0"),
    "norm": (
        lambda: ResidualNorm(D_MODEL, norm="batch"),
        r"norm must be one of \('layer', 'rms'\), got 'batch'",
    ),
    "norm-in-block": (lambda: block_from_shorthand(norm="batch"), r"norm.kind must be one of"),
    "rms-eps": (lambda: RMSNorm(D_MODEL, eps=0.0), r"eps must be > 0"),
    "activation": (
        lambda: FeedForward(D_MODEL, D_FF, activation="swish", gated=True),
        r"activation must be one of.*silu.*'swish'",
    ),
    "rope-kind": (lambda: RopeScalingOptions("yarn"), r"rope scaling must be one of.*'yarn'"),
    "rope-factor": (lambda: RopeScalingOptions("linear", factor=0.0), r"factor must be > 0"),
    "llama3-bands": (
        lambda: RopeScalingOptions("llama3", low_freq_factor=4.0, high_freq_factor=1.0),
        r"low_freq_factor < high_freq_factor",
    ),
}


@pytest.mark.parametrize("name", list(BAD_OPTIONS))
def test_bad_options_raise_config_error(name: str) -> None:
    build, message = BAD_OPTIONS[name]
    with pytest.raises(ConfigError, match=message):
        build()


def test_gqa_past_with_query_head_count_is_refused() -> None:
    attention = MultiHeadAttention(D_MODEL, N_HEADS, n_kv_heads=2)
    past = torch.randn(BATCH, N_HEADS, 3, HEAD_DIM)  # (B, H, P, Dh): a cache of the wrong head count
    with pytest.raises(InputError, match=r"past_key axis H must be 2, got 4"):
        attention(hidden(1), causal=True, past_key=past, past_value=past)


def test_llama_style_stack_cached_decode_equals_full_recompute() -> None:
    """All the options together at the stack level, as a Llama-style decoder composes them."""
    options = block_from_shorthand(
        position="rotary", activation="silu", gated=True, norm="rms", eps=1e-6, attention_bias=False,
        ffn_bias=False, n_kv_heads=2, rotary_base=500000.0,
        rope_scaling=RopeScalingOptions("llama3", factor=8.0, original_max_position_embeddings=16),
    )  # fmt: skip
    stack = DecoderStack(
        D_MODEL, N_HEADS, D_FF, (options,) * 2, cross_attention=False, final_norm=options.norm
    ).eval()
    assert bias_names(stack) == []
    assert isinstance(stack.norm, RMSNorm) and stack.norm.eps == 1e-6
    ids = torch.zeros(BATCH, LENGTH + 2, dtype=torch.long)
    x = hidden(LENGTH + 2)
    full = stack(x, stack.prepare(ids, None, None))
    first = stack(x[:, :LENGTH], stack.prepare(ids[:, :LENGTH], None, None))
    assert [tuple(key.shape) for key, _ in first.present] == [(BATCH, 2, LENGTH, HEAD_DIM)] * 2
    step = stack(x[:, LENGTH:], stack.prepare(ids[:, LENGTH:], None, first.present))
    assert step.present[0][0].shape == (BATCH, 2, LENGTH + 2, HEAD_DIM)
    assert_close(
        torch.cat([first.hidden, step.hidden], dim=1), full.hidden, "Llama-style stack cached vs full"
    )
