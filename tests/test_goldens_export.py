"""Goldens written at export: the block export's, the TensorProto reader against `onnx`, and `verify`."""

import json
import shutil
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import numpy_helper
from typer.testing import CliRunner

from onnxformer.builder.export.catalog import block_catalog
from onnxformer.builder.export.goldens import block_golden_labels
from onnxformer.builder.export.samples import parity_cases
from onnxformer.cli.main import app
from onnxformer.runtime.folder import ExportFolder
from onnxformer.runtime.goldens import run_graph_goldens
from onnxformer.runtime.tensorproto import read_tensor

EXPORTED = Path(__file__).resolve().parents[1] / "exported"


@pytest.mark.parametrize(
    "array",
    [
        np.random.default_rng(0).standard_normal((2, 3, 4)).astype(np.float32),
        np.arange(-5, 5, dtype=np.int64).reshape(2, 5) * (1 << 40),
        np.zeros((1, 4, 0, 8), dtype=np.float32),
        np.array([True, False, True]),
        np.linspace(-2, 2, 6, dtype=np.float16),
        np.array([1.5, -2.25], dtype=np.float64),
        np.array([7, -8], dtype=np.int32),
    ],
)
def test_the_reader_matches_onnx_numpy_helper(array: np.ndarray) -> None:
    name, value = read_tensor(numpy_helper.from_array(array, "t").SerializeToString())
    assert name == "t" and value.dtype == array.dtype and value.shape == array.shape
    np.testing.assert_array_equal(value, array)


def test_the_reader_takes_typed_fields_as_well_as_raw_data() -> None:
    floats = onnx.helper.make_tensor("f", onnx.TensorProto.FLOAT, [2, 2], [1.0, 2.0, 3.0, 4.5])
    ints = onnx.helper.make_tensor("i", onnx.TensorProto.INT64, [3], [1, -2, 1 << 50])
    assert read_tensor(floats.SerializeToString())[1].tolist() == [[1.0, 2.0], [3.0, 4.5]]
    assert read_tensor(ints.SerializeToString())[1].tolist() == [1, -2, 1 << 50]


def test_block_goldens_cover_first_and_cached_steps_padding_and_length() -> None:
    for spec in block_catalog():
        cases = parity_cases(spec)
        labels = block_golden_labels(cases)
        assert any(label.startswith("B=1 T=1 ") for label in labels), spec.name
        assert any(label.startswith("B=4 T=17 ") for label in labels), spec.name
        longest = max(case.sequence for case in cases if case.batch == 1)
        assert any(label.startswith(f"B=1 T={longest} ") for label in labels), spec.name
        if spec.cached:
            assert any(" P=0 " in label for label in labels) and any(" P=5 " in label for label in labels)


def test_the_block_export_carries_goldens_for_every_file_and_they_pass(blocks_export: Path) -> None:
    export = ExportFolder.open(blocks_export)
    onnx_files = {entry.path for entry in export.manifest.files if entry.path.endswith(".onnx")}
    assert {graph.file for graph in export.manifest.goldens.graphs} == onnx_files
    assert export.manifest.goldens.end_to_end is None
    results = run_graph_goldens(export)
    worst = max(result.max_abs_diff for result in results)
    print(f"{len(results)} block goldens, max abs diff {worst:.2e}")
    assert all(result.ok for result in results), [r for r in results if not r.ok][:3]
    assert len(results) >= 3 * len(onnx_files)


def test_verify_prints_the_goldens_and_fails_on_a_broken_one(tmp_path: Path) -> None:
    runner = CliRunner()
    ok = runner.invoke(app, ["verify", str(EXPORTED / "gpt"), "--json"])
    assert ok.exit_code == 0, ok.output
    payload = json.loads(ok.output)
    assert payload["ok"] and payload["goldens"] and all(g["ok"] for g in payload["goldens"])
    assert {g["file"] for g in payload["goldens"]} >= {"decoder.onnx", "end_to_end"}

    folder = tmp_path / "gpt"
    shutil.copytree(EXPORTED / "gpt", folder)
    end_to_end = folder / "goldens" / "end_to_end.json"
    end_to_end.write_text(end_to_end.read_text().replace('"ids": [', '"ids": [9, ', 1))
    broken = runner.invoke(app, ["verify", str(folder), "--json"])
    assert broken.exit_code == 1
    files = {f["path"]: f for f in json.loads(broken.output)["files"]}
    assert "altered" in files["goldens/end_to_end.json"]["problem"]
    table = runner.invoke(app, ["verify", str(folder)])
    assert table.exit_code == 1 and "goldens not run" in table.output


def test_cases_past_the_size_cap_are_proven_but_not_shipped() -> None:
    from onnxformer.builder.export.goldens import GOLDEN_CASE_BYTES, GoldenRecorder
    from onnxformer.builder.export.parity import MeasuredCase
    from onnxformer.runtime.manifest import TensorSpec

    def case(recorder: GoldenRecorder, label: str, floats: int) -> None:
        x = np.zeros((1, floats), dtype=np.float32)
        recorder(MeasuredCase(label, {"x": x}, {"y": x}, {"y": 0.0}, {"y": 0.0}))

    inputs, outputs = (TensorSpec("x", "float32", (1, "n")),), (TensorSpec("y", "float32", (1, "n")),)
    big = GOLDEN_CASE_BYTES // 8 + 1  # input + output just past the cap
    recorder = GoldenRecorder()
    for label, size in (("small", 16), ("big", big), ("medium", 1024)):
        case(recorder, label, size)
    _, graph = recorder.write("g.onnx", inputs, outputs)
    assert [c.label for c in graph.cases] == ["small", "medium"]
    only_big = GoldenRecorder()
    for label, size in (("bigger", big * 2), ("big", big)):
        case(only_big, label, size)
    _, graph = only_big.write("g.onnx", inputs, outputs)
    assert [c.label for c in graph.cases] == ["big"], "a graph keeps at least its smallest case"
