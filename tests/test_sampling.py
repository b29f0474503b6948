"""Token choice from logits (`onnxformer.runtime.sampling`): greedy, temperature, top-k, top-p, seeds.

Runtime code, so no torch here. Distribution checks draw 20000 tokens with a fixed seed from fixed logits
and compare empirical frequencies with the intended probabilities; each prints what it measured.
"""

import math

import numpy as np
import pytest

from onnxformer.runtime.errors import ConfigError
from onnxformer.runtime.sampling import Sampler, SamplingConfig

DRAWS = 20_000
PROBS = np.array([0.5, 0.3, 0.15, 0.05])  # a distribution with known nucleus sets


def draw(config: SamplingConfig, logits: np.ndarray, n: int = DRAWS) -> np.ndarray:
    """n successive draws from one batch-1 sampler for the fixed logits (V,)."""
    sampler = Sampler(config, 1)
    return np.array([int(sampler(logits[None])[0]) for _ in range(n)])


def frequencies(samples: np.ndarray, vocab: int) -> np.ndarray:
    return np.bincount(samples, minlength=vocab) / len(samples)


def softmax(logits: np.ndarray) -> np.ndarray:
    exp = np.exp(logits - logits.max())
    return exp / exp.sum()


def random_logits(batch: int, vocab: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=(batch, vocab)).astype(np.float32)


def test_greedy_picks_the_argmax() -> None:
    logits = random_logits(5, 40)
    chosen = Sampler(SamplingConfig(temperature=0.0), 5)(logits)
    assert chosen.dtype == np.int64 and chosen.shape == (5,)
    np.testing.assert_array_equal(chosen, logits.argmax(axis=-1))
    assert SamplingConfig(temperature=0).greedy and not SamplingConfig(temperature=0.5).greedy


@pytest.mark.parametrize("temperature", [0.1, 1.0, 10.0, 1000.0])
def test_top_k_one_equals_greedy_whatever_the_temperature(temperature: float) -> None:
    logits = random_logits(4, 40, seed=1)
    sampler = Sampler(SamplingConfig(temperature=temperature, top_k=1, seed=3), 4)
    for _ in range(50):
        np.testing.assert_array_equal(sampler(logits), logits.argmax(axis=-1))


@pytest.mark.parametrize("k", [2, 3, 7])
def test_top_k_restricts_samples_to_the_k_best(k: int) -> None:
    logits = random_logits(1, 30, seed=2)[0]
    best = set(np.argsort(-logits)[:k].tolist())
    # A high temperature makes every kept token likely, so all k show up in a few thousand draws.
    samples = draw(SamplingConfig(temperature=5.0, top_k=k, seed=0), logits, n=3000)
    assert set(samples.tolist()) == best


def test_top_k_larger_than_the_vocabulary_keeps_everything() -> None:
    logits = np.zeros(6)
    samples = draw(SamplingConfig(top_k=100, seed=0), logits, n=2000)
    assert set(samples.tolist()) == set(range(6))


@pytest.mark.parametrize(
    ("top_p", "kept"),
    [
        (0.3, {0}),
        (0.5, {0}),
        (0.79, {0, 1}),
        (0.81, {0, 1, 2}),
        (0.95 + 1e-9, {0, 1, 2, 3}),
        (1.0, {0, 1, 2, 3}),
    ],
)
def test_top_p_keeps_the_smallest_set_reaching_p(top_p: float, kept: set[int]) -> None:
    """p sits off the cumulative sums 0.5, 0.8, 0.95 except at 0.5 (exact in floating point): log(0.3) is
    rounded, and the exact cumulative of the rounded logits is 0.7999999999999999882 < 0.8, so p = 0.8
    itself rightly keeps three tokens."""
    logits = np.log(PROBS)
    samples = draw(SamplingConfig(top_p=top_p, seed=0), logits, n=5000)
    assert set(samples.tolist()) == kept
    # Within the nucleus the draws follow the renormalised probabilities.
    expected = np.zeros(len(PROBS))
    expected[sorted(kept)] = PROBS[sorted(kept)] / PROBS[sorted(kept)].sum()
    observed = frequencies(samples, len(PROBS))
    print(f"top_p={top_p}: observed {np.round(observed, 3)}, expected {np.round(expected, 3)}")
    assert np.abs(observed - expected).max() < 0.03


def test_top_k_and_top_p_combine() -> None:
    logits = np.log(PROBS)
    # top_k=2 renormalises to [0.625, 0.375]; p=0.6 then keeps only the first.
    samples = draw(SamplingConfig(top_k=2, top_p=0.6, seed=0), logits, n=2000)
    assert set(samples.tolist()) == {0}
    samples = draw(SamplingConfig(top_k=3, top_p=0.9, seed=0), logits, n=2000)
    assert set(samples.tolist()) == {0, 1, 2}


def test_temperature_one_matches_softmax() -> None:
    logits = np.array([2.0, 1.0, 0.5, 0.0, -1.0, -3.0])
    observed = frequencies(draw(SamplingConfig(temperature=1.0, seed=11), logits), len(logits))
    expected = softmax(logits)
    gap = np.abs(observed - expected).max()
    print(f"T=1: observed {np.round(observed, 4)}, softmax {np.round(expected, 4)}, max gap {gap:.4f}")
    assert gap < 0.02


def test_temperature_scales_the_logits() -> None:
    logits = np.array([2.0, 1.0, 0.0, -1.0])
    observed = frequencies(draw(SamplingConfig(temperature=2.0, seed=5), logits), len(logits))
    gap = np.abs(observed - softmax(logits / 2.0)).max()
    print(f"T=2: observed {np.round(observed, 4)}, max gap to softmax(logits / 2) {gap:.4f}")
    assert gap < 0.02
    assert np.abs(observed - softmax(logits)).max() > 0.05, "T=2 must differ from T=1"


def test_high_temperature_flattens_low_sharpens() -> None:
    logits = np.array([2.0, 1.0, 0.0, -1.0])
    hot = frequencies(draw(SamplingConfig(temperature=1000.0, seed=5), logits), len(logits))
    gap = np.abs(hot - 0.25).max()
    print(f"T=1000: observed {np.round(hot, 4)}, max gap to uniform {gap:.4f}")
    assert gap < 0.02

    cold = frequencies(draw(SamplingConfig(temperature=0.05, seed=5), logits, n=5000), len(logits))
    print(f"T=0.05: observed {np.round(cold, 4)}")
    assert cold[0] == 1.0


def test_ties_break_to_the_lower_id() -> None:
    logits = np.array([[0.0, 3.0, 3.0, 1.0]])
    assert Sampler(SamplingConfig(temperature=0.0), 1)(logits)[0] == 1
    assert Sampler(SamplingConfig(top_k=1, seed=0), 1)(logits)[0] == 1


def test_seeded_sampling_is_deterministic() -> None:
    logits = random_logits(2, 30, seed=4)

    def run(seed: int | None) -> list[list[int]]:
        sampler = Sampler(SamplingConfig(temperature=1.0, seed=seed), 2)
        return [sampler(logits).tolist() for _ in range(40)]

    assert run(42) == run(42)
    assert run(42) != run(43)
    assert run(None) != run(None), "seed=None draws fresh entropy"


def test_each_row_of_a_batch_draws_what_it_would_draw_alone() -> None:
    config = SamplingConfig(temperature=1.3, top_k=10, top_p=0.9, seed=9)
    batched = Sampler(config, 3)
    alone = [Sampler(config, 1) for _ in range(3)]
    for step in range(60):
        logits = random_logits(3, 25, seed=100 + step)
        together = batched(logits)
        separately = [int(sampler(logits[row : row + 1])[0]) for row, sampler in enumerate(alone)]
        assert together.tolist() == separately, f"step {step}"


INVALID = [
    pytest.param({"temperature": -1.0}, "temperature", id="temperature-negative"),
    pytest.param({"temperature": math.nan}, "temperature", id="temperature-nan"),
    pytest.param({"temperature": math.inf}, "temperature", id="temperature-inf"),
    pytest.param({"temperature": True}, "temperature", id="temperature-bool"),
    pytest.param({"temperature": "1"}, "temperature", id="temperature-str"),
    pytest.param({"top_k": -1}, "top_k", id="top_k-negative"),
    pytest.param({"top_k": 2.5}, "top_k", id="top_k-float"),
    pytest.param({"top_k": True}, "top_k", id="top_k-bool"),
    pytest.param({"top_p": 0}, "top_p", id="top_p-zero"),
    pytest.param({"top_p": 1.5}, "top_p", id="top_p-above-one"),
    pytest.param({"top_p": -0.1}, "top_p", id="top_p-negative"),
    pytest.param({"top_p": math.nan}, "top_p", id="top_p-nan"),
    pytest.param({"seed": -1}, "seed", id="seed-negative"),
    pytest.param({"seed": "x"}, "seed", id="seed-str"),
    pytest.param({"seed": 1.5}, "seed", id="seed-float"),
]


@pytest.mark.parametrize(("change", "parameter"), INVALID)
def test_invalid_configs_raise_config_error_naming_the_parameter(change: dict, parameter: str) -> None:
    with pytest.raises(ConfigError, match=rf"^{parameter} must be"):
        SamplingConfig(**change)


def test_valid_edge_configs() -> None:
    SamplingConfig(temperature=0, top_k=0, top_p=1, seed=0)
    SamplingConfig(temperature=0.5, top_k=3, top_p=1e-6, seed=None)
