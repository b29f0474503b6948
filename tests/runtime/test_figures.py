"""The README's figures about the reference exports are generated from their manifests (no drift)."""

import json
from pathlib import Path

from onnxformer.cli import figures


def test_readme_figures_match_the_exports() -> None:
    text = figures.README.read_text(encoding="utf-8")
    assert figures.rewritten(text) == text, (
        "README.md's figures are stale: run `python -m onnxformer.cli.figures`"
    )


def test_figures_are_read_from_the_manifests() -> None:
    root = Path(figures.ROOT)
    block = figures.render()
    for family in figures.METRICS:
        manifest = json.loads((root / "exported" / family / "manifest.json").read_text())
        assert f"{manifest['extra']['metrics']['parameters']:,}" in block
    largest = max(
        figures._largest_logit(json.loads((root / "exported" / f / "manifest.json").read_text()))
        for f in figures.METRICS
    )
    assert 1.0 < largest < 1000.0 and f"|x| = {largest:.1f}" in block
