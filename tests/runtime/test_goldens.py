"""The golden test data of the committed reference exports, run through the torch-free runtime."""

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from tamper import move_past_the_case_allowance, rewrite

from onnxformer.runtime.errors import ManifestError
from onnxformer.runtime.folder import ExportFolder
from onnxformer.runtime.goldens import golden_cases, run_end_to_end, run_graph_goldens
from onnxformer.runtime.tensorproto import read_tensor

EXPORTED = Path(__file__).resolve().parents[2] / "exported"
FAMILIES = ("gpt", "bert", "t5")


@pytest.mark.parametrize("family", FAMILIES)
def test_every_graph_golden_passes(family: str) -> None:
    results = run_graph_goldens(ExportFolder.open(EXPORTED / family))
    failed = [result for result in results if not result.ok]
    worst = max(result.max_abs_diff for result in results)
    print(f"{family}: {len(results)} graph goldens, max abs diff {worst:.2e}")
    assert results and not failed, failed[:3]
    assert worst <= 1e-5 + 1e-6 * 200  # the target with the relative term at trained-logit scale


@pytest.mark.parametrize("family", FAMILIES)
def test_every_end_to_end_golden_passes(family: str) -> None:
    results = run_end_to_end(ExportFolder.open(EXPORTED / family))
    failed = [result for result in results if not result.ok]
    assert results and not failed, failed[:3]
    kinds = {result.label.split()[0] for result in results}
    assert kinds == {"tokenize", "embed" if family == "bert" else "greedy"}


@pytest.mark.parametrize("family", FAMILIES)
def test_goldens_cover_every_onnx_file_and_the_required_shapes(family: str) -> None:
    manifest = ExportFolder.open(EXPORTED / family).manifest
    onnx_files = {entry.path for entry in manifest.files if entry.path.endswith(".onnx")}
    graphs = {graph.file: graph for graph in manifest.goldens.graphs}
    assert set(graphs) == onnx_files
    for file, graph in graphs.items():
        labels = " | ".join(case.label for case in graph.cases)
        assert "B=1" in labels and any(f"B={b}" in labels for b in (2, 3, 4)), (file, labels)
        assert len(graph.cases) >= 2, file
        if file == "decoder.onnx":
            assert "first step" in labels and "cached step" in labels and "T=1" in labels
    for file in ("decoder.onnx", "encoder.onnx"):
        if file in graphs:  # a long case: the model's whole context or close to it
            lengths = [
                int(part[2:])
                for c in graphs[file].cases
                for part in c.label.split()
                if part[:2] in ("T=", "S=")
            ]
            assert max(lengths) >= manifest.config["max_len"] - 4, (file, lengths)


@pytest.mark.parametrize("family", FAMILIES)
def test_end_to_end_texts_cover_scripts_and_the_empty_string(family: str) -> None:
    data = json.loads((EXPORTED / family / "goldens" / "end_to_end.json").read_text(encoding="utf-8"))
    texts = [item["text"] for item in data["tokenizer"]]
    assert "" in texts
    assert any("日本" in text for text in texts)
    assert any(ord(ch) > 0xFFFF for text in texts for ch in text)  # emoji outside the BMP
    assert any(not ch.isalnum() and not ch.isspace() and ch.isascii() for ch in texts[2])
    assert all(isinstance(i, int) for item in data["tokenizer"] for i in item["ids"])
    for item in data.get("greedy", []):  # 100x the golden atol: fp32 noise cannot flip a token here
        assert item["min_logit_margin"] > 1e-3, item["prompt"]
    reasons = {item["finish_reason"] for item in data.get("greedy", [])}
    assert not data.get("greedy") or reasons == {"stop", "length"}


def test_tensor_files_read_back_with_names_and_dtypes() -> None:
    export = ExportFolder.open(EXPORTED / "gpt")
    loaded = next(iter(golden_cases(export)))
    assert loaded.inputs["input_ids"].dtype == np.int64
    assert loaded.expected["logits"].dtype == np.float32
    empty = loaded.inputs["past_key_values.0.key"]
    assert empty.shape[2] == 0 and empty.size == 0  # a first step's empty cache


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"\x08",
        b"\x0a\x05\x01",
        b"\x10\x07\x4a\x03abc",
        b"\x08\x02\x10\x01\x4a\x04\x00\x00\x80\x3f",
        b"\xff" * 12,
    ],
)
def test_malformed_tensor_files_raise_a_typed_error(data: bytes) -> None:
    with pytest.raises(ManifestError, match="not a readable ONNX TensorProto"):
        read_tensor(data, source="x.pb")


def test_a_wrong_golden_output_fails_with_the_file_case_and_difference(tmp_path: Path) -> None:
    folder = tmp_path / "bert"
    shutil.copytree(EXPORTED / "bert", folder)
    case = ExportFolder.open(folder).manifest.goldens.graphs[0].cases[1]
    relative = case.output_files()[0]
    data = bytearray((folder / relative).read_bytes())
    data[-2] ^= 0x40  # a high bit of the last float: a large change
    rewrite(folder, relative, bytes(data))
    results = run_graph_goldens(ExportFolder.open(folder))
    failed = [result for result in results if not result.ok]
    assert len(failed) == 1
    assert failed[0].file == "encoder.onnx" and failed[0].label == case.label
    assert "differs by" in failed[0].problem


def test_a_case_allowance_is_enforced_where_the_graph_tolerance_would_pass(tmp_path: Path) -> None:
    """A difference above the case's own allowance (the float64 figures) but below the graph's atol + rtol
    x max |golden| fails: the per-case allowances are what the runtime applies."""
    folder = tmp_path / "bert"
    shutil.copytree(EXPORTED / "bert", folder)
    moved = move_past_the_case_allowance(folder)
    failed = [result for result in run_graph_goldens(ExportFolder.open(folder)) if not result.ok]
    print(f"{moved}: {[result.problem for result in failed]}")
    assert [(result.file, result.label) for result in failed] == [(moved.file, moved.label)]
    assert moved.allowed < failed[0].max_abs_diff < moved.graph_wide
    assert f"{moved.output} differs by" in failed[0].problem


def test_a_tampered_golden_is_refused_before_use(tmp_path: Path) -> None:
    folder = tmp_path / "gpt"
    shutil.copytree(EXPORTED / "gpt", folder)
    relative = ExportFolder.open(folder).manifest.goldens.graphs[0].cases[0].input_files()[0]
    data = bytearray((folder / relative).read_bytes())
    data[-1] ^= 1
    (folder / relative).write_bytes(bytes(data))
    with pytest.raises(ManifestError, match="sha256"):
        run_graph_goldens(ExportFolder.open(folder))


def test_a_wrong_greedy_golden_is_reported(tmp_path: Path) -> None:
    folder = tmp_path / "t5"
    shutil.copytree(EXPORTED / "t5", folder)
    path = folder / "goldens" / "end_to_end.json"
    data = json.loads(path.read_text(encoding="utf-8"))
    data["greedy"][0]["output_ids"] = [*data["greedy"][0]["output_ids"], 7]
    rewrite(folder, "goldens/end_to_end.json", json.dumps(data).encode())
    results = run_end_to_end(ExportFolder.open(folder))
    failed = [result for result in results if not result.ok]
    assert len(failed) == 1 and failed[0].label.startswith("greedy") and "golden" in failed[0].problem
