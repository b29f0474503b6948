"""Bad configuration or input to the layers raises a typed error whose message says what to change.

Shape legend: B batch, T query length, S key/source length, P past length, D model width, H heads,
Dh head width.
"""

from collections.abc import Callable

import pytest
import torch

from onnxformer.builder.families.config import block_from_shorthand
from onnxformer.builder.layers import (
    BlockOptions,
    DecoderBlock,
    EncoderBlock,
    FeedForward,
    FeedForwardOptions,
    LearnedPositionalEmbedding,
    MultiHeadAttention,
    ResidualNorm,
    ResidualOptions,
    RotaryEmbedding,
    RotaryOptions,
    ScaledDotProductAttention,
    SinusoidalPositionalEncoding,
    default_positions,
)
from onnxformer.runtime.errors import ConfigError, InputError, OnnxformerError

D_MODEL, N_HEADS, D_FF = 32, 4, 64
HEAD_DIM = D_MODEL // N_HEADS
BATCH, LENGTH = 2, 5


def hidden(length: int = LENGTH, width: int = D_MODEL) -> torch.Tensor:
    return torch.randn(BATCH, length, width)  # (B, T, D)


# ---------------------------------------------------------------------------------------------------------
# The error types.
# ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("error", [ConfigError, InputError])
def test_errors_are_value_errors(error: type[Exception]) -> None:
    assert issubclass(error, ValueError)
    assert issubclass(error, OnnxformerError)
    with pytest.raises(ValueError, match="what to change"):
        raise error("what to change")


def test_layer_errors_are_caught_as_value_errors() -> None:
    with pytest.raises(ValueError, match=r"not divisible"):
        MultiHeadAttention(30, N_HEADS)
    with pytest.raises(ValueError, match=r"rank 3"):
        MultiHeadAttention(D_MODEL, N_HEADS)(torch.randn(LENGTH, D_MODEL))


# ---------------------------------------------------------------------------------------------------------
# Configuration errors.
# ---------------------------------------------------------------------------------------------------------

HEADS_NOT_DIVIDING: dict[str, Callable[[], object]] = {
    "attention": lambda: MultiHeadAttention(30, N_HEADS),
    "encoder": lambda: EncoderBlock(30, N_HEADS, D_FF),
    "decoder": lambda: DecoderBlock(30, N_HEADS, D_FF),
    "decoder-no-cross": lambda: DecoderBlock(30, N_HEADS, D_FF, cross_attention=False),
}


@pytest.mark.parametrize("build", list(HEADS_NOT_DIVIDING.values()), ids=list(HEADS_NOT_DIVIDING))
def test_d_model_not_divisible_by_heads(build: Callable[[], object]) -> None:
    with pytest.raises(ConfigError, match=r"d_model=30 is not divisible by n_heads=4.*choose n_heads"):
        build()


INVALID_OPTIONS: dict[str, tuple[Callable[[], object], str]] = {
    "ffn-swish": (
        lambda: FeedForward(D_MODEL, D_FF, activation="swish"),
        r"activation must be one of.*'swish'",
    ),
    "encoder-swish": (
        lambda: EncoderBlock(D_MODEL, N_HEADS, D_FF, BlockOptions(ffn=FeedForwardOptions("swish"))),
        r"ffn.activation must be one of.*relu.*gelu.*'swish'",
    ),
    "decoder-swish": (
        lambda: block_from_shorthand(activation="swish"),
        r"ffn.activation must be one of.*'swish'",
    ),
    "residual-middle": (
        lambda: ResidualNorm(D_MODEL, norm_position="middle"),
        r"norm_position must be one of.*pre.*post.*'middle'",
    ),
    "encoder-middle": (
        lambda: EncoderBlock(D_MODEL, N_HEADS, D_FF, BlockOptions(residual=ResidualOptions("middle"))),
        r"residual.position must be one of.*'middle'",
    ),
    "decoder-middle": (
        lambda: block_from_shorthand(norm_position="middle"),
        r"residual.position must be one of.*'middle'",
    ),
    "attention-dropout": (
        lambda: MultiHeadAttention(D_MODEL, N_HEADS, dropout=1.5),
        r"dropout.*\[0, 1\).*1\.5",
    ),
    "sdpa-dropout": (lambda: ScaledDotProductAttention(dropout=1.5), r"dropout.*\[0, 1\).*1\.5"),
    "ffn-dropout": (lambda: FeedForward(D_MODEL, D_FF, dropout=1.5), r"dropout.*\[0, 1\).*1\.5"),
    "residual-dropout": (lambda: ResidualNorm(D_MODEL, dropout=1.5), r"dropout.*\[0, 1\).*1\.5"),
    "encoder-dropout": (lambda: EncoderBlock(D_MODEL, N_HEADS, D_FF, dropout=1.5), r"dropout.*1\.5"),
    "decoder-negative-dropout": (
        lambda: DecoderBlock(D_MODEL, N_HEADS, D_FF, dropout=-0.1),
        r"dropout.*\[0, 1\).*-0\.1",
    ),
    "sinusoidal-odd": (lambda: SinusoidalPositionalEncoding(31), r"even d_model.*31"),
    "rotary-odd": (lambda: RotaryEmbedding(7), r"even head width.*7"),
    "attention-rotary-odd-head": (
        lambda: MultiHeadAttention(12, N_HEADS, rotary=True),  # Dh = 3
        r"even head width.*3",
    ),
    "encoder-rotary-odd-head": (
        lambda: EncoderBlock(12, N_HEADS, D_FF, BlockOptions(rotary=RotaryOptions())),
        r"even head width.*3",
    ),
}


@pytest.mark.parametrize(("build", "message"), list(INVALID_OPTIONS.values()), ids=list(INVALID_OPTIONS))
def test_invalid_options(build: Callable[[], object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        build()


# ---------------------------------------------------------------------------------------------------------
# Input errors: rank and width.
# ---------------------------------------------------------------------------------------------------------

LAYERS: dict[str, Callable[[], Callable[[torch.Tensor], object]]] = {
    "attention": lambda: MultiHeadAttention(D_MODEL, N_HEADS),
    "ffn": lambda: FeedForward(D_MODEL, D_FF),
    "encoder-pre": lambda: EncoderBlock(D_MODEL, N_HEADS, D_FF, block_from_shorthand(norm_position="pre")),
    "encoder-post": lambda: EncoderBlock(D_MODEL, N_HEADS, D_FF, block_from_shorthand(norm_position="post")),
    "decoder-pre": lambda: DecoderBlock(D_MODEL, N_HEADS, D_FF, cross_attention=False),
    "decoder-post": lambda: DecoderBlock(
        D_MODEL, N_HEADS, D_FF, block_from_shorthand(norm_position="post"), cross_attention=False
    ),
}


@pytest.mark.parametrize("build", list(LAYERS.values()), ids=list(LAYERS))
def test_wrong_rank_input(build: Callable[[], Callable[[torch.Tensor], object]]) -> None:
    layer = build()
    with pytest.raises(InputError, match=r"x must have rank 3 .*\(B, T, D\).*got shape \(5, 32\)"):
        layer(torch.randn(LENGTH, D_MODEL))  # (T, D): the batch axis is missing


@pytest.mark.parametrize("build", list(LAYERS.values()), ids=list(LAYERS))
def test_mismatched_width(build: Callable[[], Callable[[torch.Tensor], object]]) -> None:
    layer = build()
    with pytest.raises(InputError, match=r"axis D must be 32, got 48"):
        layer(hidden(width=48))


def test_mismatched_memory_width() -> None:
    mha = MultiHeadAttention(D_MODEL, N_HEADS)
    with pytest.raises(InputError, match=r"memory axis D must be 32, got 48"):
        mha(hidden(), memory=hidden(width=48))
    block = DecoderBlock(D_MODEL, N_HEADS, D_FF)
    with pytest.raises(InputError, match=r"memory axis D must be 32, got 48"):
        block(hidden(), memory=hidden(width=48))


def test_memory_batch_mismatch() -> None:
    mha = MultiHeadAttention(D_MODEL, N_HEADS)
    with pytest.raises(InputError, match=r"memory batch must equal x batch: 3 != 2"):
        mha(hidden(), memory=torch.randn(3, 7, D_MODEL))


def test_sdpa_module_head_width_mismatch() -> None:
    attention = ScaledDotProductAttention()
    query = torch.randn(BATCH, N_HEADS, LENGTH, HEAD_DIM)  # (B, H, T, Dh)
    key = torch.randn(BATCH, N_HEADS, 7, HEAD_DIM + 1)  # (B, H, S, Dh + 1)
    with pytest.raises(InputError, match=r"key axis Dh must be 8, got 9"):
        attention(query, key, key)
    with pytest.raises(InputError, match=r"query must have rank 4"):
        attention(query[0], key, key)


# ---------------------------------------------------------------------------------------------------------
# Input errors: masks and caches.
# ---------------------------------------------------------------------------------------------------------


def test_attention_mask_length_mismatch() -> None:
    mha = MultiHeadAttention(D_MODEL, N_HEADS)
    message = r"attention_mask length must equal the number of keys.*: 6 != 5"
    with pytest.raises(InputError, match=message):
        mha(hidden(), attention_mask=torch.ones(BATCH, LENGTH + 1))
    encoder = EncoderBlock(D_MODEL, N_HEADS, D_FF)
    with pytest.raises(InputError, match=message):
        encoder(hidden(), attention_mask=torch.ones(BATCH, LENGTH + 1))


def test_attention_mask_must_cover_past_and_new() -> None:
    """With a cache the mask spans P + T keys; passing one for the new tokens only is an error."""
    block = DecoderBlock(D_MODEL, N_HEADS, D_FF, cross_attention=False)
    past = torch.randn(BATCH, N_HEADS, 3, HEAD_DIM)  # (B, H, P, Dh)
    with pytest.raises(InputError, match=r"past \+ new.*: 1 != 4"):
        block(hidden(1), attention_mask=torch.ones(BATCH, 1), past_key=past, past_value=past)


def test_memory_mask_length_mismatch() -> None:
    block = DecoderBlock(D_MODEL, N_HEADS, D_FF)
    with pytest.raises(InputError, match=r"attention_mask length must equal the number of keys.*: 6 != 7"):
        block(hidden(), memory=hidden(7), memory_mask=torch.ones(BATCH, 6))


def test_attention_mask_wrong_rank() -> None:
    mha = MultiHeadAttention(D_MODEL, N_HEADS)
    with pytest.raises(InputError, match=r"attention_mask must have rank 2 .*\(B, S\)"):
        mha(hidden(), attention_mask=torch.ones(BATCH, 1, 1, LENGTH))


@pytest.mark.parametrize("given", ["past_key", "past_value"])
def test_past_key_and_value_go_together(given: str) -> None:
    mha = MultiHeadAttention(D_MODEL, N_HEADS)
    past = torch.randn(BATCH, N_HEADS, 3, HEAD_DIM)  # (B, H, P, Dh)
    with pytest.raises(InputError, match=r"past_key and past_value must be given together"):
        mha(hidden(), causal=True, **{given: past})
    block = DecoderBlock(D_MODEL, N_HEADS, D_FF, cross_attention=False)
    with pytest.raises(InputError, match=r"past_key and past_value must be given together"):
        block(hidden(), **{given: past})


def test_past_key_wrong_head_count() -> None:
    mha = MultiHeadAttention(D_MODEL, N_HEADS)
    past = torch.randn(BATCH, 2, 3, 2 * HEAD_DIM)  # (B, 2, P, 2 Dh): another head split of D
    with pytest.raises(InputError, match=r"past_key axis H must be 4, got 2"):
        mha(hidden(), causal=True, past_key=past, past_value=past)


def test_past_key_wrong_rank_and_width() -> None:
    mha = MultiHeadAttention(D_MODEL, N_HEADS)
    past = torch.randn(BATCH, N_HEADS, 3, HEAD_DIM)  # (B, H, P, Dh)
    with pytest.raises(InputError, match=r"past_key must have rank 4 .*\(B, H, P, Dh\)"):
        mha(hidden(), causal=True, past_key=past[0], past_value=past)
    wide = torch.randn(BATCH, N_HEADS, 3, HEAD_DIM + 2)  # (B, H, P, Dh + 2)
    with pytest.raises(InputError, match=r"past_key axis Dh must be 8, got 10"):
        mha(hidden(), causal=True, past_key=wide, past_value=wide)


def test_past_value_length_differs_from_past_key() -> None:
    mha = MultiHeadAttention(D_MODEL, N_HEADS)
    past_key = torch.randn(BATCH, N_HEADS, 3, HEAD_DIM)  # (B, H, P, Dh)
    past_value = torch.randn(BATCH, N_HEADS, 4, HEAD_DIM)  # (B, H, P + 1, Dh)
    with pytest.raises(InputError, match=r"past_value axis P must be 3, got 4"):
        mha(hidden(), causal=True, past_key=past_key, past_value=past_value)


# ---------------------------------------------------------------------------------------------------------
# Input errors: cross-attention and positions.
# ---------------------------------------------------------------------------------------------------------


def test_decoder_with_cross_attention_needs_memory() -> None:
    block = DecoderBlock(D_MODEL, N_HEADS, D_FF, cross_attention=True)
    with pytest.raises(InputError, match=r"cross-attends: pass the encoder output as memory="):
        block(hidden())


def test_decoder_without_cross_attention_refuses_memory() -> None:
    block = DecoderBlock(D_MODEL, N_HEADS, D_FF, cross_attention=False)
    with pytest.raises(InputError, match=r"no cross-attention; build it with cross_attention=True"):
        block(hidden(), memory=hidden(7))


def test_cross_attention_refuses_causal_and_cache() -> None:
    mha = MultiHeadAttention(D_MODEL, N_HEADS)
    with pytest.raises(InputError, match=r"cross-attention takes neither causal=True.*project_memory"):
        mha(hidden(), memory=hidden(7), causal=True)
    past = torch.randn(BATCH, N_HEADS, 3, HEAD_DIM)  # (B, H, P, Dh)
    with pytest.raises(InputError, match=r"cross-attention takes neither .*past_key/past_value"):
        mha(hidden(), memory=hidden(7), past_key=past, past_value=past)


def test_learned_positions_too_long() -> None:
    table = LearnedPositionalEmbedding(16, D_MODEL)
    message = r"position 19 is outside the learned position table of max_len=16; shorten the input"
    with pytest.raises(InputError, match=message):
        table(default_positions(BATCH, 20))
    with pytest.raises(InputError, match=r"position -1 .*max_len=16"):
        table(torch.tensor([[-1, 0, 1]]))


def test_positions_wrong_rank() -> None:
    table = LearnedPositionalEmbedding(16, D_MODEL)
    with pytest.raises(InputError, match=r"positions must have rank 2 .*\(B, T\)"):
        table(torch.arange(4))
    with pytest.raises(InputError, match=r"positions must have rank 2"):
        SinusoidalPositionalEncoding(D_MODEL)(torch.arange(4))
    mha = MultiHeadAttention(D_MODEL, N_HEADS, rotary=True)
    with pytest.raises(InputError, match=r"positions must have rank 2"):
        mha(hidden(), positions=torch.arange(LENGTH))
