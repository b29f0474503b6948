"""Per-block export: every block and option exported with dynamic axes, checked, loaded, and proven equal to
PyTorch at shapes other than the trace shapes; a parity miss is fatal."""

import json
import re
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch

from onnxformer.builder.export import (
    BlockDims,
    ParityRule,
    block_catalog,
    build_block,
    export_block,
    export_blocks,
)
from onnxformer.builder.export.samples import TRACE_CASE, Case, make_inputs, parity_cases
from onnxformer.runtime.errors import ExportError, ParityError
from onnxformer.runtime.folder import ExportFolder, sha256_bytes
from onnxformer.runtime.manifest import MANIFEST_NAME

CATALOG = block_catalog()
DYNAMIC = {"batch", "sequence", "past_sequence", "total_sequence", "memory_sequence"}


def test_catalog_covers_every_option() -> None:
    seen: dict[str, set] = {}
    for spec in CATALOG:
        for key, value in spec.options.items():
            seen.setdefault(f"{spec.kind}.{key}", set()).add(
                tuple(value) if isinstance(value, list) else value
            )
    assert seen["encoder_block.residual.position"] == {"pre", "post"}
    assert seen["decoder_block.residual.position"] == {"pre", "post"}
    assert seen["encoder_block.ffn.activation"] == {"relu", "gelu"}
    assert seen["decoder_block.ffn.activation"] == {"relu", "gelu", "silu", "gelu_tanh"}
    assert seen["decoder_block.residual.sandwich"] == {True, False}
    assert seen["decoder_block.residual.parallel"] == {True, False}
    assert seen["decoder_block.attention.sliding_window"] == {None, 4}
    assert seen["positional_encoding.rotary.fraction"] == {0.5, 1.0}
    assert seen["feed_forward.ffn.activation"] == {"relu", "gelu", "gelu_tanh", "silu"}
    assert seen["feed_forward.ffn.gated"] == {True, False}
    assert seen["feed_forward.ffn.bias"] == {True, False}
    assert seen["residual_norm.residual.position"] == {"pre", "post"}
    assert seen["residual_norm.norm.kind"] == {"rms"}  # "layer" is every other residual block's default
    assert seen["norm.norm.kind"] == {"rms"}
    assert seen["norm.norm.weight_offset"] == {1.0}
    assert seen["multi_head_attention.attention.n_kv_heads"] == {1, BlockDims().n_heads // 2}
    assert {"head_dim", "scale", "qkv_bias", "out_bias", "qk_norm", "softcap"} <= {
        key.split(".", 2)[2] for key in seen if key.startswith("multi_head_attention.attention.")
    }
    assert seen["positional_encoding.rotary.scaling.kind"] == {"linear", "llama3"}
    assert seen["positional_encoding.rotary.base"] == {500000.0, 10000.0}
    assert seen["decoder_block.norm.kind"] == {"layer", "rms"}
    assert seen["decoder_block.ffn.gated"] == {True, False}
    assert seen["positional_encoding.position"] == {"sinusoidal", "learned", "relative", "rotary"}
    assert seen["encoder_block.position"] == {"none", "relative", "rotary"}
    assert seen["decoder_block.position"] == {"none", "relative", "rotary"}
    assert seen["decoder_block.cross_attention"] == {True, False}
    assert seen["decoder_block.cached"] == {True, False}
    assert seen["multi_head_attention.cross_attention"] == {True, False}
    assert seen["multi_head_attention.causal"] == {True, False}
    assert seen["scaled_dot_product_attention.causal"] == {True, False}
    assert len({spec.name for spec in CATALOG}) == len(CATALOG)


@pytest.mark.parametrize("spec", CATALOG, ids=lambda spec: spec.name)
def test_parity_cases_avoid_trace_shape_and_cover_edges(spec) -> None:
    cases = parity_cases(spec)
    assert TRACE_CASE not in cases
    lengths = {case.sequence for case in cases}
    assert {1, 3, 17, 64} <= lengths
    if spec.max_positions is None:
        assert 300 in lengths
    assert {case.batch for case in cases} == {1, 4}
    if spec.cached:
        assert {case.past for case in cases} == {0, 5}


def test_the_readme_names_every_block_group_and_the_count() -> None:
    """README.md's per-block section: as many files as the catalogue has blocks, every group named."""
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    section = readme[readme.index("## Per-block ONNX export") :].split("Every file:")[0]
    (count,) = re.findall(r"— (\d+) files", section)
    assert int(count) == len(CATALOG)
    groups = {spec.name.split(".")[0] for spec in CATALOG}
    assert {group for group in groups if f"(`{group}`" not in section} == set()


def test_manifest_lists_every_block_with_sha_and_io(blocks_export: Path) -> None:
    folder = ExportFolder.open(blocks_export)
    manifest = folder.manifest
    graphs = [entry for entry in manifest.files if entry.kind != "golden"]
    assert [entry.path for entry in graphs] == [spec.filename for spec in CATALOG]
    assert manifest.export_kind == "blocks"
    assert {"torch", "onnx", "onnxruntime"} <= set(manifest.versions)
    for entry in manifest.files:
        assert sha256_bytes((blocks_export / entry.path).read_bytes()) == entry.sha256
    assert all(entry.inputs and entry.outputs for entry in graphs)
    on_disk = sorted(p.name for p in blocks_export.iterdir())
    assert on_disk == sorted([*(spec.filename for spec in CATALOG), MANIFEST_NAME, "goldens"])
    listed = {entry.path for entry in manifest.files}
    assert {
        p.relative_to(blocks_export).as_posix() for p in (blocks_export / "goldens").rglob("*.pb")
    } <= listed


@pytest.mark.parametrize("spec", CATALOG, ids=lambda spec: spec.name)
def test_exported_block_is_checked_dynamic_and_within_tolerance(blocks_export: Path, spec) -> None:
    path = blocks_export / spec.filename
    model = onnx.load(path)
    onnx.checker.check_model(model, full_check=True)
    entry = ExportFolder.open(blocks_export).manifest.file(spec.filename)
    # Every axis the spec names as dynamic is symbolic in the graph, never a traced size.
    for item, graph_input in zip(spec.inputs, entry.inputs, strict=True):
        assert graph_input.name == item.name
        for axis, name in enumerate(item.dims):
            if name in DYNAMIC:
                assert isinstance(graph_input.shape[axis], str), (spec.name, item.name, graph_input.shape)
    metadata = {prop.key: prop.value for prop in model.metadata_props}
    assert metadata["onnxformer.kind"] == spec.kind
    assert json.loads(metadata["onnxformer.options"]) == spec.options
    parity = entry.parity
    print(f"{spec.name}: {parity.cases} cases, max abs diff {parity.max_abs_diff}")
    assert parity.cases == len(parity_cases(spec))
    assert set(parity.max_abs_diff) == set(spec.outputs)
    assert max(parity.max_abs_diff.values()) <= 1e-5


@pytest.mark.parametrize("spec", CATALOG, ids=lambda spec: spec.name)
def test_onnx_file_matches_pytorch_at_unseen_shape(blocks_export: Path, spec) -> None:
    """Independent of the exporter's own check: rebuild the module and compare at B=3, T=7, P=2, S=9."""
    module = build_block(spec, seed=0)
    session = ort.InferenceSession(str(blocks_export / spec.filename), providers=["CPUExecutionProvider"])
    inputs = make_inputs(spec, BlockDims(), Case(3, 7, 2, 9), generator=torch.Generator().manual_seed(7))
    with torch.no_grad():
        expected = module(**inputs)
    got = session.run(None, {name: tensor.numpy() for name, tensor in inputs.items()})
    worst = max(float(np.max(np.abs(e.numpy() - g))) for e, g in zip(expected, got, strict=True))
    print(f"{spec.name}: max abs diff {worst:.2e} at B=3 T=7 P=2 S=9")
    assert worst <= 1e-5


def test_parity_miss_is_fatal_and_writes_nothing(tmp_path: Path) -> None:
    out = tmp_path / "strict"
    with pytest.raises(ParityError, match=r"from the float64 answer .*\(allowed 0 = 0 x"):
        export_blocks(out, names=["ffn.gelu"], rule=ParityRule(factor=0.0, floor=0.0))
    assert not out.exists()
    assert list(tmp_path.iterdir()) == []  # no temporary folder left behind


def test_sabotaged_graph_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """If the graph ONNX Runtime runs differs from the module, parity must fail, not warn."""
    from onnxformer.builder.export import pipeline

    real = pipeline.export_graph

    def perturbed(module, example, **kwargs):
        model = real(module, example, **kwargs)
        for init in model.graph.initializer:
            if init.data_type == onnx.TensorProto.FLOAT and "bias" in init.name:
                values = onnx.numpy_helper.to_array(init).copy()
                values.flat[0] += 1e-3
                init.CopyFrom(onnx.numpy_helper.from_array(values, init.name))
                break
        return model

    monkeypatch.setattr(pipeline, "export_graph", perturbed)
    spec = next(s for s in CATALOG if s.name == "ffn.relu")
    with pytest.raises(ParityError, match=r"ffn\.relu"):
        export_block(spec)


def test_re_export_replaces_atomically(tmp_path: Path) -> None:
    out = tmp_path / "blocks"
    export_blocks(out, names=["residual.pre_ln"])
    export_blocks(out, names=["residual.post_ln"])
    assert sorted(p.name for p in out.iterdir()) == ["goldens", MANIFEST_NAME, "residual.post_ln.onnx"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["blocks"]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"names": ["no_such_block"]}, r"unknown block\(s\) \['no_such_block'\]; choose from"),
        ({"names": ["ffn.gelu"], "opset": 5}, "opset must be an integer from 17 to 23"),
    ],
)
def test_exporter_rejects_bad_arguments(tmp_path: Path, kwargs, message) -> None:
    with pytest.raises(ExportError, match=message):
        export_blocks(tmp_path / "out", **kwargs)


def test_exporter_never_replaces_a_foreign_folder(tmp_path: Path) -> None:
    precious = tmp_path / "mine"
    precious.mkdir()
    (precious / "notes.txt").write_text("keep me")
    with pytest.raises(ExportError, match="not an onnxformer export"):
        export_blocks(precious, names=["residual.pre_ln"])
    assert (precious / "notes.txt").read_text() == "keep me"
    a_file = tmp_path / "file.onnx"
    a_file.write_bytes(b"x")
    with pytest.raises(ExportError, match="is a file"):
        export_blocks(a_file, names=["residual.pre_ln"])
    assert a_file.read_bytes() == b"x"


def test_learned_positions_refuse_lengths_past_the_table() -> None:
    from onnxformer.builder.layers import LearnedPositionalEmbedding
    from onnxformer.runtime.errors import InputError

    table = LearnedPositionalEmbedding(BlockDims().max_len, 8)
    positions = torch.arange(BlockDims().max_len + 1)[None]
    with pytest.raises(InputError, match="max_len=128"):
        table(positions)
