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
    exports = figures.reference_exports()
    assert len(exports) >= 3
    for name, manifest in exports.items():
        assert manifest == json.loads((root / "exported" / name / "manifest.json").read_text())
        assert f"| {name} |" in block and f"{manifest['extra']['metrics']['parameters']:,}" in block
    largest = max(figures._largest_logit(manifest) for manifest in exports.values())
    assert 1.0 < largest < 1000.0 and f"|x| = {largest:.1f}" in block


def test_the_goldens_doc_states_the_same_parity_rows() -> None:
    """docs/goldens.md repeats the reference exports' parity rows beside the rule: they are the
    generated ones."""
    doc = (Path(figures.ROOT) / "docs" / "goldens.md").read_text(encoding="utf-8")
    rows = figures._parity_rows()
    assert rows and all(row in doc for row in rows), "copy the README's parity rows into docs/goldens.md"
