"""The manifest schema (runtime side): round trip and one clear error per malformed field."""

import json

import pytest

from onnxformer.runtime.errors import ManifestError
from onnxformer.runtime.manifest import FORMAT_VERSION, FileEntry, Manifest, Parity, TensorSpec


def _manifest() -> Manifest:
    entry = FileEntry(
        path="ffn.gelu.onnx",
        sha256="a" * 64,
        size=10,
        kind="feed_forward",
        options={"activation": "gelu"},
        inputs=(TensorSpec("hidden_states", "float32", ("batch", "sequence", 64)),),
        outputs=(TensorSpec("output", "float32", ("batch", "sequence", 64)),),
        parity=Parity(1e-5, 10, {"output": 2e-7}, ("B=1 T=1 P=0 S=4",)),
    )
    return Manifest(export_kind="blocks", opset=18, versions={"torch": "2.13.0"}, files=(entry,))


def test_round_trip() -> None:
    manifest = _manifest()
    assert Manifest.from_json(manifest.to_json()) == manifest


def _mutated(change) -> str:
    data = json.loads(_manifest().to_json())
    change(data)
    return json.dumps(data)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d.pop("files"), r"files is missing"),
        (lambda d: d.update(opset="18"), r"opset must be int, got str"),
        (lambda d: d.update(opset=True), r"opset must be int, got bool"),
        (lambda d: d.update(format_version=FORMAT_VERSION + 1), r"not supported .* upgrade onnxformer"),
        (lambda d: d.update(format_version=0), r"not supported .* re-export"),
        (lambda d: d["files"][0].update(sha256="xyz"), r"files\[0\]\.sha256 must be 64 lowercase hex"),
        (lambda d: d["files"][0].update(size=-1), r"files\[0\]\.size must be >= 0"),
        (lambda d: d["files"][0]["inputs"][0].update(dtype="complex"), r"inputs\[0\]\.dtype must be one of"),
        (lambda d: d["files"][0]["inputs"][0].update(shape=[None]), r"shape entries must be ints or names"),
        (lambda d: d["files"][0]["parity"]["max_abs_diff"].update(output="big"), r"must be a number"),
        (lambda d: d["files"].__setitem__(0, "x"), r"files\[0\] must be an object"),
    ],
)
def test_malformed_fields_name_the_problem(change, message) -> None:
    with pytest.raises(ManifestError, match=message):
        Manifest.from_json(_mutated(change))


def test_not_json_and_not_object() -> None:
    with pytest.raises(ManifestError, match="not valid JSON"):
        Manifest.from_json("{")
    with pytest.raises(ManifestError, match="must be a JSON object"):
        Manifest.from_json("[]")


def test_unknown_file_lookup_lists_the_known_ones() -> None:
    with pytest.raises(ManifestError, match=r"no file 'x.onnx'; listed: \['ffn.gelu.onnx'\]"):
        _manifest().file("x.onnx")
