"""Training: the loop runs, resumes exactly, and checkpoints load safely."""

import os
import pickle
from pathlib import Path

import pytest
import torch

from onnxformer.builder.training import CheckpointError, TrainOptions, load_checkpoint, train
from onnxformer.runtime.errors import ConfigError, InputError

# A model small enough that a dozen steps take a second or two.
TINY = {"d_model": 32, "n_layers": 1, "n_heads": 2, "d_ff": 64}


def _options(family: str, **changes) -> TrainOptions:
    values = {"steps": 12, "batch_size": 8, "save_every": 4, "eval_every": 6, "quality_samples": 8}
    return TrainOptions(family, **{**values, "model_overrides": TINY, **changes})


@pytest.mark.parametrize("family", ["gpt", "bert", "t5"])
def test_resume_after_interruption_gives_identical_weights(tmp_path: Path, family: str) -> None:
    whole = train(tmp_path / "whole", _options(family))
    interrupted = tmp_path / "interrupted"
    first = train(interrupted, _options(family), stop_after=7)
    assert first.metrics == {}  # unfinished runs report no final metrics
    assert load_checkpoint(interrupted).step == 7
    resumed = train(interrupted, _options(family), resume=True)
    a = load_checkpoint(whole.out).model.state_dict()
    b = load_checkpoint(resumed.out).model.state_dict()
    worst = max(float((a[k] - b[k]).abs().max()) for k in a)
    print(f"{family}: max weight difference after resume {worst}")
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert resumed.metrics["val_loss"] == pytest.approx(whole.metrics["val_loss"], abs=0)


def test_checkpoint_contents_and_metrics(tmp_path: Path) -> None:
    result = train(tmp_path / "gpt", _options("gpt"))
    names = sorted(p.name for p in result.out.iterdir())
    assert names == [
        "checkpoint.json",
        "history.json",
        "loss_curve.png",
        "model.safetensors",
        "tokenizer.json",
        "training_state.pt",
    ]
    assert (result.out / "loss_curve.png").read_bytes().startswith(b"\x89PNG")
    for key in ("val_loss", "val_perplexity", "grammatical_rate", "parameters", "train_seconds"):
        assert key in result.metrics
    assert 0.0 <= result.metrics["grammatical_rate"] <= 1.0
    checkpoint = load_checkpoint(result.out, family="gpt")
    assert checkpoint.model.lm_head.weight is checkpoint.model.embeddings.token.weight  # still tied


def test_wrong_family_and_not_a_checkpoint(tmp_path: Path) -> None:
    result = train(tmp_path / "gpt", _options("gpt", steps=2))
    with pytest.raises(CheckpointError, match="holds a gpt checkpoint, not bert"):
        load_checkpoint(result.out, family="bert")
    with pytest.raises(CheckpointError, match=r"has no checkpoint\.json"):
        load_checkpoint(tmp_path)
    with pytest.raises(CheckpointError, match="holds no checkpoint to resume"):
        train(tmp_path / "nothing", _options("gpt"), resume=True)


def test_pickle_payload_in_training_state_never_runs(tmp_path: Path) -> None:
    result = train(tmp_path / "gpt", _options("gpt", steps=2))
    canary = tmp_path / "pwned"

    class Payload:
        def __reduce__(self):
            return (os.system, (f"touch {canary}",))

    (result.out / "training_state.pt").write_bytes(pickle.dumps({"step": Payload()}))
    with pytest.raises(CheckpointError, match="refused"):
        load_checkpoint(result.out, with_training_state=True)
    assert not canary.exists()


@pytest.mark.parametrize(
    ("changes", "error", "message"),
    [
        ({"steps": 0}, ConfigError, "steps must be an integer >= 1"),
        ({"device": "tpu"}, ConfigError, "device must be 'cpu' or 'cuda'"),
        ({"corpus": "/no/such/file.txt"}, InputError, "does not exist|not found|No such"),
        ({"model_overrides": {**TINY, "position": "alibi"}}, ConfigError, "position must be one of"),
    ],
)
def test_bad_options(tmp_path: Path, changes, error, message) -> None:
    with pytest.raises(error, match=message):
        train(tmp_path / "x", _options("gpt", **changes))


def test_user_corpus_for_gpt_and_bert_and_pairs_for_t5(tmp_path: Path) -> None:
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(f"line number {i} says hello to {i % 7} friends" for i in range(200)) + "\n")
    pairs = tmp_path / "pairs.tsv"
    pairs.write_text("\n".join(f"count {i}\t{i} counted" for i in range(200)) + "\n")
    for family, path in (("gpt", corpus), ("bert", corpus), ("t5", pairs)):
        result = train(tmp_path / family, _options(family, steps=3, corpus=str(path)))
        assert result.metrics["val_loss"] > 0
        assert "grammatical_rate" not in result.metrics
