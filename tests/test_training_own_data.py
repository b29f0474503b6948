"""Training on your own data gives a good model or says why not: held-out evaluation, the best checkpoint
kept, early stopping, an overfitting warning, reported truncation, model size and resume options."""

import json
import random
from pathlib import Path

import pytest
import torch

from onnxformer.builder.training import TrainOptions, load_checkpoint, train
from onnxformer.builder.training.model_config import read_model_config
from onnxformer.builder.training.options import CORPUS_STEPS
from onnxformer.builder.training.trainer import overfitting_warning
from onnxformer.runtime.errors import ConfigError, InputError

TINY = {"d_model": 32, "n_layers": 1, "n_heads": 2, "d_ff": 64, "max_len": 24, "dropout": 0.0}
WORDS = ("apple", "river", "stone", "cloud", "lamp", "tiger", "window", "garden", "silver", "music")


def _options(family: str, **changes) -> TrainOptions:
    values = {"steps": 6, "batch_size": 8, "eval_every": 3, "save_every": 2, "quality_samples": 0}
    return TrainOptions(family, **{**values, "model_overrides": TINY, **changes})


def random_lines(count: int, seed: int = 0, words: int = 6) -> list[str]:
    """Lines of random words: nothing to generalise from, so a model can only memorise them."""
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(words)) for _ in range(count)]


def write_lines(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_an_overfitting_run_keeps_its_best_checkpoint_warns_and_stops_early(tmp_path: Path) -> None:
    corpus = write_lines(tmp_path / "corpus.txt", random_lines(40))
    options = _options(
        "gpt", corpus=str(corpus), steps=300, eval_every=5, patience=3, learning_rate=1e-2, quality_samples=3
    )
    messages: list[str] = []
    result = train(tmp_path / "run", options, report=messages.append)
    print(f"stopped at {result.step}, best {result.best}, warnings {result.warnings}")
    assert result.stopped_early and result.step < 300
    assert result.best["step"] < result.step
    assert result.metrics["best_step"] == result.best["step"]
    assert any("stopping early" in m for m in messages)
    assert any(w.startswith("held-out loss rose") for w in result.warnings)
    # The weights kept are the best ones: loading them gives the best held-out loss again.
    saved = load_checkpoint(result.out, with_training_state=True)
    assert saved.extra["best"]["step"] == result.best["step"] and saved.extra["stopped_early"]
    assert result.metrics["val_loss"] == pytest.approx(result.best["val_loss"], rel=1e-6)
    history = saved.history
    assert min(history["val_loss"]) == pytest.approx(result.best["val_loss"], rel=1e-9)
    latest = saved.training_state["model"]
    kept = saved.model.state_dict()
    assert any(not torch.equal(latest[k], kept[k]) for k in latest), "best and latest weights should differ"
    assert result.samples and "copied_rate" in result.metrics
    # Resuming a run that stopped early reports it complete and writes nothing.
    before = {p.name: p.read_bytes() for p in result.out.iterdir()}
    again = train(tmp_path / "run", options, resume=True)
    assert again.already_complete and again.step == result.step
    assert {p.name: p.read_bytes() for p in result.out.iterdir()} == before


def test_overfitting_warning_needs_rising_held_out_and_falling_train_loss() -> None:
    history = {
        "step": list(range(1, 31)),
        "train_loss": [3.0 - 0.05 * s for s in range(1, 31)],
        "eval_step": [10, 20, 30],
        "val_loss": [2.0, 2.2, 2.5],
    }
    message = overfitting_warning(history, best_step=10)
    assert message and "rose from 2.000 (step 10) to 2.500 (step 30)" in message
    assert "best checkpoint (step 10) is kept" in message
    assert overfitting_warning({**history, "val_loss": [2.0, 2.2, 2.1]}, best_step=10) is None
    flat_train = {**history, "train_loss": [1.0] * 30}
    assert overfitting_warning(flat_train, best_step=10) is None


def test_default_steps_scale_with_the_corpus_and_the_final_check_with_the_run() -> None:
    small = TrainOptions("gpt", corpus="x.txt").resolved(train_items=270)
    assert small.steps == CORPUS_STEPS[0] and small.patience == 5
    large = TrainOptions("gpt", corpus="x.txt").resolved(train_items=10_000)
    assert large.steps == 3125  # 20 passes over 10,000 lines at 64 a step
    assert TrainOptions("gpt", corpus="x.txt").resolved(train_items=10**7).steps == CORPUS_STEPS[1]
    builtin = TrainOptions("gpt").resolved(train_items=10**6)
    assert builtin.steps == 800 and builtin.patience == 0 and builtin.quality_samples == 200
    assert TrainOptions("gpt", steps=5).resolved(train_items=100).quality_samples == 8


def test_quality_check_can_be_skipped(tmp_path: Path) -> None:
    result = train(tmp_path / "gpt", _options("gpt", steps=2, quality_samples=0))
    assert "grammatical_rate" not in result.metrics and "val_perplexity" in result.metrics
    result = train(tmp_path / "gpt2", _options("gpt", steps=2, quality_samples=2))
    assert result.metrics["grammatical_samples"] == 2


def test_lines_longer_than_the_context_are_reported(tmp_path: Path) -> None:
    lines = random_lines(30) + random_lines(3, seed=1, words=40)
    corpus = write_lines(tmp_path / "long.txt", lines)
    result = train(tmp_path / "run", _options("gpt", corpus=str(corpus), steps=1, val_fraction=0.5))
    cut = [w for w in result.warnings if "longer than the model's context" in w]
    assert cut and "tokens" in cut[0] and "--max-len" in cut[0], result.warnings
    truncation = load_checkpoint(result.out).extra["truncation"]
    assert truncation["limit"] == TINY["max_len"] - 1
    assert 1 <= truncation["cut_texts"] <= 3 and truncation["cut_tokens"] > 0
    assert truncation["longest"] > truncation["limit"]


@pytest.mark.parametrize("family", ["gpt", "bert"])
def test_a_one_line_corpus_is_refused_for_every_family(tmp_path: Path, family: str) -> None:
    corpus = write_lines(tmp_path / "one.txt", ["just one line of text here"])
    with pytest.raises(InputError, match=r"too few.*--val-fraction"):
        train(tmp_path / "run", _options(family, corpus=str(corpus)))


def test_bert_on_a_small_corpus_has_a_finite_held_out_loss(tmp_path: Path) -> None:
    corpus = write_lines(tmp_path / "few.txt", random_lines(4))
    result = train(tmp_path / "run", _options("bert", corpus=str(corpus), steps=2, val_fraction=0.25))
    assert result.metrics["val_loss"] == result.metrics["val_loss"]  # not NaN


def test_val_fraction_option_makes_the_split_error_followable(tmp_path: Path) -> None:
    corpus = write_lines(tmp_path / "three.txt", random_lines(3))
    with pytest.raises(InputError, match="smaller fraction"):
        train(tmp_path / "run", _options("gpt", corpus=str(corpus), val_fraction=0.9))
    result = train(tmp_path / "run", _options("gpt", corpus=str(corpus), val_fraction=0.3, steps=1))
    assert result.step == 1
    with pytest.raises(ConfigError, match="val_fraction must be between 0 and 1"):
        _options("gpt", val_fraction=1.0).validated()


def test_model_size_from_a_config_file_and_options(tmp_path: Path) -> None:
    path = tmp_path / "model.json"
    path.write_text(json.dumps({"d_model": 48, "n_layers": 2, "n_heads": 3, "d_ff": 96, "max_len": 20}))
    overrides = {**read_model_config(path), "dropout": 0.2, "vocab_size": 300}
    result = train(tmp_path / "run", _options("t5", steps=1, model_overrides=overrides))
    config = load_checkpoint(result.out).model.config
    sizes = (config.d_model, config.n_layers, config.n_heads, config.d_ff, config.max_len)
    assert sizes == (48, 2, 3, 96, 20)
    assert config.dropout == 0.2 and config.vocab_size <= 300
    toml = tmp_path / "model.toml"
    toml.write_text("d_model = 64\nn_heads = 4\n")
    assert read_model_config(toml) == {"d_model": 64, "n_heads": 4}


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"d_model": 30, "n_heads": 4}, "d_model"),
        ({"dropout": 1.5}, r"dropout must be a number in \[0, 1\)"),
        ({"d_model": "big"}, "d_model must be a whole number >= 1"),
        ({"n_layers": 0}, "n_layers must be a whole number >= 1"),
        ({"width": 3}, r"unknown model field\(s\) \['width'\]"),
        ({"vocab_size": 10}, "vocab_size must be at least"),
    ],
)
def test_bad_model_sizes_are_config_errors_before_any_work(tmp_path: Path, fields, message) -> None:
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(fields))
    with pytest.raises(ConfigError, match=message):
        train(tmp_path / "run", _options("gpt", model_overrides={**TINY, **read_model_config(path)}))
    assert not (tmp_path / "run").exists()


def test_config_file_errors(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="does not exist"):
        read_model_config(tmp_path / "none.json")
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(ConfigError, match="is not valid JSON"):
        read_model_config(tmp_path / "bad.json")
    (tmp_path / "list.json").write_text("[1, 2]")
    with pytest.raises(ConfigError, match="one object of fields"):
        read_model_config(tmp_path / "list.json")
    (tmp_path / "model.yaml").write_text("d_model: 3")
    with pytest.raises(ConfigError, match=r"\.json or \.toml"):
        read_model_config(tmp_path / "model.yaml")


def test_resume_continues_to_a_new_step_count_and_refuses_fixed_options(tmp_path: Path) -> None:
    first = train(tmp_path / "run", _options("gpt", steps=4, quality_samples=0))
    assert first.step == 4 and first.metrics
    with pytest.raises(ConfigError, match=r"cannot change position \(learned -> rotary\)"):
        train(tmp_path / "run", _options("gpt", model_overrides={**TINY, "position": "rotary"}), resume=True)
    with pytest.raises(ConfigError, match=r"cannot change batch_size \(8 -> 16\), seed \(0 -> 3\)"):
        train(tmp_path / "run", _options("gpt", batch_size=16, seed=3), resume=True)
    with pytest.raises(ConfigError, match="already at step 4"):
        train(tmp_path / "run", _options("gpt", steps=3), resume=True, changes={"steps": 3})
    # The same step count: complete, and nothing is rewritten (train_seconds included).
    before = {p.name: p.read_bytes() for p in first.out.iterdir()}
    again = train(tmp_path / "run", _options("gpt", steps=4), resume=True)
    assert again.already_complete and again.metrics == first.metrics
    assert {p.name: p.read_bytes() for p in first.out.iterdir()} == before
    longer = train(tmp_path / "run", _options("gpt", steps=7), resume=True, changes={"steps": 7})
    assert longer.step == 7 and not longer.already_complete
    saved = load_checkpoint(longer.out)
    assert saved.step == 7 and saved.extra["train_options"]["steps"] == 7
    assert saved.history["step"] == list(range(1, 8))
