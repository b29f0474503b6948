"""The `onnxformer` command, through CliRunner and through the installed entry point."""

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

from typer.testing import CliRunner

from onnxformer.cli.main import app
from onnxformer.cli.outputs import written_by_onnxformer

runner = CliRunner()
ENTRY = Path(sys.executable).parent / "onnxformer"
EXPORTED = Path(__file__).resolve().parents[1] / "exported"


def test_help_lists_commands() -> None:
    result = runner.invoke(app, ["--help"])
    assert result.exit_code == 0
    assert "export-blocks" in result.output and "verify" in result.output


def test_version() -> None:
    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0
    assert result.output.startswith("onnxformer ")


def test_export_blocks_json_then_verify(tmp_path: Path) -> None:
    out = tmp_path / "blocks"
    result = runner.invoke(app, ["export-blocks", "--out", str(out), "--block", "ffn.relu", "--json"])
    assert result.exit_code == 0, result.output
    manifest = json.loads(result.stdout)
    assert [f["path"] for f in manifest["files"] if f["kind"] != "golden"] == ["ffn.relu.onnx"]
    assert [graph["file"] for graph in manifest["goldens"]["graphs"]] == ["ffn.relu.onnx"]
    assert manifest["files"][0]["parity"]["max_abs_diff"]["output"] <= 1e-5
    result = runner.invoke(app, ["verify", str(out), "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["ok"] and report["files"][0]["ok"]


def test_export_blocks_table(tmp_path: Path) -> None:
    args = ["export-blocks", "--out", str(tmp_path / "b"), "--block", "residual.post_ln"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "residual.post_ln.onnx" in result.stdout
    assert re.search(r"closest to its limit: \d+% of the allowance \(--factor 16\)", result.stdout)
    refused = runner.invoke(app, [*args[:2], str(tmp_path / "c"), *args[3:], "--factor", "0.5"])
    assert refused.exit_code != 0 and "--factor must be a number >= 1" in refused.output


def test_verify_fails_on_tampered_file(blocks_copy: Path) -> None:
    target = blocks_copy / "ffn.gelu.onnx"
    target.write_bytes(target.read_bytes()[:-1] + b"\x00")
    result = runner.invoke(app, ["verify", str(blocks_copy), "--json"])
    assert result.exit_code == 1
    report = json.loads(result.stdout)
    bad = [f for f in report["files"] if not f["ok"]]
    assert [f["path"] for f in bad] == ["ffn.gelu.onnx"]
    assert "sha256" in bad[0]["problem"]


def test_errors_are_one_line_without_traceback(tmp_path: Path) -> None:
    """Nothing before `error:` either: a progress bar that is not on a terminal prints no blank line."""
    (tmp_path / "empty").mkdir()
    (tmp_path / "weights").mkdir()
    (tmp_path / "weights" / "model.safetensors").write_bytes(b"")
    (tmp_path / "no-model").mkdir()
    (tmp_path / "no-model" / "config.json").write_text('{"hidden_size": 8}')
    texts = tmp_path / "texts.jsonl"
    texts.write_text('{"text": "The cat sat."}\n')
    out = ["--out", str(tmp_path / "x")]
    cases = [
        (["verify", str(tmp_path / "missing")], "does not exist"),
        (["verify", str(tmp_path)], "has no manifest.json"),
        (["export-blocks", *out, "--block", "nope"], "unknown block"),
        (["export-blocks", *out, "--opset", "3"], "opset must be"),
        (["export", str(tmp_path / "empty"), *out], "is neither a checkpoint (no checkpoint.json"),
        (["export", str(tmp_path / "weights"), *out], "(model.safetensors) but has no config.json"),
        (["export", str(tmp_path / "no-model"), *out], "config.json names no transformers model"),
        (["train", "gpt", "--steps", "0", *out], "steps must be"),
        (["encode", str(EXPORTED / "gpt"), "a"], "this command needs an encode export"),
        (["batch", str(EXPORTED / "bert"), str(texts), "--out", str(texts)], "is the input file"),
        (["batch", str(EXPORTED / "bert"), str(texts), "--out", str(texts), "--overwrite"], "is the input"),
    ]
    for args, message in cases:
        result = runner.invoke(app, args)
        assert result.exit_code == 1, (args, result.output)
        assert message in result.stderr, (args, result.stderr)
        assert "Traceback" not in result.output + result.stderr
        assert result.stderr.startswith("error:") and result.stderr.count("\n") == 1, (args, result.stderr)
    assert texts.read_text() == '{"text": "The cat sat."}\n' and not (tmp_path / "x").exists()


def test_debug_flag_shows_the_exception(tmp_path: Path) -> None:
    result = runner.invoke(app, ["--debug", "verify", str(tmp_path / "missing")])
    assert result.exit_code != 0
    assert result.exception is not None and "does not exist" in str(result.exception)


def test_installed_entry_point_runs(blocks_export: Path, tmp_path: Path) -> None:
    command = str(ENTRY) if ENTRY.exists() else shutil.which("onnxformer")
    assert command, "the onnxformer console script is not installed"
    ok = subprocess.run([command, "verify", str(blocks_export)], capture_output=True, text=True, check=False)
    assert ok.returncode == 0, ok.stderr
    assert "files verified" in ok.stdout
    bad = subprocess.run([command, "verify", str(tmp_path)], capture_output=True, text=True, check=False)
    assert bad.returncode == 1
    assert bad.stderr.startswith("error:") and "Traceback" not in bad.stderr


def test_train_command_json_and_entry_point(tmp_path: Path) -> None:
    result = runner.invoke(app, ["train", "bert", "--steps", "2", "--out", str(tmp_path / "bert"), "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert 0.0 <= report["metrics"]["classification_accuracy"] <= 1.0
    assert (tmp_path / "bert" / "model.safetensors").is_file()
    command = str(ENTRY) if ENTRY.exists() else shutil.which("onnxformer")
    resumed = subprocess.run(
        [command, "train", "bert", "--steps", "2", "--out", str(tmp_path / "bert"), "--resume", "--json"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert resumed.returncode == 0, resumed.stderr
    bad = subprocess.run(
        [command, "train", "bert", "--corpus", str(tmp_path / "missing.txt"), "--out", str(tmp_path / "x")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert bad.returncode == 1 and bad.stderr.strip().startswith("error:") and "Traceback" not in bad.stderr


def test_demo_runs_the_whole_path(tmp_path: Path) -> None:
    command = str(ENTRY) if ENTRY.exists() else shutil.which("onnxformer")
    result = subprocess.run(
        # Blocks are exported and proven by tests/test_block_export.py and the model_exports fixture.
        [command, "demo", "--out", str(tmp_path), "--steps", "2", "--no-blocks"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "onnxformer demo: done" in result.stdout
    for family in ("gpt", "bert", "t5"):
        assert (tmp_path / "export" / family / "manifest.json").is_file()
    assert (tmp_path / "attention_gpt.png").read_bytes().startswith(b"\x89PNG")
    # What it wrote is listed, so a rerun with --overwrite may replace exactly those.
    written = json.loads((tmp_path / "demo.json").read_text())["written"]
    assert written == sorted(
        ["attention_gpt.png", "bert", "gpt", "t5", *(f"export/{f}" for f in ("bert", "gpt", "t5"))]
    )
    assert written_by_onnxformer(tmp_path / "attention_gpt.png")
    (tmp_path / "export" / "gpt" / "notes.txt").write_text("keep me")
    again = runner.invoke(app, ["demo", "--out", str(tmp_path), "--steps", "2", "--overwrite"])
    assert again.exit_code == 1 and "holds notes.txt, which onnxformer did not write" in again.stderr


def test_demo_refuses_a_file_as_out(tmp_path: Path) -> None:
    target = tmp_path / "file"
    target.write_text("x")
    result = runner.invoke(app, ["demo", "--out", str(target), "--steps", "1"])
    assert result.exit_code == 1 and "error:" in result.stderr and "Traceback" not in result.stderr


def test_export_commands_through_the_entry_point(tiny_checkpoints, tmp_path: Path) -> None:
    command = str(ENTRY) if ENTRY.exists() else shutil.which("onnxformer")
    runs = [
        ["export-blocks", "--out", str(tmp_path / "blocks"), "--block", "ffn.relu", "--json"],
        [
            "export",
            str(tiny_checkpoints["bert"]),
            "--out",
            str(tmp_path / "bert"),
            "--no-blocks",
            "--no-attentions",
            "--json",
        ],
    ]
    for args in runs:
        result = subprocess.run([command, *args], capture_output=True, text=True, check=False)
        assert result.returncode == 0, (args, result.stderr)
        assert json.loads(result.stdout)["files"]
