"""Shared fixtures. The full block export (~1 minute on 2 cores) is made once per test session."""

import shutil
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def blocks_export(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Every block of the catalogue exported and proven, in a folder tests must not modify."""
    from onnxformer.builder.export import export_blocks

    out = tmp_path_factory.mktemp("export") / "blocks"
    export_blocks(out)
    return out


@pytest.fixture
def blocks_copy(blocks_export: Path, tmp_path: Path) -> Path:
    """A private copy of the block export that a test may damage."""
    copy = tmp_path / "blocks"
    shutil.copytree(blocks_export, copy)
    return copy


# A model small enough to train and export in seconds; the quality is irrelevant to these tests.
TINY_MODEL = {"d_model": 32, "n_layers": 2, "n_heads": 4, "d_ff": 64}


@pytest.fixture(scope="session")
def tiny_checkpoints(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """family -> checkpoint folder of a briefly trained tiny model."""
    from onnxformer.builder.training import TrainOptions, train

    root = tmp_path_factory.mktemp("checkpoints")
    return {
        family: train(
            root / family,
            TrainOptions(
                family, steps=30, batch_size=16, eval_every=30, quality_samples=2, model_overrides=TINY_MODEL
            ),
        ).out
        for family in ("gpt", "bert", "t5")
    }


@pytest.fixture(scope="session")
def model_exports(
    tiny_checkpoints: dict[str, Path], tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Path]:
    """family -> export folder of the tiny checkpoint (graphs, attentions, blocks, tokenizer)."""
    from onnxformer.builder.export.models import export_checkpoint

    root = tmp_path_factory.mktemp("model_exports")
    for family, checkpoint in tiny_checkpoints.items():
        export_checkpoint(checkpoint, root / family)
    return {family: root / family for family in tiny_checkpoints}
