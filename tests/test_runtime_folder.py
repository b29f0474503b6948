"""Opening and re-checking export folders with the torch-free runtime."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from onnxformer.runtime.check import check_export
from onnxformer.runtime.errors import ManifestError, OnnxformerError
from onnxformer.runtime.folder import ExportFolder
from onnxformer.runtime.manifest import MANIFEST_NAME
from onnxformer.runtime.session import create_session

RUNTIME = Path(__file__).resolve().parents[1] / "runtime"


def test_runtime_never_imports_torch() -> None:
    modules = ["onnxformer.runtime"]
    modules += sorted(f"onnxformer.runtime.{p.stem}" for p in RUNTIME.glob("*.py") if p.stem != "__init__")
    code = (
        "import importlib, sys\n"
        f"for name in {modules!r}: importlib.import_module(name)\n"
        "from onnxformer.runtime.session import _onnxruntime; _onnxruntime()\n"
        "bad = ('torch', 'onnxformer.builder')\n"
        "leaked = sorted(m for m in sys.modules if m in bad or m.startswith(tuple(b + '.' for b in bad)))\n"
        "print(len(sys.modules)); assert not leaked, leaked\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    assert len(modules) >= 6  # the package and each of its modules


def test_clean_export_verifies(blocks_export: Path) -> None:
    results = check_export(ExportFolder.open(blocks_export))
    assert results and all(result.ok for result in results), [r.problem for r in results if not r.ok]


def test_flipped_byte_and_truncation_are_detected(blocks_copy: Path) -> None:
    flipped = blocks_copy / "ffn.gelu.onnx"
    data = bytearray(flipped.read_bytes())
    data[len(data) // 2] ^= 0xFF
    flipped.write_bytes(bytes(data))
    truncated = blocks_copy / "sdpa.onnx"
    truncated.write_bytes(truncated.read_bytes()[:-10])
    results = {r.entry.path: r for r in check_export(ExportFolder.open(blocks_copy))}
    assert "does not match its sha256" in results["ffn.gelu.onnx"].problem
    assert "truncated or altered" in results["sdpa.onnx"].problem
    assert sum(not r.ok for r in results.values()) == 2
    with pytest.raises(ManifestError, match="altered"):
        ExportFolder.open(blocks_copy).read("ffn.gelu.onnx")


def test_missing_file_is_reported(blocks_copy: Path) -> None:
    (blocks_copy / "ffn.relu.onnx").unlink()
    results = {r.entry.path: r for r in check_export(ExportFolder.open(blocks_copy))}
    assert "missing" in results["ffn.relu.onnx"].problem


def _point_entry_at(folder: Path, path: str) -> None:
    manifest = json.loads((folder / MANIFEST_NAME).read_text())
    manifest["goldens"]["graphs"][0]["file"] = manifest["files"][0]["path"] = path
    (folder / MANIFEST_NAME).write_text(json.dumps(manifest))


@pytest.mark.parametrize("path", ["../outside.onnx", "/etc/passwd", "a/../../b.onnx", "..\\x.onnx", ""])
def test_paths_leaving_the_folder_are_refused(blocks_copy: Path, path: str) -> None:
    _point_entry_at(blocks_copy, path)
    with pytest.raises(ManifestError, match=r"not a plain relative path|outside"):
        ExportFolder.open(blocks_copy).read(path)


def test_symlinks_are_refused(blocks_copy: Path, tmp_path: Path) -> None:
    canary = tmp_path / "canary.onnx"
    canary.write_bytes(b"secret")
    os.symlink(canary, blocks_copy / "link.onnx")
    _point_entry_at(blocks_copy, "link.onnx")
    with pytest.raises(ManifestError, match=r"outside|symbolic link"):
        ExportFolder.open(blocks_copy).read("link.onnx")


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda p: p / "nope", "does not exist"),
        (lambda p: (p / "f").write_text("x") and p / "f", "is not a folder"),
        (lambda p: (p / "empty").mkdir() or p / "empty", "has no manifest.json"),
    ],
)
def test_not_an_export_folder(tmp_path: Path, make, message) -> None:
    with pytest.raises(ManifestError, match=message):
        ExportFolder.open(make(tmp_path))


def test_bad_device_and_bad_model_bytes() -> None:
    with pytest.raises(OnnxformerError, match="device must be one of"):
        create_session(b"", device="tpu")


def test_cpu_session_reports_its_provider(blocks_export: Path) -> None:
    folder = ExportFolder.open(blocks_export)
    session = create_session(folder.read("ffn.gelu.onnx"), device="auto")
    assert session.provider in ("CPUExecutionProvider", "CUDAExecutionProvider")
    assert session.reason
    assert session.session.get_providers()[0] == session.provider
