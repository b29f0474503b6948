"""Invariants of the PyTorch layers: causality, padding invariance, attention weights, cached decoding,
cross-attention shapes, positional encodings, residual norms and the exact GELU.

Shape legend: B batch, T query length, S key/source length, P past length, D model width, H heads,
Dh head width, F ffn width. Sizes are tiny (D=32, H=4, F=64, lengths <= 12) so the file runs in seconds.
Every parity-like assertion prints the largest difference it saw (shown with `pytest -s` or on failure).
"""

import math
from collections.abc import Callable

import pytest
import torch

from onnxformer.builder.families.config import block_from_shorthand
from onnxformer.builder.layers import (
    DecoderBlock,
    EncoderBlock,
    FeedForward,
    LearnedPositionalEmbedding,
    MultiHeadAttention,
    RelativePositionBias,
    ResidualNorm,
    RotaryEmbedding,
    ScaledDotProductAttention,
    SinusoidalPositionalEncoding,
    causal_mask,
    default_positions,
    padding_mask,
    scaled_dot_product_attention,
)
from onnxformer.runtime.errors import InputError

D_MODEL, N_HEADS, D_FF = 32, 4, 64
HEAD_DIM = D_MODEL // N_HEADS
BATCH, LENGTH, MEMORY_LENGTH = 2, 12, 9
EXACT = 1e-6  # same shapes, masked terms contribute exact zeros
CLOSE = 1e-5  # different shapes or summation orders

# A step runs a layer on x (B, T, D) and returns its hidden output (B, T, D).
Step = Callable[[torch.Tensor], torch.Tensor]


def max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    return (a - b).abs().max().item()


def seeded(seed: int = 0) -> None:
    torch.manual_seed(seed)


def memory_for(batch: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(123)
    return torch.randn(batch, MEMORY_LENGTH, D_MODEL, generator=generator)  # (B, S, D)


# ---------------------------------------------------------------------------------------------------------
# Causality: the output at position t ignores tokens after t.
# ---------------------------------------------------------------------------------------------------------


def causal_step(kind: str) -> Step:
    """A causal layer, seeded and in eval mode, as a function of x (B, T, D)."""
    seeded()
    if kind.startswith("mha"):
        mha = MultiHeadAttention(D_MODEL, N_HEADS, rotary=kind == "mha-rotary").eval()
        relative = RelativePositionBias(N_HEADS, bidirectional=False) if kind == "mha-relative" else None

        def run_mha(x: torch.Tensor) -> torch.Tensor:
            bias = None if relative is None else relative(x.shape[1], x.shape[1])  # (1, H, T, T)
            return mha(x, causal=True, position_bias=bias).output

        return run_mha
    cross = "cross" in kind
    options = block_from_shorthand(
        norm_position="post" if "post" in kind else "pre", position="rotary" if "rotary" in kind else "none"
    )
    block = DecoderBlock(D_MODEL, N_HEADS, D_FF, options, cross_attention=cross).eval()
    relative = RelativePositionBias(N_HEADS, bidirectional=False) if "relative" in kind else None

    def run_block(x: torch.Tensor) -> torch.Tensor:
        bias = None if relative is None else relative(x.shape[1], x.shape[1])  # (1, H, T, T)
        memory = memory_for(x.shape[0]) if cross else None
        return block(x, memory=memory, position_bias=bias).hidden

    return run_block


CAUSAL_KINDS = [
    "mha",
    "mha-rotary",
    "mha-relative",
    "decoder-self",
    "decoder-cross",
    "decoder-self-post",
    "decoder-cross-rotary",
    "decoder-self-relative",
    "decoder-cross-relative",
]


@pytest.mark.parametrize("kind", CAUSAL_KINDS)
@pytest.mark.parametrize("t", [0, 5, 10])
def test_causal_output_ignores_later_tokens(kind: str, t: int) -> None:
    step = causal_step(kind)
    x = torch.randn(BATCH, LENGTH, D_MODEL)  # (B, T, D)
    changed = x.clone()
    changed[:, t + 1 :] = torch.randn(BATCH, LENGTH - t - 1, D_MODEL)
    with torch.no_grad():
        before, after = step(x), step(changed)  # (B, T, D) each
    kept = max_diff(before[:, : t + 1], after[:, : t + 1])
    last = max_diff(before[:, -1], after[:, -1])
    print(f"{kind} t={t}: max diff at <= t {kept:.3e}, at the last position {last:.3e}")
    assert kept < EXACT
    assert last > 1e-3, "changing the later tokens must change the last position"


# ---------------------------------------------------------------------------------------------------------
# Padding: padded positions, whatever they hold, do not change the real positions.
# ---------------------------------------------------------------------------------------------------------

REAL_LENGTH = 7  # row 0 of the padded batch has 7 real tokens and LENGTH - 7 padded ones


def right_padded_batch() -> tuple[torch.Tensor, torch.Tensor]:
    """x (B, T, D) with random content everywhere, attention_mask (B, T) with row 0 right-padded."""
    x = torch.randn(BATCH, LENGTH, D_MODEL)  # (B, T, D)
    attention_mask = torch.ones(BATCH, LENGTH, dtype=torch.long)  # (B, T)
    attention_mask[0, REAL_LENGTH:] = 0
    return x, attention_mask


def check_padding_invariance(
    run: Callable[[torch.Tensor, torch.Tensor | None], torch.Tensor], label: str
) -> None:
    """`run(x, attention_mask)` -> (B, T, D); compare padded rows with unpadded runs of the same rows."""
    x, attention_mask = right_padded_batch()
    other = x.clone()
    other[0, REAL_LENGTH:] = 100.0 * torch.randn(LENGTH - REAL_LENGTH, D_MODEL)
    with torch.no_grad():
        padded = run(x, attention_mask)  # (B, T, D)
        padded_other = run(other, attention_mask)  # (B, T, D)
        alone = run(x[:1, :REAL_LENGTH], None)  # (1, T_real, D)
        full_row = run(x[1:], None)  # (1, T, D)
    content = max_diff(padded[0, :REAL_LENGTH], padded_other[0, :REAL_LENGTH])
    versus_alone = max_diff(padded[0, :REAL_LENGTH], alone[0])
    versus_full = max_diff(padded[1], full_row[0])
    print(
        f"{label}: padding content {content:.3e}, padded vs unpadded row {versus_alone:.3e}, "
        f"unpadded row in batch vs alone {versus_full:.3e}"
    )
    assert not torch.isnan(padded).any()
    assert content < EXACT
    assert versus_alone < CLOSE
    assert versus_full < CLOSE


ENCODER_CASES = [
    pytest.param("pre", "relu", "none", id="pre-relu"),
    pytest.param("pre", "gelu", "none", id="pre-gelu"),
    pytest.param("post", "relu", "none", id="post-relu"),
    pytest.param("post", "gelu", "none", id="post-gelu"),
    pytest.param("pre", "gelu", "rotary", id="pre-gelu-rotary"),
    pytest.param("post", "relu", "rotary", id="post-relu-rotary"),
    pytest.param("pre", "gelu", "relative", id="pre-gelu-relative"),
    pytest.param("post", "gelu", "relative", id="post-gelu-relative"),
]


@pytest.mark.parametrize(("norm_position", "activation", "position"), ENCODER_CASES)
def test_encoder_block_padding_invariance(norm_position: str, activation: str, position: str) -> None:
    seeded()
    options = block_from_shorthand(norm_position=norm_position, activation=activation, position=position)
    block = EncoderBlock(D_MODEL, N_HEADS, D_FF, options).eval()
    relative = RelativePositionBias(N_HEADS, bidirectional=True) if position == "relative" else None

    def run(x: torch.Tensor, attention_mask: torch.Tensor | None) -> torch.Tensor:
        bias = None if relative is None else relative(x.shape[1], x.shape[1])  # (1, H, T, T)
        return block(x, attention_mask=attention_mask, position_bias=bias).hidden

    check_padding_invariance(run, f"encoder {norm_position}/{activation}/{position}")


@pytest.mark.parametrize("rotary", [False, True], ids=["plain", "rotary"])
@pytest.mark.parametrize("causal", [False, True], ids=["bidirectional", "causal"])
def test_multi_head_attention_padding_invariance(rotary: bool, causal: bool) -> None:
    seeded()
    mha = MultiHeadAttention(D_MODEL, N_HEADS, rotary=rotary).eval()

    def run(x: torch.Tensor, attention_mask: torch.Tensor | None) -> torch.Tensor:
        return mha(x, attention_mask=attention_mask, causal=causal).output

    check_padding_invariance(run, f"mha rotary={rotary} causal={causal}")


@pytest.mark.parametrize("position", ["rotary", "relative"])
@pytest.mark.parametrize("cross", [False, True], ids=["self", "cross"])
def test_decoder_block_left_padding_invariance(position: str, cross: bool) -> None:
    """Real tokens at the end of row 0; positions start at its first real token so rotary angles match."""
    seeded()
    options = block_from_shorthand(position=position)
    block = DecoderBlock(D_MODEL, N_HEADS, D_FF, options, cross_attention=cross).eval()
    relative = RelativePositionBias(N_HEADS, bidirectional=False) if position == "relative" else None
    pad = LENGTH - REAL_LENGTH
    x = torch.randn(BATCH, LENGTH, D_MODEL)  # (B, T, D)
    attention_mask = torch.ones(BATCH, LENGTH, dtype=torch.long)  # (B, T)
    attention_mask[0, :pad] = 0
    positions = (attention_mask.cumsum(dim=1) - 1).clamp(min=0)  # (B, T): 0 at the first real token
    memory = memory_for(BATCH) if cross else None

    def run(
        x: torch.Tensor,
        attention_mask: torch.Tensor | None,
        positions: torch.Tensor | None,
        memory: torch.Tensor | None,
    ) -> torch.Tensor:
        bias = None if relative is None else relative(x.shape[1], x.shape[1])  # (1, H, T, T)
        return block(
            x, attention_mask=attention_mask, positions=positions, memory=memory, position_bias=bias
        ).hidden

    other = x.clone()
    other[0, :pad] = 100.0 * torch.randn(pad, D_MODEL)
    with torch.no_grad():
        padded = run(x, attention_mask, positions, memory)  # (B, T, D)
        padded_other = run(other, attention_mask, positions, memory)  # (B, T, D)
        alone = run(x[:1, pad:], None, None, None if memory is None else memory[:1])  # (1, T_real, D)
    content = max_diff(padded[0, pad:], padded_other[0, pad:])
    versus_alone = max_diff(padded[0, pad:], alone[0])
    print(
        f"decoder left padding {position} cross={cross}: content {content:.3e}, vs alone {versus_alone:.3e}"
    )
    assert not torch.isnan(padded).any()
    assert content < EXACT
    assert versus_alone < CLOSE


# ---------------------------------------------------------------------------------------------------------
# Attention weights: rows sum to 1, masked keys get exactly 0, all-masked rows give zeros and no NaN.
# ---------------------------------------------------------------------------------------------------------

QUERY_LENGTH, KEY_LENGTH = 5, 8  # queries are the last 5 of 8 positions, as in a cached step


def key_padding() -> torch.Tensor:
    """attention_mask (B, S): row 0 has its last 3 keys padded, row 1 none."""
    attention_mask = torch.ones(BATCH, KEY_LENGTH, dtype=torch.long)  # (B, S)
    attention_mask[0, -3:] = 0
    return attention_mask


def allowed(mask_kind: str, attention_mask: torch.Tensor) -> torch.Tensor:
    """The bool (B, 1, T, S) mask each kind of masking should produce."""
    allow = torch.ones(BATCH, 1, QUERY_LENGTH, KEY_LENGTH, dtype=torch.bool)  # (B, 1, T, S)
    if mask_kind in ("padding", "both"):
        allow = allow & padding_mask(attention_mask)
    if mask_kind in ("causal", "both"):
        allow = allow & causal_mask(QUERY_LENGTH, KEY_LENGTH, device=torch.device("cpu"))
    return allow


def check_weights(weights: torch.Tensor, allow: torch.Tensor, label: str) -> None:
    """weights (B, H, T, S): rows over allowed keys sum to 1, disallowed keys are exactly 0."""
    assert weights.shape == (BATCH, N_HEADS, QUERY_LENGTH, KEY_LENGTH)
    assert not torch.isnan(weights).any()
    sums = weights.sum(dim=-1)  # (B, H, T)
    has_key = allow.any(dim=-1).expand_as(sums)  # (B, H, T)
    row_error = (sums[has_key] - 1.0).abs().max().item()
    masked = weights.masked_select(~allow.expand_as(weights))
    print(f"{label}: max |row sum - 1| {row_error:.3e}, masked entries {masked.numel()}")
    assert row_error < EXACT
    assert torch.all(sums[~has_key] == 0.0)
    assert torch.all(masked == 0.0)


MASK_KINDS = ["padding", "causal", "both"]


@pytest.mark.parametrize("mask_kind", MASK_KINDS)
def test_scaled_dot_product_attention_function_weights(mask_kind: str) -> None:
    seeded()
    query = torch.randn(BATCH, N_HEADS, QUERY_LENGTH, HEAD_DIM)  # (B, H, T, Dh)
    key = torch.randn(BATCH, N_HEADS, KEY_LENGTH, HEAD_DIM)  # (B, H, S, Dh)
    value = torch.randn(BATCH, N_HEADS, KEY_LENGTH, HEAD_DIM)  # (B, H, S, Dh)
    allow = allowed(mask_kind, key_padding())  # (B, 1, T, S)
    output, weights = scaled_dot_product_attention(query, key, value, mask=allow)
    assert output.shape == (BATCH, N_HEADS, QUERY_LENGTH, HEAD_DIM)
    check_weights(weights, allow, f"sdpa function {mask_kind}")
    expected = torch.matmul(weights, value)  # (B, H, T, Dh)
    assert max_diff(output, expected) < EXACT


@pytest.mark.parametrize("mask_kind", MASK_KINDS)
def test_scaled_dot_product_attention_module_weights(mask_kind: str) -> None:
    seeded()
    attention = ScaledDotProductAttention().eval()
    query = torch.randn(BATCH, N_HEADS, QUERY_LENGTH, HEAD_DIM)  # (B, H, T, Dh)
    key = torch.randn(BATCH, N_HEADS, KEY_LENGTH, HEAD_DIM)  # (B, H, S, Dh)
    value = torch.randn(BATCH, N_HEADS, KEY_LENGTH, HEAD_DIM)  # (B, H, S, Dh)
    attention_mask = key_padding()
    result = attention(
        query,
        key,
        value,
        attention_mask=attention_mask if mask_kind != "causal" else None,
        causal=mask_kind != "padding",
        need_weights=True,
    )
    check_weights(result.weights, allowed(mask_kind, attention_mask), f"sdpa module {mask_kind}")
    assert attention(query, key, value).weights is None


@pytest.mark.parametrize("mask_kind", MASK_KINDS)
def test_multi_head_attention_weights(mask_kind: str) -> None:
    """MultiHeadAttention with a cache of P = S - T keys, so the causal mask is the offset one."""
    seeded()
    mha = MultiHeadAttention(D_MODEL, N_HEADS).eval()
    past = KEY_LENGTH - QUERY_LENGTH
    x = torch.randn(BATCH, QUERY_LENGTH, D_MODEL)  # (B, T, D)
    past_key = torch.randn(BATCH, N_HEADS, past, HEAD_DIM)  # (B, H, P, Dh)
    past_value = torch.randn(BATCH, N_HEADS, past, HEAD_DIM)  # (B, H, P, Dh)
    attention_mask = key_padding()
    with torch.no_grad():
        result = mha(
            x,
            attention_mask=attention_mask if mask_kind != "causal" else None,
            causal=mask_kind != "padding",
            past_key=past_key,
            past_value=past_value,
            need_weights=True,
        )
    check_weights(result.weights, allowed(mask_kind, attention_mask), f"mha {mask_kind}")
    assert mha(x, past_key=past_key, past_value=past_value).weights is None


def test_all_masked_row_gives_zero_weights_and_no_nan() -> None:
    seeded()
    query = torch.randn(BATCH, N_HEADS, QUERY_LENGTH, HEAD_DIM)  # (B, H, T, Dh)
    key = torch.randn(BATCH, N_HEADS, KEY_LENGTH, HEAD_DIM)  # (B, H, S, Dh)
    value = torch.randn(BATCH, N_HEADS, KEY_LENGTH, HEAD_DIM)  # (B, H, S, Dh)
    attention_mask = torch.ones(BATCH, KEY_LENGTH, dtype=torch.long)  # (B, S)
    attention_mask[0] = 0  # row 0 is padding only

    output, weights = scaled_dot_product_attention(query, key, value, mask=padding_mask(attention_mask))
    assert not torch.isnan(output).any() and not torch.isnan(weights).any()
    assert torch.all(weights[0] == 0.0) and torch.all(output[0] == 0.0)
    print(f"all-masked row: max |weight| {weights[0].abs().max().item():.3e}")

    module = ScaledDotProductAttention().eval()
    result = module(query, key, value, attention_mask=attention_mask, need_weights=True)
    assert not torch.isnan(result.output).any()
    assert torch.all(result.weights[0] == 0.0) and torch.all(result.output[0] == 0.0)

    mha = MultiHeadAttention(D_MODEL, N_HEADS).eval()
    x = torch.randn(BATCH, KEY_LENGTH, D_MODEL)  # (B, T, D)
    with torch.no_grad():
        result = mha(x, attention_mask=attention_mask, causal=True, need_weights=True)
    assert not torch.isnan(result.output).any()
    assert torch.all(result.weights[0] == 0.0)
    # With no key to read, each head outputs zero, so only the output projection's bias remains.
    assert max_diff(result.output[0], mha.out_proj.bias.expand(KEY_LENGTH, -1)) < EXACT
    assert (result.weights[1].sum(dim=-1) - 1.0).abs().max().item() < EXACT


# ---------------------------------------------------------------------------------------------------------
# Cached decoding: prefix, then a few tokens at a time with past_key/past_value, equals the full run.
# ---------------------------------------------------------------------------------------------------------

SCHEDULES = {
    "prefix5-then-ones": [5, 1, 1, 1, 1, 1, 1, 1],
    "prefix4-then-chunks": [4, 3, 2, 3],
    "ones-from-start": [1] * LENGTH,
}

# A cached layer: (x (B, T, D), attention_mask (B, P + T), past_key, past_value, positions or None)
# -> (hidden (B, T, D), present_key (B, H, P + T, Dh), present_value (B, H, P + T, Dh)).
CachedStep = Callable[
    [torch.Tensor, torch.Tensor, torch.Tensor | None, torch.Tensor | None, torch.Tensor | None],
    tuple[torch.Tensor, torch.Tensor, torch.Tensor],
]


def cached_step(kind: str) -> CachedStep:
    seeded()
    relative = RelativePositionBias(N_HEADS, bidirectional=False) if "relative" in kind else None

    def bias_for(x: torch.Tensor, past_key: torch.Tensor | None) -> torch.Tensor | None:
        if relative is None:
            return None
        past = 0 if past_key is None else past_key.shape[2]
        return relative(x.shape[1], past + x.shape[1])  # (1, H, T, P + T)

    if kind.startswith("mha"):
        mha = MultiHeadAttention(D_MODEL, N_HEADS, rotary="rotary" in kind).eval()

        def run_mha(x, attention_mask, past_key, past_value, positions):
            result = mha(
                x,
                attention_mask=attention_mask,
                causal=True,
                past_key=past_key,
                past_value=past_value,
                position_bias=bias_for(x, past_key),
                positions=positions,
            )
            return result.output, result.present_key, result.present_value

        return run_mha
    cross = "cross" in kind
    options = block_from_shorthand(
        norm_position="post" if "post" in kind else "pre", position="rotary" if "rotary" in kind else "none"
    )
    block = DecoderBlock(D_MODEL, N_HEADS, D_FF, options, cross_attention=cross).eval()

    def run_block(x, attention_mask, past_key, past_value, positions):
        result = block(
            x,
            attention_mask=attention_mask,
            memory=memory_for(x.shape[0]) if cross else None,
            past_key=past_key,
            past_value=past_value,
            position_bias=bias_for(x, past_key),
            positions=positions,
        )
        return result.hidden, result.present_key, result.present_value

    return run_block


CACHED_KINDS = [
    "mha",
    "mha-rotary",
    "mha-relative",
    "decoder-self",
    "decoder-cross",
    "decoder-self-post",
    "decoder-self-rotary",
    "decoder-cross-rotary",
    "decoder-cross-relative",
]


def run_cached(
    step: CachedStep,
    x: torch.Tensor,  # (B, T, D)
    attention_mask: torch.Tensor,  # (B, T) over the whole sequence
    positions: torch.Tensor | None,  # (B, T) or None for the layer's default positions
    schedule: list[int],
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Feed x through `step` in chunks of `schedule` lengths, passing the cache from each to the next."""
    assert sum(schedule) == x.shape[1]
    outputs, past_key, past_value, start = [], None, None, 0
    for length in schedule:
        end = start + length
        chunk_positions = None if positions is None else positions[:, start:end]  # (B, T_chunk)
        hidden, past_key, past_value = step(
            x[:, start:end], attention_mask[:, :end], past_key, past_value, chunk_positions
        )
        assert past_key.shape == (x.shape[0], N_HEADS, end, HEAD_DIM)
        outputs.append(hidden)
        start = end
    return torch.cat(outputs, dim=1), past_key, past_value  # (B, T, D), (B, H, T, Dh) twice


@pytest.mark.parametrize("schedule", list(SCHEDULES.values()), ids=list(SCHEDULES))
@pytest.mark.parametrize("kind", CACHED_KINDS)
def test_cached_equals_full(kind: str, schedule: list[int]) -> None:
    step = cached_step(kind)
    x = torch.randn(BATCH, LENGTH, D_MODEL)  # (B, T, D)
    attention_mask = torch.ones(BATCH, LENGTH, dtype=torch.long)  # (B, T)
    with torch.no_grad():
        full, full_key, full_value = step(x, attention_mask, None, None, None)
        cached, cached_key, cached_value = run_cached(step, x, attention_mask, None, schedule)
    hidden_diff = max_diff(full, cached)
    cache_diff = max(max_diff(full_key, cached_key), max_diff(full_value, cached_value))
    print(f"{kind} {schedule}: cached vs full hidden {hidden_diff:.3e}, cache {cache_diff:.3e}")
    assert hidden_diff < CLOSE
    assert cache_diff < CLOSE


@pytest.mark.parametrize("kind", ["mha-rotary", "decoder-cross-rotary", "decoder-self-relative"])
def test_cached_equals_full_with_left_padding(kind: str) -> None:
    """A left-padded row decoded with explicit positions matches its full run, real tokens only."""
    step = cached_step(kind)
    pad = 3
    x = torch.randn(BATCH, LENGTH, D_MODEL)  # (B, T, D)
    attention_mask = torch.ones(BATCH, LENGTH, dtype=torch.long)  # (B, T)
    attention_mask[0, :pad] = 0
    positions = (attention_mask.cumsum(dim=1) - 1).clamp(min=0)  # (B, T)
    with torch.no_grad():
        full, _, _ = step(x, attention_mask, None, None, positions)
        cached, _, _ = run_cached(step, x, attention_mask, positions, [5, 1, 2, 1, 3])
    diff = max(max_diff(full[0, pad:], cached[0, pad:]), max_diff(full[1], cached[1]))
    print(f"{kind} left-padded: cached vs full {diff:.3e}")
    assert not torch.isnan(cached).any()
    assert diff < CLOSE


# ---------------------------------------------------------------------------------------------------------
# Cross-attention shapes: memory length S differs from query length T.
# ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("query_length", "memory_length"), [(5, 9), (9, 3), (1, 12)])
def test_cross_attention_shapes(query_length: int, memory_length: int) -> None:
    seeded()
    mha = MultiHeadAttention(D_MODEL, N_HEADS).eval()
    x = torch.randn(BATCH, query_length, D_MODEL)  # (B, T, D)
    memory = torch.randn(BATCH, memory_length, D_MODEL)  # (B, S, D)
    memory_mask = torch.ones(BATCH, memory_length, dtype=torch.long)  # (B, S)
    memory_mask[0, -1] = 0
    with torch.no_grad():
        result = mha(x, memory=memory, attention_mask=memory_mask, need_weights=True)
    assert result.output.shape == (BATCH, query_length, D_MODEL)
    assert result.weights.shape == (BATCH, N_HEADS, query_length, memory_length)
    assert result.present_key.shape == (BATCH, N_HEADS, memory_length, HEAD_DIM)
    assert torch.all(result.weights[0, :, :, -1] == 0.0)
    key, value = mha.project_memory(memory)  # (B, H, S, Dh) each
    assert torch.equal(key, result.present_key) and torch.equal(value, result.present_value)

    block = DecoderBlock(D_MODEL, N_HEADS, D_FF, cross_attention=True).eval()
    with torch.no_grad():
        out = block(x, memory=memory, memory_mask=memory_mask, need_weights=True)
    assert out.hidden.shape == (BATCH, query_length, D_MODEL)
    assert out.self_weights.shape == (BATCH, N_HEADS, query_length, query_length)
    assert out.cross_weights.shape == (BATCH, N_HEADS, query_length, memory_length)
    assert out.present_key.shape == (BATCH, N_HEADS, query_length, HEAD_DIM)
    assert torch.all(out.cross_weights[0, :, :, -1] == 0.0)


# ---------------------------------------------------------------------------------------------------------
# Positional encodings.
# ---------------------------------------------------------------------------------------------------------

LONG = 2048


def test_sinusoidal_accepts_long_input() -> None:
    encoding = SinusoidalPositionalEncoding(D_MODEL)
    values = encoding(default_positions(1, LONG))  # (1, LONG, D)
    assert values.shape == (1, LONG, D_MODEL)
    assert torch.isfinite(values).all() and values.abs().max().item() <= 1.0
    start = torch.tensor([0.0, 1.0] * (D_MODEL // 2))  # sin(0), cos(0) interleaved
    assert max_diff(values[0, 0], start) < EXACT


@pytest.mark.parametrize("bidirectional", [True, False], ids=["bidirectional", "unidirectional"])
def test_relative_bias_accepts_long_input(bidirectional: bool) -> None:
    seeded()
    relative = RelativePositionBias(N_HEADS, bidirectional=bidirectional)
    bias = relative(LONG, LONG)  # (1, H, LONG, LONG)
    assert bias.shape == (1, N_HEADS, LONG, LONG)
    assert torch.isfinite(bias).all()
    step = relative(1, LONG)  # (1, H, 1, LONG): the last query of a cached step
    assert max_diff(step[0, :, 0], bias[0, :, -1]) == 0.0


def test_rotary_accepts_long_input_and_preserves_norms() -> None:
    seeded()
    rotary = RotaryEmbedding(HEAD_DIM)
    x = torch.randn(1, N_HEADS, LONG, HEAD_DIM)  # (B, H, T, Dh)
    rotated = rotary(x, default_positions(1, LONG))  # (B, H, T, Dh)
    assert rotated.shape == x.shape and torch.isfinite(rotated).all()
    norm_diff = max_diff(rotated.norm(dim=-1), x.norm(dim=-1))
    print(f"rotary length {LONG}: max norm change {norm_diff:.3e}")
    assert norm_diff < 1e-4
    assert max_diff(rotated[:, :, 0], x[:, :, 0]) == 0.0  # position 0 is the identity


def test_learned_positions_refuse_positions_past_max_len() -> None:
    seeded()
    table = LearnedPositionalEmbedding(16, D_MODEL)
    assert table(default_positions(BATCH, 16)).shape == (BATCH, 16, D_MODEL)
    with pytest.raises(InputError, match=r"max_len=16"):
        table(default_positions(BATCH, 17))
    with pytest.raises(InputError, match=r"position 16 .*max_len=16"):
        table(torch.tensor([[3, 16]]))
    with pytest.raises(InputError, match=r"max_len"):
        table(default_positions(1, 4, past_length=14))


@pytest.mark.parametrize(("m", "n"), [(0, 0), (3, 9), (11, 2), (100, 40)])
def test_rotary_dot_product_depends_only_on_distance(m: int, n: int) -> None:
    seeded()
    rotary = RotaryEmbedding(HEAD_DIM)
    query = torch.randn(1, N_HEADS, 1, HEAD_DIM)  # (B, H, 1, Dh)
    key = torch.randn(1, N_HEADS, 1, HEAD_DIM)  # (B, H, 1, Dh)

    def dot(query_pos: int, key_pos: int) -> torch.Tensor:
        q = rotary(query, torch.tensor([[query_pos]]))  # (B, H, 1, Dh)
        k = rotary(key, torch.tensor([[key_pos]]))  # (B, H, 1, Dh)
        return (q * k).sum(dim=-1)  # (B, H, 1)

    shifted = max_diff(dot(m, n), dot(m + 7, n + 7))
    other_distance = max_diff(dot(m, n), dot(m, n + 1))
    print(f"rotary m={m} n={n}: shifted by 7 {shifted:.3e}, distance changed by 1 {other_distance:.3e}")
    assert shifted < 1e-5
    assert other_distance > 1e-3, "the dot product must depend on the distance"


def test_relative_buckets_in_range_and_direction() -> None:
    relative = torch.arange(-3000, 3001)  # key_pos - query_pos
    distances = torch.arange(1, 3001)
    for bidirectional in (True, False):
        layer = RelativePositionBias(N_HEADS, bidirectional=bidirectional)
        buckets = layer.bucket(relative)
        assert buckets.min().item() >= 0 and buckets.max().item() < layer.num_buckets
        assert layer.bucket(torch.tensor([0])).item() == 0
        past = layer.bucket(-distances)
        assert torch.all(past[1:] >= past[:-1]), "farther past keys never get a nearer bucket"
        assert past.max().item() > past.min().item()

    bidirectional = RelativePositionBias(N_HEADS, bidirectional=True)
    future, past = bidirectional.bucket(distances), bidirectional.bucket(-distances)
    half = bidirectional.num_buckets // 2
    assert torch.all(future != past)
    assert torch.all(future >= half) and torch.all(past < half)

    unidirectional = RelativePositionBias(N_HEADS, bidirectional=False)
    assert torch.all(unidirectional.bucket(distances) == 0), "keys after the query share bucket 0"
    assert unidirectional.bucket(torch.tensor([-1])).item() != 0


# ---------------------------------------------------------------------------------------------------------
# Residual norm and feed-forward.
# ---------------------------------------------------------------------------------------------------------


def randomised_residual(norm_position: str) -> ResidualNorm:
    seeded()
    residual = ResidualNorm(D_MODEL, norm_position=norm_position).eval()
    with torch.no_grad():
        residual.norm.weight.normal_()
        residual.norm.bias.normal_()
    return residual


def layer_norm(residual: ResidualNorm, x: torch.Tensor) -> torch.Tensor:
    norm = residual.norm
    return torch.nn.functional.layer_norm(x, (D_MODEL,), norm.weight, norm.bias, norm.eps)


def test_residual_norm_pre() -> None:
    residual = randomised_residual("pre")
    x, y = torch.randn(BATCH, LENGTH, D_MODEL), torch.randn(BATCH, LENGTH, D_MODEL)  # (B, T, D)
    with torch.no_grad():
        before_diff = max_diff(residual.before(x), layer_norm(residual, x))
        after_diff = max_diff(residual.after(x, y), x + y)
    print(f"pre-LN: before vs LayerNorm(x) {before_diff:.3e}, after vs x + y {after_diff:.3e}")
    assert before_diff < EXACT
    assert after_diff == 0.0


def test_residual_norm_post() -> None:
    residual = randomised_residual("post")
    x, y = torch.randn(BATCH, LENGTH, D_MODEL), torch.randn(BATCH, LENGTH, D_MODEL)  # (B, T, D)
    with torch.no_grad():
        assert residual.before(x) is x
        after_diff = max_diff(residual.after(x, y), layer_norm(residual, x + y))
    print(f"post-LN: after vs LayerNorm(x + y) {after_diff:.3e}")
    assert after_diff < EXACT


def identity_feed_forward(**options: str) -> FeedForward:
    """F = D with identity up/down projections and zero biases, so ffn(x) = activation(x)."""
    ffn = FeedForward(D_MODEL, D_MODEL, **options).eval()
    with torch.no_grad():
        for linear in (ffn.up, ffn.down):
            linear.weight.copy_(torch.eye(D_MODEL))
            linear.bias.zero_()
    return ffn


def test_feed_forward_gelu_is_exact_erf_form() -> None:
    ffn = identity_feed_forward()
    assert isinstance(ffn.activation, torch.nn.GELU)
    assert ffn.activation.approximate == "none"
    x = torch.linspace(-6.0, 6.0, 4 * LENGTH * D_MODEL).reshape(4, LENGTH, D_MODEL)  # (B, T, D)
    with torch.no_grad():
        output = ffn(x)  # (B, T, D)
    erf_form = 0.5 * x * (1.0 + torch.erf(x / math.sqrt(2.0)))
    exact_diff = max_diff(output, erf_form)
    torch_diff = max_diff(output, torch.nn.functional.gelu(x, approximate="none"))
    tanh_diff = max_diff(output, torch.nn.functional.gelu(x, approximate="tanh"))
    print(f"gelu: vs erf form {exact_diff:.3e}, vs torch exact {torch_diff:.3e}, vs tanh {tanh_diff:.3e}")
    assert exact_diff < EXACT
    assert torch_diff < EXACT
    assert tanh_diff > 1e-4, "the tanh approximation is measurably different, so this test can fail"


def test_feed_forward_relu_and_composition() -> None:
    ffn = identity_feed_forward(activation="relu")
    x = torch.randn(BATCH, LENGTH, D_MODEL)  # (B, T, D)
    with torch.no_grad():
        assert torch.equal(ffn(x), torch.relu(x))
    seeded()
    ffn = FeedForward(D_MODEL, D_FF).eval()
    with torch.no_grad():
        expected = ffn.down(torch.nn.functional.gelu(ffn.up(x)))  # (B, T, D)
        diff = max_diff(ffn(x), expected)
    print(f"ffn vs down(gelu(up(x))): {diff:.3e}")
    assert diff < EXACT
