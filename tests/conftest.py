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
