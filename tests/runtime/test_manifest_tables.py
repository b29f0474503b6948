"""The manifest's key tables against its dataclasses, and the messages of the checks within and between
parts that test_runtime_manifest.py does not reach (goldens, weights files, tokens, cache, io)."""

import dataclasses
import json
from pathlib import Path

import pytest

from onnxformer.runtime import manifest_parse
from onnxformer.runtime.errors import ManifestError
from onnxformer.runtime.manifest import FORMAT_VERSION, Manifest
from onnxformer.runtime.manifest_keys import Part

EXPORTED = Path(__file__).resolve().parents[2] / "exported"
PARTS = {name: value for name, value in vars(manifest_parse).items() if isinstance(value, Part)}


def _has_default(field: dataclasses.Field) -> bool:
    return field.default is not dataclasses.MISSING or field.default_factory is not dataclasses.MISSING


@pytest.mark.parametrize("name", sorted(PARTS))
def test_a_table_reads_every_field_and_leaves_out_only_those_with_a_default(name: str) -> None:
    part = PARTS[name]
    fields = {field.name: field for field in dataclasses.fields(part.cls)}
    keys = [key.name for key in part.keys]
    assert sorted(keys) == sorted(fields), f"{name}: table {keys}, dataclass {list(fields)}"
    lacking = [key.name for key in part.keys if key.optional and not _has_default(fields[key.name])]
    assert lacking == [], f"{name}: optional keys without a dataclass default: {lacking}"


def test_the_whole_file_table_reads_every_manifest_field() -> None:
    keys = {key.name for key in manifest_parse.MANIFEST} | {"format_version"}
    assert keys == {field.name for field in dataclasses.fields(Manifest)}
    assert len(PARTS) >= 11  # tensor, parity, file, io, cache, generation, framing, shape, goldens x3


def _model(family: str) -> dict:
    return json.loads((EXPORTED / family / "manifest.json").read_text())


def _weights(data: dict) -> dict:
    """The decoder graph's external-data file, listed."""
    entry = {"path": "decoder.onnx.data", "sha256": "c" * 64, "size": 3, "kind": "weights"}
    data["files"].append(
        {**entry, "options": {"graph": data["graphs"]["decoder"]}, "inputs": [], "outputs": []}
    )
    return data["files"][-1]


@pytest.mark.parametrize(
    ("family", "change", "message"),
    [
        ("gpt", lambda d: _weights(d).update(options={}), r'options of a weights file must be \{"graph"'),
        (
            "gpt",
            lambda d: _weights(d)["options"].update(graph="x.onnx"),
            r"names 'x.onnx', which is not a graph",
        ),
        ("gpt", lambda d: _weights(d).update(path="decoder2.onnx"), r"'decoder2.onnx' is named like a graph"),
        ("gpt", lambda d: d["files"].append(d["files"][0]), r"files list \['decoder.onnx'\] more than once"),
        (
            "gpt",
            lambda d: d["goldens"]["graphs"][0].update(file="x.onnx"),
            r"graphs\[0\]\.file names 'x.onnx'",
        ),
        (
            "gpt",
            lambda d: d["goldens"]["graphs"][0].update(atol=-1),
            r"graphs\[0\]\.atol/rtol must be numbers",
        ),
        (
            "gpt",
            lambda d: d["goldens"]["graphs"][0]["cases"][0].update(inputs=[1]),
            r"must be a list of names",
        ),
        (
            "gpt",
            lambda d: d["goldens"].update(end_to_end="e2e.json"),
            r"end_to_end names 'e2e.json', which is",
        ),
        (
            "gpt",
            lambda d: d["goldens"]["graphs"][0]["cases"][0].update(dir="x"),
            r"use 'x/input_0.pb', which",
        ),
        ("gpt", lambda d: d.update(goldens=[]), r"goldens must be an object or null"),
        ("gpt", lambda d: d["files"][0].update(parity=[]), r"files\[0\]\.parity must be an object or null"),
        (
            "gpt",
            lambda d: d["files"][0]["parity"].update(used={}),
            r"parity\.used must name the same outputs",
        ),
        ("gpt", lambda d: d.update(tokenizer="x.json"), r"tokenizer must name a file listed in files"),
        (
            "gpt",
            lambda d: d["special_tokens"].update(pad=-1),
            r"special_tokens\.pad must be an integer id >= 0",
        ),
        ("gpt", lambda d: d.update(generation=[]), r"generation must be an object or null"),
        (
            "gpt",
            lambda d: d["generation"].update(decoder_start_token_id="0"),
            r"must be int or NoneType, got str",
        ),
        ("gpt", lambda d: d["io"].update(decoder=[]), r"io\.decoder must be an object;"),
        (
            "gpt",
            lambda d: d["io"]["decoder"].update(inputs=[""]),
            r"inputs must be a list of non-empty names",
        ),
        (
            "gpt",
            lambda d: d["io"]["decoder"]["outputs"].update(logits=""),
            r"logits must be a graph output name",
        ),
        ("gpt", lambda d: d["framing"].update(prompt=[]), r"prompt must be an object with prefix and suffix"),
        ("gpt", lambda d: d["config"].pop("n_heads"), r"config\.n_heads is missing"),
        ("gpt", lambda d: d.update(export_kind="graph"), r"export_kind must be one of \('blocks', 'model'\)"),
        ("gpt", lambda d: d.update(family=None), r"family must name the model's architecture"),
        (
            "gpt",
            lambda d: d["kv_cache"].update(cross_key="x.{i}", cross_value="y.{i}"),
            r"io\.decoder names \['x\.0', 'y\.0', 'x\.1', 'y\.1'\], which decoder\.onnx does not list",
        ),
        (
            "t5",
            lambda d: d["kv_cache"].update(layout=["batch", "heads", "max_sequence", "head_dim"]),
            r"in-place",
        ),
        ("t5", lambda d: d["kv_cache"].update(cross_key=1), r"kv_cache\.cross_key must be str, got int"),
    ],
)
def test_malformed_parts_name_the_problem(family: str, change, message: str) -> None:
    data = _model(family)
    assert data["format_version"] == FORMAT_VERSION
    change(data)
    with pytest.raises(ManifestError, match=message):
        Manifest.from_json(json.dumps(data))
