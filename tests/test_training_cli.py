"""`onnxformer train` on your own English text, and the options that steer a run, through the CLI."""

import json
import random
from pathlib import Path

import pytest
from typer.testing import CliRunner

from onnxformer.builder.training import load_checkpoint
from onnxformer.cli.main import app

runner = CliRunner()
SMALL = ["--d-model", "32", "--n-layers", "1", "--n-heads", "2", "--d-ff", "64", "--max-len", "32"]

PEOPLE = ["My sister", "The old farmer", "Our teacher", "A young doctor", "The baker", "My neighbour", "Tom",
          "The children", "Anna", "The driver", "Her father", "A tired student"]  # fmt: skip
ACTS = ["walked to the market", "read a long letter", "cooked dinner for the family", "painted the fence",
        "waited for the bus", "wrote a short story", "planted tomatoes in the garden", "fixed the old radio",
        "sang a quiet song", "called an old friend", "cleaned the kitchen", "bought fresh bread"]  # fmt: skip
WHEN = ["in the morning", "after lunch", "on Sunday", "before the rain started", "late at night",
        "last summer", "during the holidays", "every Friday", "at noon", "yesterday"]  # fmt: skip
WHY = ["because it was quiet", "while the radio played", "and then went home", "with a smile",
       "although it was cold", "as usual", "for the first time", "without saying a word"]  # fmt: skip
OTHER = ["It rained all day and the streets were empty.", "The shop on the corner closes at six.",
         "We could hear the sea from the window.", "Nobody knew where the key had gone.",
         "The train was late again this morning.", "There were flowers on every table."]  # fmt: skip


def english_lines(count: int, seed: int = 0) -> list[str]:
    """Ordinary English sentences from varied templates (our own text, nothing downloaded)."""
    rng = random.Random(seed)
    lines = []
    while len(lines) < count:
        shape = rng.random()
        if shape < 0.1:
            lines.append(rng.choice(OTHER))
        elif shape < 0.55:
            lines.append(f"{rng.choice(PEOPLE)} {rng.choice(ACTS)} {rng.choice(WHEN)}.")
        else:
            lines.append(f"{rng.choice(PEOPLE)} {rng.choice(ACTS)} {rng.choice(WHEN)} {rng.choice(WHY)}.")
    return lines


def test_train_on_a_few_hundred_lines_of_english_keeps_the_best_checkpoint(tmp_path: Path) -> None:
    corpus = tmp_path / "english.txt"
    corpus.write_text("\n".join(english_lines(300)) + "\n", encoding="utf-8")
    out = tmp_path / "run"
    result = runner.invoke(app, ["train", "gpt", "--corpus", str(corpus), "--out", str(out), *SMALL])
    assert result.exit_code == 0, result.output
    assert "kept the best checkpoint: step" in result.stdout and "val_perplexity" in result.stdout
    assert "sample:" in result.stdout
    saved = load_checkpoint(out)
    best = saved.extra["best"]
    options = saved.extra["train_options"]
    print(f"english corpus: {options['steps']} steps, best {best}")
    assert options["steps"] == 100 and options["patience"] == 5  # scaled to 270 training lines
    assert best["val_loss"] == min(saved.history["val_loss"])
    assert saved.metrics["val_perplexity"] == pytest.approx(best["val_perplexity"], rel=1e-6)
    assert best["val_perplexity"] < 60  # far below the ~500 of a model that learned nothing


def test_resume_through_the_cli(tmp_path: Path) -> None:
    out = tmp_path / "run"
    base = ["train", "gpt", "--out", str(out), *SMALL, "--quality-samples", "0"]
    assert runner.invoke(app, [*base, "--steps", "2"]).exit_code == 0
    refused = runner.invoke(app, [*base, "--steps", "2", "--resume", "--position", "rotary"])
    assert refused.exit_code == 1 and "cannot change position (learned -> rotary)" in refused.output
    complete = runner.invoke(app, [*base, "--resume"])
    assert complete.exit_code == 0 and "holds a complete run (step 2); nothing was trained" in complete.stdout
    longer = runner.invoke(app, [*base, "--resume", "--steps", "3", "--json"])
    assert longer.exit_code == 0, longer.output
    assert json.loads(longer.stdout)["step"] == 3


def test_cli_model_size_and_split_errors(tmp_path: Path) -> None:
    config = tmp_path / "model.json"
    config.write_text('{"d_model": 30, "n_heads": 4}')
    bad = runner.invoke(app, ["train", "gpt", "--out", str(tmp_path / "x"), "--config", str(config)])
    assert bad.exit_code == 1 and "d_model" in bad.output and "Traceback" not in bad.output
    dropout = runner.invoke(app, ["train", "gpt", "--out", str(tmp_path / "x"), "--dropout", "1.2"])
    assert dropout.exit_code == 1 and "dropout must be a number in [0, 1)" in dropout.output
    corpus = tmp_path / "three.txt"
    corpus.write_text("one line here\nanother line there\na third line\n")
    split = runner.invoke(
        app, ["train", "gpt", "--corpus", str(corpus), "--out", str(tmp_path / "x"), "--val-fraction", "0.9"]
    )
    assert split.exit_code == 1 and "--val-fraction" in split.output
    assert not (tmp_path / "x").exists()
