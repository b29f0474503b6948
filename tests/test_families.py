"""Invariants of the model families (GPT, BERT, T5) over a shared matrix of tiny configurations.

Every family is built with every position kind and both norm positions at D=32, H=4, F=64, two layers,
a 50-token vocabulary and max_len=32, so the whole file runs in a few seconds. The matrix drives shapes,
causality, cached decode equals full recompute, padding invariance, tied weights and input errors;
presets, config validation and parameter counts are checked on the documented sizes.

Shape legend: B batch, T query length, S key/source length, P past length, D model width, H heads,
Dh head width, V vocab. Every parity assertion prints the largest difference it saw (`pytest -s`).
"""

import dataclasses
import importlib
from typing import Any

import pytest
import torch
from torch import nn

from onnxformer.builder.families import (
    BERT,
    FAMILIES,
    GPT,
    T5,
    BERTConfig,
    GPTConfig,
    T5Config,
    mean_pool,
)
from onnxformer.builder.families.config import config_from_dict
from onnxformer.builder.layers.stacks import DecoderStack, EncoderStack
from onnxformer.runtime.errors import ConfigError, InputError

TINY: dict[str, Any] = {
    "d_model": 32,
    "n_layers": 2,
    "n_heads": 4,
    "d_ff": 64,
    "vocab_size": 50,
    "max_len": 32,
    "dropout": 0.0,
}
D, H, V, N_LAYERS, MAX_LEN = 32, 4, 50, 2, 32
DH = D // H
POSITIONS = ("sinusoidal", "learned", "relative", "rotary")
NORMS = ("pre", "post")
MATRIX = [pytest.param(p, n, id=f"{p}-{n}") for p in POSITIONS for n in NORMS]
EXACT = 1e-6  # same computation, later tokens or padding contribute exact zeros
CLOSE = 1e-5  # different shapes or summation orders


def build(family: str, position: str, norm_position: str = "pre", **overrides: Any) -> nn.Module:
    """A seeded tiny model of `family` in eval mode."""
    model_cls, config_cls, _ = FAMILIES[family]
    torch.manual_seed(0)
    config = config_from_dict(
        config_cls, {**TINY, "position": position, "norm_position": norm_position, **overrides}
    )
    return model_cls(config).eval()


def tokens(*shape: int, seed: int = 1) -> torch.Tensor:
    """Random ids (shape) in [2, V), so 0 (padding) and 1 (T5's start token) stay distinct."""
    return torch.randint(2, V, shape, generator=torch.Generator().manual_seed(seed))


def max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    return (a - b).abs().max().item()


def check_attentions(attentions: tuple[torch.Tensor, ...], shape: tuple[int, ...], label: str) -> None:
    """One (B, H, T, S) tensor per layer whose rows are probability distributions."""
    assert len(attentions) == N_LAYERS, f"{label}: {len(attentions)} attention tensors"
    for weights in attentions:
        assert weights.shape == shape, f"{label}: {tuple(weights.shape)} != {shape}"
        row_sums = weights.sum(dim=-1)  # (B, H, T)
        assert max_diff(row_sums, torch.ones_like(row_sums)) < 1e-5, f"{label}: rows do not sum to 1"


# ---------------------------------------------------------------------------------------------------------
# Shapes
# ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("position", POSITIONS)
@torch.no_grad()
def test_gpt_output_shapes(position: str) -> None:
    model = build("gpt", position)
    batch, length, new = 3, 7, 2
    ids = tokens(batch, length)
    out = model(ids)
    assert out.logits.shape == (batch, length, V)
    assert out.hidden.shape == (batch, length, D)
    assert out.attentions == ()
    assert len(out.present) == N_LAYERS
    for key, value in out.present:
        assert key.shape == value.shape == (batch, H, length, DH)

    weighted = model(ids, need_weights=True)
    check_attentions(weighted.attentions, (batch, H, length, length), f"gpt/{position}")
    assert max_diff(weighted.logits, out.logits) == 0.0, "need_weights must not change the logits"

    step = model(tokens(batch, new, seed=2), past_key_values=out.present, need_weights=True)
    assert step.logits.shape == (batch, new, V)
    for key, value in step.present:
        assert key.shape == value.shape == (batch, H, length + new, DH)
    check_attentions(step.attentions, (batch, H, new, length + new), f"gpt/{position} cached")


@pytest.mark.parametrize("position", POSITIONS)
@torch.no_grad()
def test_bert_output_shapes(position: str) -> None:
    model = build("bert", position)
    batch, length = 3, 7
    ids = tokens(batch, length)
    out = model(ids, token_type_ids=torch.zeros_like(ids))
    assert out.hidden.shape == (batch, length, D)
    assert out.sentence_embedding.shape == (batch, D)
    assert out.mlm_logits.shape == (batch, length, V)
    assert out.class_logits.shape == (batch, model.config.num_labels)
    assert out.attentions == ()
    weighted = model(ids, need_weights=True)
    check_attentions(weighted.attentions, (batch, H, length, length), f"bert/{position}")


@pytest.mark.parametrize("position", POSITIONS)
@torch.no_grad()
def test_t5_output_shapes(position: str) -> None:
    model = build("t5", position)
    batch, source, target = 3, 9, 5
    src, tgt = tokens(batch, source), tokens(batch, target, seed=2)
    hidden, attentions = model.encode(src)
    assert hidden.shape == (batch, source, D)
    assert attentions == ()
    _, encoder_weights = model.encode(src, need_weights=True)
    check_attentions(encoder_weights, (batch, H, source, source), f"t5/{position} encoder")

    cross = model.cross_key_values(hidden)
    assert len(cross) == N_LAYERS
    for key, value in cross:
        assert key.shape == value.shape == (batch, H, source, DH)

    out = model.decode(tgt, cross_key_values=cross)
    assert out.logits.shape == (batch, target, V)
    assert out.hidden.shape == (batch, target, D)
    assert out.self_attentions == () and out.cross_attentions == ()
    for key, value in out.present:
        assert key.shape == value.shape == (batch, H, target, DH)

    weighted = model.decode(tgt, cross_key_values=cross, need_weights=True)
    check_attentions(weighted.self_attentions, (batch, H, target, target), f"t5/{position} self")
    check_attentions(weighted.cross_attentions, (batch, H, target, source), f"t5/{position} cross")

    step = model.decode(tgt[:, :1], cross_key_values=cross, past_key_values=out.present, need_weights=True)
    for key, _ in step.present:
        assert key.shape == (batch, H, target + 1, DH)
    check_attentions(step.self_attentions, (batch, H, 1, target + 1), f"t5/{position} cached self")
    check_attentions(step.cross_attentions, (batch, H, 1, source), f"t5/{position} cached cross")

    forward = model(src, tgt)
    print(f"t5/{position}: forward vs encode+decode {max_diff(forward.logits, out.logits):.3e}")
    assert max_diff(forward.logits, out.logits) < EXACT


# ---------------------------------------------------------------------------------------------------------
# Presets and config validation
# ---------------------------------------------------------------------------------------------------------

PRESET_SIZES = {
    "tiny": {"d_model": 128, "n_layers": 2, "n_heads": 4, "d_ff": 256},
    "small": {"d_model": 384, "n_layers": 6, "n_heads": 12, "d_ff": 1536},
}


@pytest.mark.parametrize("family", sorted(FAMILIES))
@pytest.mark.parametrize("preset", sorted(PRESET_SIZES))
def test_presets_build_with_documented_sizes(family: str, preset: str) -> None:
    model_cls, config_cls, _ = FAMILIES[family]
    config = config_cls.preset(preset)
    for name, expected in PRESET_SIZES[preset].items():
        assert getattr(config, name) == expected, f"{family}/{preset}: {name}={getattr(config, name)}"
    model = model_cls(config)
    stacks = [m for m in model.modules() if isinstance(m, EncoderStack | DecoderStack)]
    assert stacks, f"{family} has no encoder or decoder stack"
    for stack in stacks:
        assert len(stack.blocks) == config.n_layers
    assert model.embeddings.token.weight.shape == (config.vocab_size, config.d_model)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_preset_overrides_apply_and_validate(family: str) -> None:
    config_cls = FAMILIES[family].config
    config = config_cls.preset("tiny", position="rotary", dropout=0.0)
    assert config.position == "rotary" and config.dropout == 0.0 and config.d_model == 128
    with pytest.raises(ConfigError, match="n_heads"):
        config_cls.preset("tiny", n_heads=5)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_unknown_preset_and_field_are_named(family: str) -> None:
    config_cls = FAMILIES[family].config
    with pytest.raises(ConfigError, match="unknown preset 'huge'") as error:
        config_cls.preset("huge")
    assert "tiny" in str(error.value) and "small" in str(error.value), "the message lists the choices"
    with pytest.raises(ConfigError, match="d_modle") as error:
        config_cls.preset("tiny", d_modle=64)
    assert "d_model" in str(error.value), "the message lists the known fields"


BAD_VALUES = [
    pytest.param({"n_heads": 5}, r"d_model=32 is not divisible by n_heads=5", id="heads"),
    pytest.param({"position": "alibi"}, r"position must be one of .*'alibi'", id="alibi"),
    pytest.param({"dropout": 1.0}, r"dropout must be in \[0, 1\)", id="dropout-1"),
    pytest.param({"dropout": -0.1}, r"dropout", id="dropout-negative"),
    pytest.param({"norm_position": "middle"}, r"residual.position must be one of", id="norm"),
    pytest.param({"activation": "swish"}, r"ffn.activation must be one of", id="activation"),
    pytest.param({"d_model": 0}, r"d_model must be > 0", id="d_model-0"),
    pytest.param({"vocab_size": 50.0}, r"vocab_size must be an integer", id="vocab-float"),
    pytest.param({"n_layers": True}, r"n_layers must be an integer", id="layers-bool"),
    pytest.param(
        {"d_model": 12, "n_heads": 4, "position": "rotary"}, r"rotary .*even head width", id="rotary-odd"
    ),
]


@pytest.mark.parametrize("family", sorted(FAMILIES))
@pytest.mark.parametrize(("change", "message"), BAD_VALUES)
def test_bad_values_raise_config_error(family: str, change: dict[str, Any], message: str) -> None:
    config_cls = FAMILIES[family].config
    with pytest.raises(ConfigError, match=message):
        config_from_dict(config_cls, {**TINY, **change})


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_configs_are_frozen(family: str) -> None:
    config = FAMILIES[family].config(**TINY)
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.d_model = 64  # type: ignore[misc]
    assert config.d_model == 32


# ---------------------------------------------------------------------------------------------------------
# Causality
# ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("position", "norm_position"), MATRIX)
@pytest.mark.parametrize("t", [0, 4, 8])
@torch.no_grad()
def test_gpt_is_causal(position: str, norm_position: str, t: int) -> None:
    model = build("gpt", position, norm_position)
    ids = tokens(2, 10)
    changed = ids.clone()
    changed[:, t + 1 :] = (ids[:, t + 1 :] + 7) % V
    before, after = model(ids).logits, model(changed).logits  # (B, T, V) each
    kept, last = max_diff(before[:, : t + 1], after[:, : t + 1]), max_diff(before[:, -1], after[:, -1])
    print(f"gpt {position}/{norm_position} t={t}: at <= t {kept:.3e}, at the last {last:.3e}")
    assert kept < EXACT
    assert last > 1e-4, "changing later tokens must change the last position's logits"


@pytest.mark.parametrize(("position", "norm_position"), MATRIX)
@torch.no_grad()
def test_t5_decoder_is_causal_and_bert_is_not(position: str, norm_position: str) -> None:
    t = 3
    t5 = build("t5", position, norm_position)
    cross = t5.cross_key_values(t5.encode(tokens(2, 6)).hidden)
    ids = tokens(2, 8, seed=2)
    changed = ids.clone()
    changed[:, t + 1 :] = (ids[:, t + 1 :] + 7) % V
    before = t5.decode(ids, cross_key_values=cross).logits  # (B, T, V)
    after = t5.decode(changed, cross_key_values=cross).logits  # (B, T, V)
    kept, last = max_diff(before[:, : t + 1], after[:, : t + 1]), max_diff(before[:, -1], after[:, -1])
    print(f"t5 decoder {position}/{norm_position}: at <= t {kept:.3e}, at the last {last:.3e}")
    assert kept < EXACT
    assert last > 1e-5

    bert = build("bert", position, norm_position)
    first = max_diff(bert(ids).hidden[:, 0], bert(changed).hidden[:, 0])
    print(f"bert {position}/{norm_position}: first position moved by {first:.3e}")
    assert first > 1e-4, "BERT is bidirectional: later tokens change the first position"


# ---------------------------------------------------------------------------------------------------------
# Cached decode equals full recompute
# ---------------------------------------------------------------------------------------------------------

PROMPT, STEPS = 5, 6


def left_padded_mask(batch: int, length: int, pads: list[int]) -> torch.Tensor:
    mask = torch.ones(batch, length, dtype=torch.long)  # (B, T)
    for row, pad in enumerate(pads):
        mask[row, :pad] = 0
    return mask


@pytest.mark.parametrize(("position", "norm_position"), MATRIX)
@torch.no_grad()
def test_gpt_cached_decode_equals_full_recompute(position: str, norm_position: str) -> None:
    model = build("gpt", position, norm_position)
    total = PROMPT + STEPS
    ids = tokens(2, total)
    mask = left_padded_mask(2, total, [0, 2])  # row 1 is left-padded by two
    full = model(ids, attention_mask=mask).logits  # (B, P + T, V)

    out = model(ids[:, :PROMPT], attention_mask=mask[:, :PROMPT])
    diffs = [max_diff(out.logits[:, -1], full[:, PROMPT - 1])]
    for step in range(PROMPT, total):
        out = model(ids[:, step : step + 1], attention_mask=mask[:, : step + 1], past_key_values=out.present)
        assert out.present[0][0].shape[2] == step + 1
        diffs.append(max_diff(out.logits[:, 0], full[:, step]))
    print(f"gpt {position}/{norm_position}: cached vs full per step {[f'{d:.1e}' for d in diffs]}")
    assert max(diffs) < CLOSE


@pytest.mark.parametrize(("position", "norm_position"), MATRIX)
@torch.no_grad()
def test_t5_cached_decode_equals_full_recompute(position: str, norm_position: str) -> None:
    model = build("t5", position, norm_position)
    source = tokens(2, 7)
    source_mask = torch.ones_like(source)
    source_mask[1, 5:] = 0  # row 1 has a padded source
    cross = model.cross_key_values(model.encode(source, attention_mask=source_mask).hidden)
    target = tokens(2, STEPS + 1, seed=2)
    target[:, 0] = model.config.decoder_start_token_id
    full = model.decode(target, cross_key_values=cross, encoder_attention_mask=source_mask).logits

    diffs, past = [], None
    for step in range(target.shape[1]):
        out = model.decode(
            target[:, step : step + 1],
            cross_key_values=cross,
            encoder_attention_mask=source_mask,
            attention_mask=torch.ones(2, step + 1, dtype=torch.long),
            past_key_values=past,
        )
        past = out.present
        diffs.append(max_diff(out.logits[:, 0], full[:, step]))
    print(f"t5 {position}/{norm_position}: cached vs full per step {[f'{d:.1e}' for d in diffs]}")
    assert max(diffs) < CLOSE


# ---------------------------------------------------------------------------------------------------------
# Padding invariance
# ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("position", "norm_position"), MATRIX)
@torch.no_grad()
def test_bert_right_padding_invariance(position: str, norm_position: str) -> None:
    model = build("bert", position, norm_position)
    real, length = 6, 10
    ids = tokens(2, length)
    mask = torch.ones_like(ids)
    mask[0, real:] = 0
    padded = model(ids, attention_mask=mask)
    other = ids.clone()
    other[0, real:] = (ids[0, real:] + 11) % V  # what the padding holds must not matter
    padded_other = model(other, attention_mask=mask)
    alone = model(ids[:1, :real])
    full_row = model(ids[1:])

    diffs = {
        "hidden": max_diff(padded.hidden[0, :real], alone.hidden[0]),
        "mlm_logits": max_diff(padded.mlm_logits[0, :real], alone.mlm_logits[0]),
        "sentence_embedding": max_diff(padded.sentence_embedding[0], alone.sentence_embedding[0]),
        "class_logits": max_diff(padded.class_logits[0], alone.class_logits[0]),
        "padding content": max_diff(padded.hidden[0, :real], padded_other.hidden[0, :real]),
        "unpadded row": max_diff(padded.hidden[1], full_row.hidden[0]),
    }
    print(f"bert {position}/{norm_position}: " + ", ".join(f"{k} {v:.1e}" for k, v in diffs.items()))
    assert max(diffs.values()) < CLOSE


@pytest.mark.parametrize(("position", "norm_position"), MATRIX)
@torch.no_grad()
def test_gpt_left_padding_invariance(position: str, norm_position: str) -> None:
    model = build("gpt", position, norm_position)
    real, length = 6, 10
    ids = tokens(2, length)
    mask = left_padded_mask(2, length, [length - real, 0])
    padded = model(ids, attention_mask=mask).logits  # (B, T, V)
    alone = model(ids[:1, length - real :]).logits  # (1, T_real, V)
    full_row = model(ids[1:]).logits  # (1, T, V)
    diff_padded = max_diff(padded[0, length - real :], alone[0])
    diff_full = max_diff(padded[1], full_row[0])
    print(f"gpt {position}/{norm_position}: padded row {diff_padded:.1e}, unpadded row {diff_full:.1e}")
    assert not torch.isnan(padded).any()
    assert diff_padded < CLOSE and diff_full < CLOSE


@pytest.mark.parametrize(("position", "norm_position"), MATRIX)
@pytest.mark.parametrize("side", ["left", "right"])
@torch.no_grad()
def test_t5_encoder_padding_invariance(position: str, norm_position: str, side: str) -> None:
    model = build("t5", position, norm_position)
    real, length = 5, 8
    source = tokens(2, length)
    mask = torch.ones_like(source)
    kept = slice(length - real, length) if side == "left" else slice(0, real)
    mask[0] = 0
    mask[0, kept] = 1
    padded = model.encode(source, attention_mask=mask).hidden  # (B, S, D)
    alone = model.encode(source[:1, kept]).hidden  # (1, S_real, D)
    encoder_diff = max_diff(padded[0, kept], alone[0])

    # The decoder, attending to the padded memory through the mask, sees what it sees for the row alone.
    target = tokens(2, 4, seed=2)
    decoded = model.decode(
        target,
        cross_key_values=model.cross_key_values(padded),
        encoder_attention_mask=mask,
    ).logits
    decoded_alone = model.decode(target[:1], cross_key_values=model.cross_key_values(alone)).logits
    decoder_diff = max_diff(decoded[0], decoded_alone[0])
    print(f"t5 {position}/{norm_position} {side}: encoder {encoder_diff:.1e}, decoder {decoder_diff:.1e}")
    assert encoder_diff < CLOSE and decoder_diff < CLOSE


# ---------------------------------------------------------------------------------------------------------
# BERT pooling and tied weights
# ---------------------------------------------------------------------------------------------------------


@torch.no_grad()
def test_bert_sentence_embedding_is_the_mean_of_real_tokens() -> None:
    model = build("bert", "learned", "post")
    ids = tokens(3, 9)
    mask = torch.ones_like(ids)
    mask[0, 4:] = 0
    mask[2, 7:] = 0
    out = model(ids, attention_mask=mask)
    for row, real in enumerate([4, 9, 7]):
        expected = out.hidden[row, :real].mean(dim=0)  # (D,)
        diff = max_diff(out.sentence_embedding[row], expected)
        assert diff < EXACT, f"row {row}: {diff:.3e}"
    # Padded positions' hidden states are not zero, so a plain mean over all positions would differ.
    assert max_diff(out.sentence_embedding[0], out.hidden[0].mean(dim=0)) > 1e-4
    assert max_diff(mean_pool(out.hidden, mask), out.sentence_embedding) == 0.0


def test_tied_weights() -> None:
    gpt = build("gpt", "learned")
    assert gpt.lm_head.weight is gpt.embeddings.token.weight
    untied = build("gpt", "learned", tie_embeddings=False)
    assert untied.lm_head.weight is not untied.embeddings.token.weight
    bert = build("bert", "learned")
    assert bert.mlm_decoder.weight is bert.embeddings.token.weight
    t5 = build("t5", "relative")
    assert t5.lm_head.weight is t5.embeddings.token.weight

    # Tied means one parameter: a change to the embedding shows in the head's output.
    ids = tokens(1, 4)
    with torch.no_grad():
        before = gpt(ids).logits
        gpt.embeddings.token.weight[7] += torch.randn(D)
        after = gpt(ids).logits
    assert max_diff(before[..., 7], after[..., 7]) > 1e-3


# ---------------------------------------------------------------------------------------------------------
# Input errors and lengths
# ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("bad", [V, -1, 1000])
@torch.no_grad()
def test_out_of_vocabulary_ids_raise_input_error(bad: int) -> None:
    ids = tokens(1, 5)
    ids[0, 2] = bad
    gpt, bert, t5 = build("gpt", "learned"), build("bert", "learned"), build("t5", "relative")
    with pytest.raises(InputError, match=f"token id {bad} is outside the vocabulary"):
        gpt(ids)
    with pytest.raises(InputError, match="outside the vocabulary"):
        bert(ids)
    with pytest.raises(InputError, match="outside the vocabulary"):
        t5.encode(ids)
    cross = t5.cross_key_values(t5.encode(tokens(1, 5)).hidden)
    with pytest.raises(InputError, match="outside the vocabulary"):
        t5.decode(ids, cross_key_values=cross)


@pytest.mark.parametrize(
    "segments", [[0, 1, 2, 0, 0], [0, -1, 0, 0, 0], [0, 0, 1, 1]], ids=["2", "-1", "short"]
)
@torch.no_grad()
def test_bad_segment_ids_raise_input_error(segments: list[int]) -> None:
    """BERT's token_type_ids index a table of type_vocab_size=2 rows, like input_ids index the vocabulary."""
    model = build("bert", "learned")
    model(tokens(1, 5), token_type_ids=torch.tensor([[0, 1, 1, 0, 1]]))  # in range: fine
    with pytest.raises(InputError, match="token_type_ids"):
        model(tokens(1, 5), token_type_ids=torch.tensor([segments]))


@pytest.mark.parametrize("family", sorted(FAMILIES))
@torch.no_grad()
def test_learned_positions_refuse_inputs_longer_than_max_len(family: str) -> None:
    model = build(family, "learned")
    run = model.encode if family == "t5" else model
    assert run(tokens(1, MAX_LEN)) is not None  # exactly max_len fits
    with pytest.raises(InputError, match="max_len=32"):
        run(tokens(1, MAX_LEN + 1))


@torch.no_grad()
def test_learned_positions_refuse_a_cache_past_max_len() -> None:
    model = build("gpt", "learned")
    out = model(tokens(1, MAX_LEN))
    with pytest.raises(InputError, match="max_len"):
        model(tokens(1, 1), past_key_values=out.present)


@pytest.mark.parametrize("family", sorted(FAMILIES))
@pytest.mark.parametrize("position", ["sinusoidal", "relative", "rotary"])
@torch.no_grad()
def test_other_positions_accept_twice_max_len(family: str, position: str) -> None:
    model = build(family, position)
    ids = tokens(2, 2 * MAX_LEN)
    if family == "t5":
        hidden = model.encode(ids).hidden
        out = model.decode(ids, cross_key_values=model.cross_key_values(hidden)).logits
    elif family == "gpt":
        out = model(ids).logits
    else:
        out = model(ids).hidden
    assert out.shape[:2] == (2, 2 * MAX_LEN)
    assert torch.isfinite(out).all()


# ---------------------------------------------------------------------------------------------------------
# Parameter counts
# ---------------------------------------------------------------------------------------------------------


def expected_parameters(family: str, config: Any) -> int:
    """Count from the architecture: embeddings, blocks, norms and heads (tied heads add nothing)."""
    d, f, v = config.d_model, config.d_ff, config.vocab_size
    attention = 4 * (d * d + d)
    norm = 2 * d
    ffn = d * f + f + f * d + d
    positions = config.max_len * d if config.position == "learned" else 0
    final_norm = norm if config.block.residual.position == "pre" else 0
    if family == "gpt":
        relative = 32 * config.n_heads if config.position == "relative" else 0
        head = 0 if config.tie_embeddings else v * d
        return (
            v * d + positions + relative + config.n_layers * (attention + 2 * norm + ffn) + final_norm + head
        )
    if family == "bert":
        relative = 32 * config.n_heads if config.position == "relative" else 0
        embeddings = v * d + positions + config.type_vocab_size * d + norm
        blocks = config.n_layers * (attention + 2 * norm + ffn)
        mlm = (d * d + d) + norm + v  # transform, its norm, the decoder bias (weight tied)
        pooler_and_classifier = (d * d + d) + (d * config.num_labels + config.num_labels)
        return embeddings + relative + blocks + final_norm + mlm + pooler_and_classifier
    relative = 2 * config.num_buckets * config.n_heads if config.position == "relative" else 0
    encoder = config.n_layers * (attention + 2 * norm + ffn)
    decoder = config.n_layers * (2 * attention + 3 * norm + ffn)
    head = 0 if config.tie_embeddings else v * d
    return v * d + positions + relative + encoder + decoder + 2 * final_norm + head


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_tiny_preset_parameter_counts(family: str) -> None:
    model_cls, config_cls, _ = FAMILIES[family]
    config = config_cls.preset("tiny")
    count = sum(p.numel() for p in model_cls(config).parameters())  # shared parameters counted once
    expected = expected_parameters(family, config)
    print(f"{family} tiny ({config.position}, {config.block.residual.position}-LN): {count:,} parameters")
    assert count == expected, f"{family}: {count:,} parameters, the architecture gives {expected:,}"
    assert 200_000 < count < 2_000_000, "a tiny preset should stay well under two million parameters"


@pytest.mark.parametrize(
    ("family", "position", "norm_position"),
    [("gpt", "relative", "post"), ("bert", "relative", "pre"), ("t5", "learned", "post")],
)
def test_parameter_counts_follow_the_options(family: str, position: str, norm_position: str) -> None:
    model = build(family, position, norm_position)
    count = sum(p.numel() for p in model.parameters())
    assert count == expected_parameters(family, model.config), f"{family}: {count:,}"
    if family != "bert":
        untied = build(family, position, norm_position, tie_embeddings=False)
        extra = sum(p.numel() for p in untied.parameters()) - count
        assert extra == V * D, f"untying the head should add V * D = {V * D}, added {extra}"


def test_families_table() -> None:
    assert FAMILIES["gpt"].model is GPT and FAMILIES["gpt"].config is GPTConfig
    assert FAMILIES["bert"].model is BERT and FAMILIES["bert"].config is BERTConfig
    assert FAMILIES["t5"].model is T5 and FAMILIES["t5"].config is T5Config
    for name, family in FAMILIES.items():
        extra = {"llama-tiny", "llama-small"} if name == "gpt" else set()
        assert set(family.presets) == {"tiny", "small"} | extra


def _legacy_name(family: str, key: str) -> str:
    """The checkpoint key this parameter had before the stacks (what older checkpoints hold)."""
    renames = importlib.import_module(FAMILIES[family].model.__module__).LEGACY_KEYS
    for old, new in renames.items():
        if key.startswith(new):
            return old + key[len(new) :]
    return key


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_checkpoints_with_pre_stack_keys_still_load(family: str) -> None:
    """Parameter names are a contract: keys written before the stacks existed map to the new names."""
    source = build(family, "relative")
    old = {_legacy_name(family, key): value for key, value in source.state_dict().items()}
    assert set(old) != set(source.state_dict()), "the legacy names should differ from today's"
    target = build(family, "relative")
    missing, unexpected = target.load_state_dict(old, strict=False)
    assert not unexpected and not missing, (missing, unexpected)
    for key, value in source.state_dict().items():
        assert torch.equal(target.state_dict()[key], value), key
