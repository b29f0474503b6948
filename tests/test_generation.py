"""The PyTorch reference decoding loops: `generate` (GPT) and `generate_seq2seq` (T5).

The cached loops are held to plain loops that recompute the whole sequence every step without a cache;
batched generation (left-padded prompts of different lengths) is held to one-by-one generation; stop
tokens, token budgets, the context limit, empty inputs and seeds are checked on tiny seeded models
(D=32, H=4, F=64, two layers, 50-token vocabulary, max_len=32).
"""

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import torch

from onnxformer.builder.families import GPT, T5, GPTConfig, T5Config
from onnxformer.builder.families.config import config_from_dict
from onnxformer.builder.generation import GREEDY, Generation, generate, generate_seq2seq
from onnxformer.runtime.errors import InputError
from onnxformer.runtime.sampling import SamplingConfig

TINY: dict[str, Any] = {
    "d_model": 32,
    "n_layers": 2,
    "n_heads": 4,
    "d_ff": 64,
    "vocab_size": 50,
    "max_len": 32,
    "dropout": 0.0,
}
MAX_LEN = 32
POSITIONS = ("sinusoidal", "learned", "relative", "rotary")
MATRIX = [pytest.param(p, n, id=f"{p}-{n}") for p in POSITIONS for n in ("pre", "post")]
PROMPTS = [[5, 9, 2, 31, 7], [12], [3, 44, 8]]  # different lengths, so the batch is left-padded
SOURCES = [[5, 9, 2, 31, 7, 11, 20], [12, 4], [3, 44, 8, 8]]
NEW = 8
SAMPLED = SamplingConfig(temperature=1.0, seed=1234)


def gpt(position: str = "learned", norm_position: str = "pre") -> GPT:
    # An untied head: a random tied model mostly predicts its input token, so greedy runs repeat one token.
    torch.manual_seed(0)
    values = {**TINY, "position": position, "norm_position": norm_position, "tie_embeddings": False}
    config = config_from_dict(GPTConfig, values)
    return GPT(config).eval()


def t5(position: str = "relative", norm_position: str = "pre") -> T5:
    torch.manual_seed(0)
    values = {**TINY, "position": position, "norm_position": norm_position, "tie_embeddings": False}
    config = config_from_dict(T5Config, values)
    return T5(config).eval()


def max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    return (a - b).abs().max().item()


@contextmanager
def recorded_logits(model: GPT | T5) -> Iterator[list[torch.Tensor]]:
    """Collect the last position's logits (B, V) of every GPT forward / T5 decode call inside the block."""
    seen: list[torch.Tensor] = []
    if isinstance(model, T5):
        original = model.decode

        def decode(*args: Any, **kwargs: Any) -> Any:
            out = original(*args, **kwargs)
            seen.append(out.logits[:, -1].clone())  # (B, V)
            return out

        model.decode = decode  # type: ignore[method-assign]
        try:
            yield seen
        finally:
            del model.decode
    else:

        def hook(module: torch.nn.Module, args: Any, out: Any) -> None:
            seen.append(out.logits[:, -1].clone())  # (B, V)

        handle = model.register_forward_hook(hook)
        try:
            yield seen
        finally:
            handle.remove()


@torch.no_grad()
def greedy_without_cache(model: GPT, prompt: list[int], steps: int) -> tuple[list[int], list[torch.Tensor]]:
    """The plainest loop: run the whole sequence each step, append the argmax of the last logits.
    Returns the new tokens and each step's last logits (1, V)."""
    sequence, logits = list(prompt), []
    for _ in range(steps):
        logits.append(model(torch.tensor([sequence])).logits[:, -1])  # (1, V)
        sequence.append(int(logits[-1][0].argmax()))
    return sequence[len(prompt) :], logits


@torch.no_grad()
def greedy_seq2seq_without_cache(
    model: T5, source: list[int], steps: int
) -> tuple[list[int], list[torch.Tensor]]:
    """Encode once, then decode the whole target prefix each step (no self-attention cache)."""
    cross = model.cross_key_values(model.encode(torch.tensor([source])).hidden)
    target, logits = [model.config.decoder_start_token_id], []
    for _ in range(steps):
        logits.append(model.decode(torch.tensor([target]), cross_key_values=cross).logits[:, -1])  # (1, V)
        target.append(int(logits[-1][0].argmax()))
    return target[1:], logits


def one_by_one(
    run: Any, model: GPT | T5, inputs: list[list[int]], **options: Any
) -> tuple[list[Generation], list[list[torch.Tensor]]]:
    """Each input generated alone: the results and, per input, its steps' logits (1, V)."""
    results, logits = [], []
    for single in inputs:
        with recorded_logits(model) as seen:
            results.append(run(model, [single], **options)[0])
        logits.append(seen)
    return results, logits


def batch_versus_alone(batched: list[torch.Tensor], alone: list[list[torch.Tensor]]) -> float:
    """Largest difference between a batch's step logits (B, V) and each row's logits run alone."""
    return max(
        max_diff(batched[step][row], row_logits[step][0])
        for row, row_logits in enumerate(alone)
        for step in range(len(row_logits))
    )


# ---------------------------------------------------------------------------------------------------------
# GPT
# ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("position", "norm_position"), MATRIX)
def test_greedy_generate_equals_recompute_without_cache(position: str, norm_position: str) -> None:
    model = gpt(position, norm_position)
    diffs = []
    for prompt in PROMPTS:
        expected, expected_logits = greedy_without_cache(model, prompt, NEW)
        with recorded_logits(model) as seen:
            (result,) = generate(model, [prompt], max_new_tokens=NEW)
        assert result == Generation(expected, "length"), f"prompt {prompt}"
        assert len(seen) == NEW
        diffs.append(max(max_diff(a, b) for a, b in zip(seen, expected_logits, strict=True)))
    print(f"gpt {position}/{norm_position}: cached loop vs recompute, max logit diff {max(diffs):.1e}")
    assert max(diffs) < 1e-5


@pytest.mark.parametrize("position", POSITIONS)
@pytest.mark.parametrize("sampling", [GREEDY, SAMPLED], ids=["greedy", "sampled"])
def test_batched_generate_equals_one_by_one(position: str, sampling: SamplingConfig) -> None:
    model = gpt(position)
    with recorded_logits(model) as seen:
        batched = generate(model, PROMPTS, max_new_tokens=NEW, sampling=sampling)
    alone, alone_logits = one_by_one(generate, model, PROMPTS, max_new_tokens=NEW, sampling=sampling)
    diff = batch_versus_alone(seen, alone_logits)
    print(f"gpt {position}: batched vs alone, max logit diff {diff:.1e}; {batched}")
    assert batched == alone
    assert all(len(g.tokens) == NEW for g in batched)
    assert diff < 1e-5


def test_pad_id_does_not_change_the_result() -> None:
    model = gpt("rotary")
    with_zero = generate(model, PROMPTS, max_new_tokens=NEW, pad_id=0)
    assert with_zero == generate(model, PROMPTS, max_new_tokens=NEW, pad_id=17)


def test_stop_token_ends_a_row_and_is_excluded() -> None:
    model = gpt("learned")
    prompts = PROMPTS[:2]
    # Seeded sampling: each row draws the same numbers whether or not a stop token is set.
    free = generate(model, prompts, max_new_tokens=NEW, sampling=SAMPLED)
    # A stop token that row 0 draws after at least one other token and row 1 never draws.
    candidates = [
        (index, token)
        for index, token in enumerate(free[0].tokens)
        if index > 0 and token not in free[0].tokens[:index] and token not in free[1].tokens
    ]
    assert candidates, f"the seeded model gives no usable stop token: {free}"
    index, stop = candidates[0]

    stopped = generate(model, prompts, max_new_tokens=NEW, sampling=SAMPLED, stop_tokens={stop})
    print(f"free {free}, stop token {stop} at step {index}: {stopped}")
    assert stopped[0] == Generation(free[0].tokens[:index], "stop")
    assert stopped[1] == free[1], "the other row runs on to its budget"
    # A stop token as the very first choice gives an empty row; the loop ends once every row stopped.
    greedy_first = generate(model, prompts[:1], max_new_tokens=1)[0].tokens[0]
    with recorded_logits(model) as seen:
        first = generate(model, prompts[:1], max_new_tokens=NEW, stop_tokens=[greedy_first, 49])
    assert first == [Generation([], "stop")]
    assert len(seen) == 1, "no model call after every row has stopped"


def test_zero_and_negative_budgets() -> None:
    model = gpt()
    with recorded_logits(model) as seen:
        assert generate(model, PROMPTS, max_new_tokens=0) == [Generation([], "length")] * len(PROMPTS)
    assert seen == []
    with pytest.raises(InputError, match="max_new_tokens"):
        generate(model, PROMPTS, max_new_tokens=-1)


@pytest.mark.parametrize("position", POSITIONS)
def test_generation_stops_at_the_context(position: str) -> None:
    model = gpt(position)
    with pytest.raises(InputError, match=f"33 tokens, the model's context is {MAX_LEN}"):
        generate(model, [list(range(2, 35))], max_new_tokens=1)

    prompt = [(7 * i) % 48 + 2 for i in range(MAX_LEN - 3)]
    (result,) = generate(model, [prompt], max_new_tokens=100)
    # The model reads at most max_len tokens: the prompt and all new tokens but the last.
    assert result.finish_reason == "length"
    assert len(result.tokens) == MAX_LEN - len(prompt) + 1
    assert result.tokens == greedy_without_cache(model, prompt, len(result.tokens))[0]
    (full,) = generate(model, [prompt[:1] * MAX_LEN], max_new_tokens=5)
    assert full.finish_reason == "length" and len(full.tokens) == 1, "a full prompt leaves one token"


def test_batched_rows_each_use_their_own_context() -> None:
    """A short prompt batched with a long one may still fill its own context, as it does alone."""
    model = gpt("learned")
    short, long = [3, 4, 5], list(range(2, 2 + MAX_LEN - 4))
    alone, _ = one_by_one(generate, model, [short, long], max_new_tokens=100)
    print(f"alone: {[(len(g.tokens), g.finish_reason) for g in alone]}")
    assert [len(g.tokens) for g in alone] == [MAX_LEN - 2, 5]
    batched = generate(model, [short, long], max_new_tokens=100)
    print(f"batched: {[(len(g.tokens), g.finish_reason) for g in batched]}")
    assert batched == alone


def test_empty_inputs_raise_input_error() -> None:
    model = gpt()
    with pytest.raises(InputError, match="at least one prompt"):
        generate(model, [], max_new_tokens=3)
    with pytest.raises(InputError, match="prompt 1 is empty"):
        generate(model, [[4, 5], []], max_new_tokens=3)
    with pytest.raises(InputError, match="outside the vocabulary"):
        generate(model, [[4, 50]], max_new_tokens=3)


def test_seeds() -> None:
    model = gpt("rotary")

    def run(seed: int) -> list[int]:
        config = SamplingConfig(temperature=1.0, seed=seed)
        return generate(model, PROMPTS[:1], max_new_tokens=NEW, sampling=config)[0].tokens

    reference = run(7)
    assert run(7) == reference
    others = [run(seed) for seed in (8, 9, 10, 11)]
    print(f"seed 7: {reference}, seeds 8-11: {others}")
    assert any(tokens != reference for tokens in others), "different seeds should differ at least once"
    greedy = generate(model, PROMPTS[:1], max_new_tokens=NEW)[0].tokens
    assert any(tokens != greedy for tokens in [reference, *others]), "temperature 1 should not be greedy"


# ---------------------------------------------------------------------------------------------------------
# T5
# ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("position", "norm_position"), MATRIX)
def test_greedy_seq2seq_equals_recompute_without_cache(position: str, norm_position: str) -> None:
    model = t5(position, norm_position)
    diffs = []
    for source in SOURCES:
        expected, expected_logits = greedy_seq2seq_without_cache(model, source, NEW)
        with recorded_logits(model) as seen:
            (result,) = generate_seq2seq(model, [source], max_new_tokens=NEW)
        assert result == Generation(expected, "length"), f"source {source}"
        diffs.append(max(max_diff(a, b) for a, b in zip(seen, expected_logits, strict=True)))
    print(f"t5 {position}/{norm_position}: cached loop vs recompute, max logit diff {max(diffs):.1e}")
    assert max(diffs) < 1e-5


@pytest.mark.parametrize("position", POSITIONS)
@pytest.mark.parametrize("sampling", [GREEDY, SAMPLED], ids=["greedy", "sampled"])
def test_batched_seq2seq_equals_one_by_one(position: str, sampling: SamplingConfig) -> None:
    model = t5(position)
    with recorded_logits(model) as seen:
        batched = generate_seq2seq(model, SOURCES, max_new_tokens=NEW, sampling=sampling)
    alone, alone_logits = one_by_one(generate_seq2seq, model, SOURCES, max_new_tokens=NEW, sampling=sampling)
    diff = batch_versus_alone(seen, alone_logits)
    print(f"t5 {position}: batched (left-padded sources) vs alone, max logit diff {diff:.1e}; {batched}")
    assert batched == alone
    assert all(len(g.tokens) == NEW for g in batched)
    assert diff < 1e-5


def test_seq2seq_stop_tokens_budget_and_empty_inputs() -> None:
    model = t5()
    free = generate_seq2seq(model, SOURCES[:1], max_new_tokens=NEW, sampling=SAMPLED)[0]
    fresh = [i for i, token in enumerate(free.tokens) if i > 0 and token not in free.tokens[:i]]
    assert fresh, f"the seeded model repeats one token: {free}"
    index = fresh[0]
    stopped = generate_seq2seq(
        model, SOURCES[:1], max_new_tokens=NEW, sampling=SAMPLED, stop_tokens=[free.tokens[index]]
    )
    print(f"free {free.tokens}, stop at step {index}: {stopped}")
    assert stopped == [Generation(free.tokens[:index], "stop")]
    assert generate_seq2seq(model, SOURCES, max_new_tokens=0) == [Generation([], "length")] * 3
    with pytest.raises(InputError, match="max_new_tokens"):
        generate_seq2seq(model, SOURCES, max_new_tokens=-2)
    with pytest.raises(InputError, match="at least one source"):
        generate_seq2seq(model, [], max_new_tokens=3)
    with pytest.raises(InputError, match="source 0 is empty"):
        generate_seq2seq(model, [[]], max_new_tokens=3)


def test_seq2seq_decoder_stops_at_its_context() -> None:
    """As `generate` does, the decoder stops with "length" once it has read max_len tokens, instead of
    failing mid-way on a position past the learned table."""
    model = t5("learned")
    (result,) = generate_seq2seq(model, SOURCES[:1], max_new_tokens=MAX_LEN + 8)
    assert result.finish_reason == "length"
    assert len(result.tokens) == MAX_LEN  # the start token and all new tokens but the last
