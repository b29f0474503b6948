"""The builder's external data: a tiny GPT exported with its weights forced into `<graph>.data` files
loads in the runtime, passes its goldens and computes what the inline export computes; the default
(automatic) export of a small model stays inline; `externalize` itself on a hand-made graph."""

import json
import shutil
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from onnxformer.builder.export.external import (
    ALIGNMENT,
    EXTERNAL_THRESHOLD,
    externalize,
    wants_external,
)
from onnxformer.builder.export.models import export_checkpoint
from onnxformer.runtime import load
from onnxformer.runtime.check import check_export
from onnxformer.runtime.errors import ExportError, ManifestError
from onnxformer.runtime.folder import ExportFolder, GraphBytes, uses_external_data
from onnxformer.runtime.goldens import golden_cases, run_goldens
from onnxformer.runtime.session import create_session


@pytest.fixture(scope="module")
def external_gpt(tiny_checkpoints: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("external") / "gpt"
    # No blocks: they go through the same pipeline call, and they would double the export's ~15 s.
    export_checkpoint(tiny_checkpoints["gpt"], out, external_data=True, blocks=False)
    return out


def test_forced_external_export_loads_and_equals_the_inline_one(
    external_gpt: Path, model_exports: dict[str, Path]
) -> None:
    folder, inline = ExportFolder.open(external_gpt), ExportFolder.open(model_exports["gpt"])
    weights = {entry.path: entry for entry in folder.manifest.files if entry.weights_of is not None}
    onnx_files = [entry.path for entry in folder.manifest.files if entry.path.endswith(".onnx")]
    assert sorted(weights) == ["attentions.onnx.data", "decoder.onnx.data"]
    assert sorted(weights) == sorted(f"{path}.data" for path in onnx_files)
    assert all(weights[f"{path}.data"].weights_of == path for path in onnx_files)
    assert not [entry for entry in inline.manifest.files if entry.weights_of is not None]
    for path in onnx_files:
        assert (external_gpt / f"{path}.data").is_file()
        shrunk = inline.manifest.file(path).size - folder.manifest.file(path).size
        assert shrunk > weights[f"{path}.data"].size / 2 > 0  # (the rest: alignment padding)
    assert [check.problem for check in check_export(folder)] == [None] * len(folder.manifest.files)
    assert not [(r.file, r.label, r.problem) for r in run_goldens(folder) if not r.ok]
    diff, cases = 0.0, 0
    for path in folder.manifest.graphs.values():
        ours, theirs = create_session(folder.graph(path)), create_session(inline.graph(path))
        for case in golden_cases(folder):
            if case.graph.file == path:
                names = list(case.case.outputs)
                for a, b in zip(ours.run(case.inputs, names), theirs.run(case.inputs, names), strict=True):
                    diff = max(diff, float(np.abs(a - b).max()))
                cases += 1
    print(f"external vs inline tiny GPT graphs, {cases} golden cases: max abs diff {diff:.2e}")
    assert cases and diff == 0.0
    prompts = ["the cat", "a bird sat"]
    assert load(external_gpt).generate(prompts, max_new_tokens=6, seed=1) == load(
        model_exports["gpt"]
    ).generate(prompts, max_new_tokens=6, seed=1)


def test_the_external_graph_is_refused_when_its_weights_are_altered(external_gpt: Path, tmp_path) -> None:
    copy = tmp_path / "gpt"
    shutil.copytree(external_gpt, copy)
    data = bytearray((copy / "decoder.onnx.data").read_bytes())
    data[-1] ^= 0xFF
    (copy / "decoder.onnx.data").write_bytes(bytes(data))
    with pytest.raises(ManifestError, match=r"decoder\.onnx\.data does not match its sha256"):
        load(copy)


def test_the_automatic_default_keeps_small_models_inline(model_exports: dict[str, Path]) -> None:
    manifest = json.loads((model_exports["t5"] / "manifest.json").read_text())
    assert not [entry for entry in manifest["files"] if entry["kind"] == "weights"]
    assert not wants_external(EXTERNAL_THRESHOLD, None) and wants_external(EXTERNAL_THRESHOLD + 1, None)
    assert wants_external(10, True) and not wants_external(10**10, False)
    with pytest.raises(ExportError, match="external_data"):
        wants_external(10, "yes")


def _tiny_model() -> tuple[bytes, dict[str, np.ndarray]]:
    rng = np.random.default_rng(0)
    values = {
        "w": rng.standard_normal((8, 300)).astype(np.float32),  # 9600 bytes: moves
        "b": rng.standard_normal(300).astype(np.float32),  # 1200 bytes: moves
        "s": np.array([2.0], np.float32),  # 4 bytes: stays inline
        "ids": np.arange(400, dtype=np.int64) % 300,  # 3200 bytes: moves
    }
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["x", "w"], ["xw"]),
            helper.make_node("Add", ["xw", "b"], ["xb"]),
            helper.make_node("Mul", ["xb", "s"], ["y"]),
            helper.make_node("Gather", ["y", "ids"], ["z"], axis=1),
        ],
        "tiny",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2, 8])],
        [helper.make_tensor_value_info("z", onnx.TensorProto.FLOAT, [2, 400])],
        [numpy_helper.from_array(value, name) for name, value in values.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    return model.SerializeToString(), values


def test_externalize_moves_the_large_initializers_aligned() -> None:
    data, values = _tiny_model()
    model, weights = externalize(data, location="tiny.onnx.data")
    proto = onnx.load_from_string(model)
    moved = {}
    for tensor in proto.graph.initializer:
        if tensor.data_location == onnx.TensorProto.EXTERNAL:
            info = {entry.key: entry.value for entry in tensor.external_data}
            assert info["location"] == "tiny.onnx.data" and int(info["offset"]) % ALIGNMENT == 0
            moved[tensor.name] = (int(info["offset"]), int(info["length"]))
    assert sorted(moved) == ["b", "ids", "w"]
    for name, (offset, length) in moved.items():
        stored = np.frombuffer(weights[offset : offset + length], dtype=values[name].dtype)
        np.testing.assert_array_equal(stored.reshape(values[name].shape), values[name])
    x = np.random.default_rng(1).standard_normal((2, 8)).astype(np.float32)
    inline = create_session(data).run({"x": x})[0]
    initializers = {
        name: np.frombuffer(weights, values[name].dtype, length // values[name].itemsize, offset).reshape(
            values[name].shape
        )
        for name, (offset, length) in moved.items()
    }
    external = create_session(GraphBytes(model, initializers)).run({"x": x})[0]
    print(f"externalized hand-made graph: max abs diff {float(np.abs(external - inline).max()):.2e}")
    np.testing.assert_array_equal(external, inline)


def test_externalize_refuses_a_location_that_is_not_a_plain_name() -> None:
    data, _values = _tiny_model()
    for location in ("../w.data", "sub/w.data", "", ".."):
        with pytest.raises(ExportError, match="plain file name"):
            externalize(data, location=location)


def test_a_graph_past_the_threshold_moves_out_before_it_is_serialised(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The path a graph past protobuf's 2 GB takes (weights moved out of the in-memory ModelProto, then
    onnx.checker on the graph and its weights in a temporary folder, then parity on the graph as the
    runtime loads it), taken here by a small block under a lowered threshold."""
    from onnxformer.builder.export import external, pipeline
    from onnxformer.builder.export.blocks import block_graph, build_block
    from onnxformer.builder.export.catalog import block_options, encoder_spec

    monkeypatch.setattr(external, "EXTERNAL_THRESHOLD", 10_000)
    monkeypatch.setattr(pipeline, "EXTERNAL_THRESHOLD", 10_000)
    checked = []
    original = pipeline.check_graph_with_weights
    monkeypatch.setattr(pipeline, "check_graph_with_weights", lambda *a: checked.append(a) or original(*a))
    spec = encoder_spec(block_options("pre", "gelu"), "none")
    module = build_block(spec, seed=0)
    exported = pipeline.export_one(block_graph(spec, seed=0), module)
    graph, weights = exported.entries[0], exported.entries[1]
    assert len(checked) == 1, "the checker ran on the graph with its weights file"
    assert weights.path == graph.path + ".data" and weights.weights_of == graph.path
    assert (
        weights.size > 10_000
        and not uses_external_data(b"")
        and uses_external_data(exported.files[graph.path])
    )
    worst = max(graph.parity.max_abs_diff.values())
    print(f"{graph.path}: weights moved out ({weights.size} bytes), parity max abs diff {worst:.1e}")
    assert worst <= 1e-5
