"""`onnxformer inspect` on the committed reference exports (exported/), library and CLI.

Torch-free like the rest of tests/runtime: nothing here imports torch or onnxformer.builder, and the
subprocess tests prove that inspecting imports neither torch nor onnx.
"""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from onnxformer.cli.main import app
from onnxformer.runtime.errors import ExportError, ManifestError
from onnxformer.runtime.inspect import inspect_path

EXPORTED = Path(__file__).resolve().parents[2] / "exported"
ENTRY = Path(sys.executable).parent / "onnxformer"
runner = CliRunner()

# family -> (main graph, its first input's symbolic dims)
MAIN_GRAPH = {
    "gpt": ("decoder.onnx", ["batch", "sequence"]),
    "bert": ("encoder.onnx", ["batch", "sequence"]),
    "t5": ("encoder.onnx", ["batch", "encoder_sequence"]),
}


def _manifest(family: str) -> dict:
    return json.loads((EXPORTED / family / "manifest.json").read_text())


def _inspect_json(*args: str) -> tuple[int, dict]:
    result = runner.invoke(app, ["inspect", *args, "--json"])
    return result.exit_code, json.loads(result.stdout)


def _flip_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("family", ["gpt", "bert", "t5"])
def test_folder_json_has_the_manifest_figures(family: str) -> None:
    code, report = _inspect_json(str(EXPORTED / family))
    assert code == 0
    manifest = _manifest(family)
    assert report["type"] == "folder" and report["family"] == family and report["export_kind"] == "model"
    assert report["config"] == manifest["config"]
    assert report["opset"] == manifest["opset"] and "onnxruntime" in report["versions"]
    assert report["special_tokens"] == manifest["special_tokens"] and report["verify"] is None
    files = {entry["path"]: entry for entry in report["files"]}
    assert list(files) == [entry["path"] for entry in manifest["files"]]
    for path, entry in files.items():
        assert entry["size"] == (EXPORTED / family / path).stat().st_size
    assert report["total_size"] == sum(entry["size"] for entry in files.values())
    graph, dims = MAIN_GRAPH[family]
    assert files[graph]["role"] == graph.removesuffix(".onnx")
    assert files[graph]["inputs"][0] == {"name": "input_ids", "dtype": "int64", "shape": dims}
    assert files["tokenizer.json"]["role"] == "tokenizer" and files["tokenizer.json"]["parity"] is None
    for path, entry in files.items():
        if not path.endswith(".onnx"):
            continue
        parity = entry["parity"]
        names = sorted(o["name"] for o in entry["outputs"])
        # The reference exports are measured against the float64 answer (docs/goldens.md).
        assert parity["reference"] == "float64" and parity["cases"] > 0 and parity["factor"] > 0, path
        assert sorted(parity["max_abs_diff"]) == sorted(parity["error"]) == sorted(parity["used"]) == names
        assert parity["within_tolerance"] and max(parity["used"].values()) <= 1.0, (path, parity["used"])
    if family == "bert":
        assert report["kv_cache"] == {}
    else:
        assert report["kv_cache"]["layers"] == manifest["config"]["n_layers"]
        assert "past_sequence + sequence" in files["decoder.onnx"]["outputs"][1]["shape"]
        assert report["generation"]["stop_tokens"] == manifest["generation"]["stop_tokens"]


@pytest.mark.parametrize("family", ["gpt", "t5"])
def test_folder_human_layout_names_family_files_and_parity(family: str) -> None:
    result = runner.invoke(app, ["inspect", str(EXPORTED / family)])
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert out.startswith(f"{family} export ")
    manifest = _manifest(family)
    for entry in manifest["files"]:
        assert entry["kind"] == "golden" or entry["path"] in out
    goldens = [entry for entry in manifest["files"] if entry["kind"] == "golden"]
    assert f"goldens/ ({len(goldens)} files)" in out
    decoder = manifest["files"][[e["path"] for e in manifest["files"]].index("decoder.onnx")]
    assert f"decoder.onnx ({decoder['parity']['cases']} cases)" in out
    assert f"{decoder['parity']['error']['logits']:.2e}" in out  # ONNX Runtime's distance to float64
    assert f"{decoder['parity']['torch_error']['logits']:.2e}" in out
    for heading in ("config", "files", "KV cache", "generation defaults", "inputs and outputs", "parity"):
        assert heading in out
    assert "past_key_values.{i}.key" in out and "(batch, 4, past_sequence, 32)" in out


def test_verify_passes_on_a_clean_copy_and_fails_on_a_flipped_byte(tmp_path: Path) -> None:
    copy = tmp_path / "gpt"
    shutil.copytree(EXPORTED / "gpt", copy)
    code, report = _inspect_json(str(copy), "--verify")
    assert code == 0 and report["verify"]["ok"]
    assert [c["path"] for c in report["verify"]["files"]] == [f["path"] for f in report["files"]]

    _flip_byte(copy / "blocks" / "decoder_layer_1.onnx")
    code, report = _inspect_json(str(copy), "--verify")
    assert code == 1 and not report["verify"]["ok"]
    failed = [c for c in report["verify"]["files"] if not c["ok"]]
    assert [c["path"] for c in failed] == ["blocks/decoder_layer_1.onnx"]
    assert "sha256" in failed[0]["problem"]
    result = runner.invoke(app, ["inspect", str(copy), "--verify"])
    assert result.exit_code == 1
    listed = len(_manifest("gpt")["files"])
    assert "FAILED" in result.stdout and f"verify failed: 1 of {listed} files" in result.stdout
    # Without --verify the folder is described from its manifest alone, so it still exits 0.
    assert runner.invoke(app, ["inspect", str(copy)]).exit_code == 0


def test_single_onnx_file_shows_io_metadata_and_its_manifest_entry() -> None:
    code, report = _inspect_json(str(EXPORTED / "gpt" / "decoder.onnx"))
    assert code == 0
    manifest = _manifest("gpt")
    assert report["type"] == "file" and report["size"] == (EXPORTED / "gpt" / "decoder.onnx").stat().st_size
    assert report["opset"] == manifest["opset"] and report["ir_version"] > 0
    assert report["producer"] == "pytorch"
    meta = report["onnxformer"]
    assert meta["family"] == "gpt" and meta["role"] == "decoder" and meta["config"] == manifest["config"]
    names = [t["name"] for t in report["inputs"]]
    assert names[:2] == ["input_ids", "attention_mask"] and "past_key_values.1.value" in names
    assert report["inputs"][1] == {
        "name": "attention_mask",
        "dtype": "int64",
        "shape": ["batch", "total_sequence"],
    }
    assert report["outputs"][0] == {"name": "logits", "dtype": "float32", "shape": ["batch", "sequence", 400]}
    export = report["export"]
    assert export["sha256_matches"] and export["entry"]["path"] == "decoder.onnx"
    assert export["entry"]["parity"]["max_abs_diff"] == manifest["files"][0]["parity"]["max_abs_diff"]

    result = runner.invoke(app, ["inspect", str(EXPORTED / "gpt" / "decoder.onnx")])
    assert result.exit_code == 0, result.output
    cases = manifest["files"][0]["parity"]["cases"]
    for text in (
        "ONNX file",
        "ai.onnx 18",
        "input_ids",
        "present.0.key",
        "gpt",
        f"decoder.onnx ({cases} cases)",
    ):
        assert text in result.stdout, text


def test_single_block_file_carries_kind_and_options() -> None:
    report = inspect_path(EXPORTED / "t5" / "blocks" / "decoder_layer_0.onnx", verify=True)
    assert report["onnxformer"]["kind"] == "decoder_block"
    assert report["onnxformer"]["options"]["cross_attention"] is True
    assert report["export"]["entry"]["role"] == "block" and report["verify"] == {"ok": True, "problem": None}


def test_single_file_verify_fails_when_altered_or_outside_an_export(tmp_path: Path) -> None:
    copy = tmp_path / "gpt"
    shutil.copytree(EXPORTED / "gpt", copy)
    _flip_byte(copy / "tokenizer.json")  # damage to another file does not concern decoder.onnx
    assert runner.invoke(app, ["inspect", str(copy / "decoder.onnx"), "--verify"]).exit_code == 0
    # Renaming a metadata key (same length) keeps the model loadable but breaks its sha256.
    decoder = copy / "decoder.onnx"
    decoder.write_bytes(decoder.read_bytes().replace(b"onnxformer.role", b"onnxformer.rolx"))
    code, report = _inspect_json(str(decoder), "--verify")
    assert code == 1 and not report["export"]["sha256_matches"] and "sha256" in report["verify"]["problem"]

    alone = tmp_path / "alone.onnx"
    shutil.copy(EXPORTED / "gpt" / "decoder.onnx", alone)
    code, report = _inspect_json(str(alone))
    assert code == 0 and report["export"] is None
    result = runner.invoke(app, ["inspect", str(alone), "--verify"])
    assert result.exit_code == 1 and "no export folder" in result.stdout.replace("\n", " ")


@pytest.mark.parametrize(
    ("make", "expected", "error"),
    [
        (lambda tmp: tmp / "missing", "does not exist", ManifestError),
        (lambda tmp: tmp, "no manifest.json", ManifestError),
        (lambda tmp: _write(tmp / "fake.onnx", b"this is not a protobuf"), "not an ONNX model", ExportError),
        (lambda tmp: _write(tmp / "notes.txt", b"hello"), "neither an export folder", ManifestError),
    ],
    ids=["missing", "not-an-export", "not-onnx", "other-file"],
)
def test_errors_give_one_line_and_exit_1(tmp_path: Path, make, expected: str, error: type) -> None:
    target = make(tmp_path)
    with pytest.raises(error, match=expected):
        inspect_path(target)
    result = runner.invoke(app, ["inspect", str(target)])
    assert result.exit_code == 1 and result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and expected in lines[0], result.stderr


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def test_installed_entry_point_inspects_without_torch_or_onnx() -> None:
    result = subprocess.run(
        [str(ENTRY), "inspect", str(EXPORTED / "t5"), "--json"], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["family"] == "t5" and len(report["files"]) == len(_manifest("t5")["files"])
    assert report["goldens"]["graphs"] == 7 and report["goldens"]["end_to_end"] == "goldens/end_to_end.json"

    code = """
import sys
from onnxformer.runtime.inspect import inspect_path
inspect_path(sys.argv[1], verify=True)
inspect_path(sys.argv[1] + "/decoder.onnx", verify=True)
leaked = sorted({"torch", "onnx", "onnxformer.builder"} & set(sys.modules))
assert not leaked, leaked
"""
    result = subprocess.run(
        [sys.executable, "-c", code, str(EXPORTED / "gpt")], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr
