"""External data, allowed the safe way: only from a weights file the manifest lists for that graph, with
its size and sha256 checked, handed to ONNX Runtime as the checked bytes. Torch-free and onnx-free: the
external-data folders are made from a copy of the committed exported/gpt by rewriting its decoder.onnx
with the runtime's own protobuf writer (`_externalize`, what builder/export/external.py does with onnx).
"""

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from onnxformer.runtime import load, protobuf
from onnxformer.runtime.check import check_export
from onnxformer.runtime.errors import ManifestError
from onnxformer.runtime.folder import ExportFolder, GraphBytes, sha256_bytes
from onnxformer.runtime.goldens import golden_cases, run_goldens
from onnxformer.runtime.session import create_session

EXPORTED = Path(__file__).resolve().parents[2] / "exported"
GRAPH = "decoder.onnx"
WEIGHTS = "decoder.onnx.data"
MIN_BYTES = 1024  # initializers at least this big move out (as the builder's MIN_TENSOR_BYTES)


def _externalize(model: bytes, location_of, *, min_bytes: int = MIN_BYTES) -> tuple[bytes, bytes, list]:
    """The model with its big main-graph initializers (raw_data) moved to external data, the weights
    bytes, and (name, offset, length) of each moved tensor. `location_of(index, offset, length)` gives
    (location, offset, length) to write for the index-th moved tensor: the hostile cases lie there."""
    weights, moved, out = bytearray(), [], bytearray()
    for number, wire, value in protobuf.fields(model):
        if number != 7:
            out += _raw_field(number, wire, value)
            continue
        graph = bytearray()
        for inner, inner_wire, item in protobuf.fields(value):
            if inner == 5:
                item = _external_tensor(bytes(item), weights, moved, location_of, min_bytes)
            graph += _raw_field(inner, inner_wire, item)
        out += protobuf.field(7, bytes(graph))
    return bytes(out), bytes(weights), moved


def _external_tensor(tensor: bytes, weights: bytearray, moved: list, location_of, min_bytes: int) -> bytes:
    fields = list(protobuf.fields(tensor))
    raw = next((bytes(v) for n, _w, v in fields if n == 9), None)
    if raw is None or len(raw) < min_bytes:
        return tensor
    name = next(bytes(v).decode() for n, _w, v in fields if n == 8)
    weights += b"\0" * (-len(weights) % 64)
    offset = len(weights)
    weights += raw
    location, offset_text, length_text = location_of(len(moved), offset, len(raw))
    moved.append((name, offset, len(raw)))
    kept = b"".join(_raw_field(n, w, v) for n, w, v in fields if n != 9)
    entries = [("location", location), ("offset", offset_text), ("length", length_text)]
    for key, text in entries:
        if text is not None:
            kept += protobuf.field(13, protobuf.field(1, key.encode()) + protobuf.field(2, text.encode()))
    return kept + protobuf.field(14, 1)


def _raw_field(number: int, wire: int, value) -> bytes:
    if wire == protobuf.VARINT:
        return protobuf.field(number, value)
    if wire == protobuf.LENGTH:
        return protobuf.field(number, bytes(value))
    return protobuf.encode_varint(number << 3 | wire) + bytes(value)  # fixed32 / fixed64


def _honest(index: int, offset: int, length: int) -> tuple[str, str, str]:
    return WEIGHTS, str(offset), str(length)


def _make(
    folder: Path,
    location_of=_honest,
    *,
    listed: str | None = WEIGHTS,
    kind: str = "weights",
    graph: str = GRAPH,
    owner: str | None = None,
) -> list:
    """Rewrite folder's decoder.onnx (or `graph`) to keep its weights in decoder.onnx.data (or `listed`)
    and fix the manifest."""
    model, weights, moved = _externalize((folder / graph).read_bytes(), location_of)
    assert moved, "the reference graph has initializers to move"
    (folder / graph).write_bytes(model)
    (folder / (listed or WEIGHTS)).write_bytes(weights)
    manifest = json.loads((folder / "manifest.json").read_text())
    for entry in manifest["files"]:
        if entry["path"] == graph:
            entry["sha256"], entry["size"] = sha256_bytes(model), len(model)
    if listed is not None:
        manifest["files"].append(
            {
                "path": listed,
                "sha256": sha256_bytes(weights),
                "size": len(weights),
                "kind": kind,
                "options": {"graph": owner or graph},
                "inputs": [],
                "outputs": [],
            }
        )
    (folder / "manifest.json").write_text(json.dumps(manifest))
    return moved


@pytest.fixture
def export(tmp_path: Path) -> Path:
    folder = tmp_path / "export" / "gpt"
    shutil.copytree(EXPORTED / "gpt", folder)
    return folder


def test_an_external_data_export_loads_passes_its_goldens_and_equals_the_inline_one(export: Path) -> None:
    moved = _make(export)
    moved_bytes = sum(length for _name, _offset, length in moved)
    inline = ExportFolder.open(EXPORTED / "gpt")
    folder = ExportFolder.open(export)
    assert folder.manifest.file(WEIGHTS).weights_of == GRAPH
    assert folder.manifest.file(GRAPH).size < inline.manifest.file(GRAPH).size - moved_bytes + 64 * len(moved)
    folder.verify()
    assert [check.problem for check in check_export(folder)] == [None] * len(folder.manifest.files)
    failed = [(r.file, r.label, r.problem) for r in run_goldens(folder) if not r.ok]
    assert not failed
    graph = folder.graph(GRAPH)
    assert sorted(graph.initializers) == sorted(name for name, _o, _l in moved)
    session, reference = create_session(graph), create_session(inline.graph(GRAPH))
    diff = 0.0
    for case in golden_cases(folder):
        if case.graph.file == GRAPH:
            outputs = list(case.case.outputs)
            for ours, theirs in zip(
                session.run(case.inputs, outputs), reference.run(case.inputs, outputs), strict=True
            ):
                diff = max(diff, float(np.abs(ours - theirs).max()))
    print(f"external vs inline decoder over the goldens: max abs diff {diff:.2e}, {len(moved)} tensors moved")
    assert diff == 0.0
    ours = load(export).generate(["the cat", "a dog"], max_new_tokens=8, seed=3)
    assert ours == load(EXPORTED / "gpt").generate(["the cat", "a dog"], max_new_tokens=8, seed=3)


def test_onnx_runtime_never_opens_the_weights_by_path(export: Path, tmp_path: Path) -> None:
    """The session runs with no weights file next to the model, and a decoy in the working folder (where
    ONNX Runtime would look for a location of a model given as bytes) is not read."""
    _make(export)
    graph = ExportFolder.open(export).graph(GRAPH)
    case = next(case for case in golden_cases(ExportFolder.open(export)) if case.graph.file == GRAPH)
    work = tmp_path / "work"
    work.mkdir()
    (work / WEIGHTS).write_bytes(b"\x7f" * (export / WEIGHTS).stat().st_size)  # a decoy of the same size
    (export / WEIGHTS).unlink()
    before = Path.cwd()
    os.chdir(work)
    try:
        outputs = create_session(graph).run(case.inputs, list(case.case.outputs))
    finally:
        os.chdir(before)
    for name, got in zip(case.case.outputs, outputs, strict=True):
        np.testing.assert_allclose(got, case.expected[name], atol=1e-4, rtol=1e-4)  # the decoy holds 3.4e38s


def test_model_bytes_naming_external_data_are_refused_without_their_tensors(export: Path) -> None:
    _make(export)
    folder = ExportFolder.open(export)
    with pytest.raises(ManifestError, match=r"ExportFolder\.graph"):
        create_session(folder.read(GRAPH))
    graph = folder.graph(GRAPH)
    partial = dict(graph.initializers)
    partial.pop(next(iter(partial)))
    with pytest.raises(ManifestError, match="external data"):
        create_session(GraphBytes(graph.model, partial))


def test_old_folders_without_weights_entries_load_unchanged() -> None:
    for family in ("gpt", "bert", "t5"):
        folder = ExportFolder.open(EXPORTED / family)
        assert not [entry for entry in folder.manifest.files if entry.weights_of is not None]
        for path in folder.manifest.graphs.values():
            assert folder.graph(path).initializers == {}


def _fails(folder: Path, match: str) -> None:
    """Verifying, checking and loading all refuse the folder with a ManifestError that says why."""
    with pytest.raises(ManifestError, match=match):
        ExportFolder.open(folder).verify()
    with pytest.raises(ManifestError, match=match):
        ExportFolder.open(folder).graph(GRAPH)
    with pytest.raises(ManifestError, match=match):
        load(folder)


def _first(location: str | None = WEIGHTS, offset: str | None = None, length: str | None = None):
    """A location_of that lies about the first moved tensor only."""

    def location_of(index: int, real_offset: int, real_length: int) -> tuple:
        if index:
            return _honest(index, real_offset, real_length)
        return (
            location,
            str(real_offset) if offset is None else offset,
            str(real_length) if length is None else length,
        )

    return location_of


@pytest.mark.parametrize(
    ("location", "match"),
    [
        ("../canary.bin", "not a plain relative path"),
        ("/etc/passwd", "not a plain relative path"),
        ("sub/../decoder.onnx.data", "not a plain relative path"),
        ("C:\\x", "not a plain relative path"),
        ("*/_ORT_MEM_ADDR_/*", "_ORT_MEM_ADDR_"),
        ("tokenizer.json", "does not list as decoder.onnx's weights"),  # listed, but not as weights
        ("unlisted.bin", "does not list as decoder.onnx's weights"),
    ],
)
def test_a_location_other_than_the_listed_weights_is_refused(
    export: Path, tmp_path: Path, location: str, match: str
) -> None:
    canary = tmp_path / "export" / "canary.bin"
    canary.write_bytes(b"\0" * 1_000_000)
    (export / "unlisted.bin").write_bytes(b"\0" * 1_000_000)
    _make(export, _first(location))
    _fails(export, match)


@pytest.mark.parametrize(
    ("offset", "length", "match"),
    [
        ("99999999", None, "past the end"),
        ("-4", None, "not a decimal number"),
        ("0x10", None, "not a decimal number"),
        (None, "4", "needs"),  # a length that is not the tensor's size
        (None, "99999999999", "needs"),
        (" 12", None, "not a decimal number"),
    ],
)
def test_an_offset_or_length_off_the_file_is_refused(export: Path, offset, length, match: str) -> None:
    _make(export, _first(offset=offset, length=length))
    _fails(export, match)


def test_the_last_tensor_running_past_the_end_of_the_file_is_refused(export: Path) -> None:
    _make(export)
    weights = (export / WEIGHTS).read_bytes()[:-4]  # truncated, and the manifest made to agree
    (export / WEIGHTS).write_bytes(weights)
    manifest = json.loads((export / "manifest.json").read_text())
    entry = next(entry for entry in manifest["files"] if entry["path"] == WEIGHTS)
    entry["sha256"], entry["size"] = sha256_bytes(weights), len(weights)
    (export / "manifest.json").write_text(json.dumps(manifest))
    _fails(export, "past the end")


def test_altered_weights_are_refused_by_their_sha256(export: Path) -> None:
    _make(export)
    data = bytearray((export / WEIGHTS).read_bytes())
    data[100] ^= 1
    (export / WEIGHTS).write_bytes(bytes(data))
    _fails(export, "does not match its sha256")


def test_truncated_weights_are_refused_by_their_size(export: Path) -> None:
    _make(export)
    (export / WEIGHTS).write_bytes((export / WEIGHTS).read_bytes()[:-1])
    _fails(export, "truncated or altered")


@pytest.mark.parametrize("listing", [{"listed": None}, {"owner": "attentions.onnx"}])
def test_weights_not_listed_or_listed_for_another_graph_are_refused(export: Path, listing: dict) -> None:
    _make(export, **listing)
    _fails(export, "does not list as decoder.onnx's weights")


def test_weights_listed_with_another_kind_are_refused(export: Path) -> None:
    _make(export, kind="extra")
    _fails(export, "does not list as decoder.onnx's weights")


def test_weights_entries_are_checked_when_the_manifest_is_read(export: Path) -> None:
    _make(export)
    manifest = json.loads((export / "manifest.json").read_text())
    entry = next(entry for entry in manifest["files"] if entry["path"] == WEIGHTS)
    for options, match in (
        ({"graph": "missing.onnx"}, "not a graph in files"),
        ({"graph": WEIGHTS}, "not a graph in files"),
        ({}, "options"),
        ({"graph": GRAPH, "also": 1}, "options"),
    ):
        entry["options"] = options
        (export / "manifest.json").write_text(json.dumps(manifest))
        with pytest.raises(ManifestError, match=match):
            ExportFolder.open(export)


def test_external_data_outside_the_main_initializers_is_refused(export: Path) -> None:
    """A Constant node's tensor attribute naming the listed weights is still refused."""
    _make(export)
    tensor = (
        protobuf.field(1, 4)
        + protobuf.field(2, 1)
        + protobuf.field(8, b"c")
        + protobuf.field(13, protobuf.field(1, b"location") + protobuf.field(2, WEIGHTS.encode()))
        + protobuf.field(14, 1)
    )
    node = protobuf.field(5, protobuf.field(5, tensor))  # NodeProto.attribute[].t
    model = (export / GRAPH).read_bytes() + protobuf.field(7, protobuf.field(1, node))
    (export / GRAPH).write_bytes(model)
    manifest = json.loads((export / "manifest.json").read_text())
    entry = next(entry for entry in manifest["files"] if entry["path"] == GRAPH)
    entry["sha256"], entry["size"] = sha256_bytes(model), len(model)
    (export / "manifest.json").write_text(json.dumps(manifest))
    _fails(export, "allowed only for the main graph's initializers")


def test_a_triton_repository_carries_the_external_weights_beside_model_onnx(tmp_path: Path) -> None:
    from onnxformer.runtime.serving.triton import write_repository

    bert = tmp_path / "bert"
    shutil.copytree(EXPORTED / "bert", bert)
    location = "encoder.onnx.data"
    _make(
        bert,
        lambda index, offset, length: (location, str(offset), str(length)),
        listed=location,
        graph="encoder.onnx",
    )
    names = write_repository(bert, tmp_path / "repo")
    version = tmp_path / "repo" / names[0] / "1"
    assert (version / "model.onnx").read_bytes() == (bert / "encoder.onnx").read_bytes()
    assert (version / location).read_bytes() == (bert / location).read_bytes()
