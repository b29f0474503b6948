"""Resuming keeps the best weights: a run whose best evaluation came before the interruption, with only
worse ones after it, ends with the same model.safetensors as the uninterrupted run."""

import random
from pathlib import Path

import pytest
import torch

from onnxformer.builder.training import TrainOptions, load_checkpoint, train

TINY = {"d_model": 32, "n_layers": 1, "n_heads": 2, "d_ff": 64, "max_len": 24, "dropout": 0.0}
WORDS = ("apple", "river", "stone", "cloud", "lamp", "tiger", "window", "garden", "silver", "music")


def _options(corpus: Path) -> TrainOptions:
    # Random words and a high rate: the held-out loss is best at step 8 and worse at every later evaluation.
    return TrainOptions(
        "gpt",
        corpus=str(corpus),
        steps=20,
        batch_size=8,
        eval_every=2,
        save_every=100,
        learning_rate=3e-2,
        patience=0,
        quality_samples=0,
        model_overrides=TINY,
    )


def test_resume_after_the_best_step_keeps_the_best_weights(tmp_path: Path) -> None:
    rng = random.Random(0)
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(" ".join(rng.choice(WORDS) for _ in range(6)) for _ in range(40)) + "\n")
    whole = train(tmp_path / "whole", _options(corpus))
    interrupted = train(tmp_path / "interrupted", _options(corpus), stop_after=12)
    # The case under test: the best step lies before the interruption and nothing beats it afterwards.
    assert interrupted.best["step"] < interrupted.step < whole.step
    assert whole.best == interrupted.best
    resumed = train(tmp_path / "interrupted", _options(corpus), resume=True)
    assert resumed.best == whole.best

    expected = load_checkpoint(whole.out).model.state_dict()
    saved = load_checkpoint(resumed.out, with_training_state=True)
    kept, latest = saved.model.state_dict(), saved.training_state["model"]
    assert any(not torch.equal(kept[k], latest[k]) for k in latest), "best and latest weights should differ"
    worst = max(float((expected[k] - kept[k]).abs().max()) for k in expected)
    assert all(torch.equal(expected[k], kept[k]) for k in expected), f"max weight difference {worst}"
    assert resumed.metrics["val_loss"] == pytest.approx(whole.best["val_loss"], abs=0)
    assert resumed.metrics["best_step"] == whole.best["step"]
