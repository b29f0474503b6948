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


NOT_BUILT = [
    pytest.param(lambda: AttentionOptions(sliding_window=4096), "attention.sliding_window=4096", id="window"),
    pytest.param(lambda: RotaryOptions(fraction=0.25), "rotary.fraction=0.25", id="partial-rotary"),
    pytest.param(lambda: ResidualOptions(sandwich=True), "residual.sandwich=True", id="sandwich"),
    pytest.param(lambda: ResidualOptions(parallel=True), "residual.parallel=True", id="parallel"),
]


@pytest.mark.parametrize(("build", "name"), NOT_BUILT)
def test_an_option_not_built_yet_is_refused_by_name(build, name: str) -> None:
    with pytest.raises(ConfigError, match=rf"{name} is not built yet.*leave it at"):
        build()


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
