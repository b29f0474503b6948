"""Nothing already on disk is lost: every command that writes checks its target before any work."""

import hashlib
import shutil
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from onnxformer.cli.main import app

runner = CliRunner()
ROOT = Path(__file__).resolve().parents[1]
EXPORTED = ROOT / "exported"


def _digest(folder: Path) -> dict[str, str]:
    return {
        str(path.relative_to(folder)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(folder.rglob("*"))
        if path.is_file()
    }


@pytest.fixture
def model_export(tmp_path: Path) -> Path:
    copy = tmp_path / "gpt-export"
    shutil.copytree(EXPORTED / "gpt", copy)
    return copy


def test_export_blocks_refuses_a_model_export(model_export: Path) -> None:
    before = _digest(model_export)
    result = runner.invoke(app, ["export-blocks", "--block", "ffn.relu", "--out", str(model_export)])
    assert result.exit_code == 1
    assert "holds a model export of gpt, not a blocks export" in result.stderr
    with_flag = runner.invoke(
        app, ["export-blocks", "--block", "ffn.relu", "--out", str(model_export), "--overwrite"]
    )
    assert with_flag.exit_code == 1  # another kind is refused even with --overwrite
    assert _digest(model_export) == before


def test_export_blocks_replaces_its_own_kind_only_with_overwrite(tmp_path: Path) -> None:
    out = tmp_path / "blocks"
    assert runner.invoke(app, ["export-blocks", "--block", "ffn.relu", "--out", str(out)]).exit_code == 0
    before = _digest(out)
    again = runner.invoke(app, ["export-blocks", "--block", "ffn.gelu", "--out", str(out)])
    assert again.exit_code == 1 and "--overwrite" in again.stderr
    assert _digest(out) == before
    replaced = runner.invoke(app, ["export-blocks", "--block", "ffn.gelu", "--out", str(out), "--overwrite"])
    assert replaced.exit_code == 0, replaced.output
    assert (out / "ffn.gelu.onnx").is_file() and not (out / "ffn.relu.onnx").exists()


def test_export_refuses_bad_targets_before_any_work(tmp_path: Path, model_export: Path) -> None:
    """The checkpoint given does not even exist: a refusal that names --out proves the target was checked
    first, and it comes at once."""
    missing = str(tmp_path / "no-checkpoint")
    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("keep me")
    a_file = tmp_path / "file.bin"
    a_file.write_bytes(b"data")
    blocks = tmp_path / "blocks"
    assert runner.invoke(app, ["export-blocks", "--block", "ffn.relu", "--out", str(blocks)]).exit_code == 0
    cases = {
        str(foreign): "holds no onnxformer model export",
        str(a_file): "is a file",
        str(model_export): "--overwrite",
        str(blocks): "holds a blocks export, not a model export",
    }
    for out, expected in cases.items():
        started = time.perf_counter()
        result = runner.invoke(app, ["export", missing, "--out", out])
        assert result.exit_code == 1, result.output
        assert expected in result.stderr, (out, result.stderr)
        assert time.perf_counter() - started < 5
    assert (foreign / "notes.txt").read_text() == "keep me" and a_file.read_bytes() == b"data"
    empty = runner.invoke(app, ["export", missing, "--out", ""])
    assert empty.exit_code == 2 and "the path is empty" in empty.output


def test_optimize_checks_its_target_and_options(tmp_path: Path, model_export: Path) -> None:
    other = tmp_path / "other"
    shutil.copytree(EXPORTED / "bert", other)
    before = _digest(other)
    refused = runner.invoke(app, ["optimize", str(model_export), str(other)])
    assert refused.exit_code == 1 and "--overwrite" in refused.stderr
    assert _digest(other) == before
    nothing = runner.invoke(app, ["optimize", str(model_export), str(tmp_path / "o"), "--no-fuse"])
    assert nothing.exit_code == 1 and "--int8" in nothing.stderr and "quantize=" not in nothing.stderr


def test_export_blocks_factor_is_checked_first(tmp_path: Path) -> None:
    for bad in ("-1", "0", "0.5", "nan", "inf"):
        result = runner.invoke(app, ["export-blocks", "--factor", bad, "--out", str(tmp_path / bad)])
        assert result.exit_code == 1 and "--factor must be a number >= 1" in result.stderr, bad
        assert not (tmp_path / bad).exists()


def test_demo_checks_every_target_first(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    (runs / "export").mkdir(parents=True)
    shutil.copytree(EXPORTED / "bert", runs / "export" / "bert")
    before = _digest(runs)
    for flags in ([], ["--overwrite"]):  # an export the demo did not write, even with --overwrite
        result = runner.invoke(app, ["demo", "--out", str(runs), "--steps", "2", *flags])
        assert result.exit_code == 1 and "`onnxformer demo` did not write it" in result.stderr, result.output
    assert _digest(runs) == before and not (runs / "gpt").exists()
    a_file = tmp_path / "runs.txt"
    a_file.write_text("x")
    assert runner.invoke(app, ["demo", "--out", str(a_file)]).exit_code == 1
