"""The manifest schema (runtime side): round trip and one clear error per malformed field."""

import json
from pathlib import Path

import pytest

from onnxformer.runtime.errors import ManifestError
from onnxformer.runtime.manifest import (
    FORMAT_VERSION,
    TASKS,
    FileEntry,
    Framing,
    GenerationDefaults,
    KVCache,
    Manifest,
    Parity,
    TensorSpec,
)


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


# The model contract (format 2): task, framing, io, kv_cache, generation; read from the committed exports.

EXPORTED = Path(__file__).resolve().parents[1] / "exported"
EXPORTED_FAMILIES = ("gpt", "bert", "t5")


def _model(family: str) -> dict:
    return json.loads((EXPORTED / family / "manifest.json").read_text())


@pytest.mark.parametrize("family", EXPORTED_FAMILIES)
def test_reference_manifests_parse_typed_and_round_trip(family: str) -> None:
    text = (EXPORTED / family / "manifest.json").read_text()
    manifest = Manifest.from_json(text)
    assert manifest.to_json() == text
    assert manifest.format_version == FORMAT_VERSION == 2
    spec = TASKS[manifest.task]
    assert set(spec.roles) <= set(manifest.graphs) and set(manifest.io) == set(manifest.graphs)
    assert isinstance(manifest.text_framing(), Framing)
    if spec.cached:
        assert isinstance(manifest.kv_cache, KVCache) and isinstance(manifest.generation, GenerationDefaults)
        assert manifest.kv_cache.layers == manifest.shape.n_layers
        assert (manifest.kv_cache.cross_key is not None) == spec.cross
    else:
        assert manifest.kv_cache is None and manifest.generation is None


def test_framing_reproduces_each_family_s_framing() -> None:
    special = {"bos": 1, "eos": 2, "sep": 5, "cls": 6}
    framed = {
        f: Manifest.from_json(json.dumps(_model(f))).text_framing().ids([9, 8], special)
        for f in EXPORTED_FAMILIES
    }
    assert framed == {"gpt": [1, 9, 8], "bert": [6, 9, 8, 5], "t5": [9, 8, 2]}


def test_a_framing_max_length_is_optional_and_round_trips() -> None:
    """sentence-transformers' max_seq_length: written only when set, so older folders round-trip as they
    are (test_reference_manifests_parse_typed_and_round_trip) and read with the model's context."""
    data = _model("bert")
    assert "max_length" not in data["framing"]["text"]
    plain = Manifest.from_json(json.dumps(data))
    assert plain.text_framing().max_length is None and plain.text_framing().limit(64) == 64
    data["framing"]["text"]["max_length"] = 16
    limited = Manifest.from_json(json.dumps(data))
    assert limited.text_framing().max_length == 16 and limited.text_framing().limit(64) == 16
    assert json.loads(limited.to_json())["framing"]["text"]["max_length"] == 16
    assert Manifest.from_json(limited.to_json()) == limited
    assert Framing(max_length=600).limit(512) == 512  # never past the model's positions


def test_cache_names_layer_by_layer() -> None:
    cache = Manifest.from_json(json.dumps(_model("t5"))).kv_cache
    assert cache.past_names() == [
        "past_key_values.0.key",
        "past_key_values.0.value",
        "past_key_values.1.key",
        "past_key_values.1.value",
    ]
    assert (
        cache.present_names()[1] == "present.0.value" and cache.cross_names()[2] == "cross_key_values.1.key"
    )


def test_format_1_names_the_command_that_re_exports() -> None:
    data = _model("gpt")
    data["format_version"] = 1
    with pytest.raises(ManifestError, match=r"format_version 1 .* `onnxformer export CHECKPOINT --out DIR`"):
        Manifest.from_json(json.dumps(data))
    blocks = json.loads(_manifest().to_json()) | {"format_version": 1}
    with pytest.raises(ManifestError, match=r"`onnxformer export-blocks --out DIR`"):
        Manifest.from_json(json.dumps(blocks))


def _model_mutated(family: str, change) -> str:
    data = _model(family)
    change(data)
    return json.dumps(data)


@pytest.mark.parametrize(
    ("family", "change", "message"),
    [
        (
            "gpt",
            lambda d: d.update(task="translate"),
            r"task must be one of \('generate', 'encode', 'seq2seq'\)",
        ),
        ("gpt", lambda d: d.pop("task"), r"task must be one of"),
        ("gpt", lambda d: d.update(family=""), r"family must name the model's architecture"),
        ("gpt", lambda d: d["framing"].pop("prompt"), r"framing lacks 'prompt'"),
        (
            "gpt",
            lambda d: d["framing"]["prompt"].update(prefix=["start"]),
            r"framing.prompt names \['start'\]",
        ),
        ("gpt", lambda d: d["framing"]["prompt"].update(prefix="bos"), r"framing.prompt.prefix must be list"),
        ("bert", lambda d: d["framing"]["text"].pop("suffix"), r"framing.text.suffix is missing"),
        (
            "bert",
            lambda d: d["framing"]["text"].update(max_length=0),
            r"framing.text.max_length must be a positive integer",
        ),
        ("bert", lambda d: d["framing"]["text"].update(max_length="256"), r"max_length must be int"),
        (
            "bert",
            lambda d: d["framing"]["text"].update(max_length=2),
            r"framing.text.max_length is 2, which leaves no room for a text beside its 2 special tokens",
        ),
        ("gpt", lambda d: d.pop("kv_cache"), r"kv_cache is missing"),
        ("gpt", lambda d: d["kv_cache"].update(kv_heads=0), r"kv_cache.kv_heads must be a positive integer"),
        ("gpt", lambda d: d["kv_cache"].pop("kv_heads"), r"kv_cache.kv_heads is missing"),
        (
            "gpt",
            lambda d: d["kv_cache"].update(past_key="past.key"),
            r"kv_cache.past_key must be a name with '\{i\}'",
        ),
        (
            "gpt",
            lambda d: d["kv_cache"].update(layout=["batch", "sequence", "heads", "head_dim"]),
            r"layout must be",
        ),
        ("gpt", lambda d: d["kv_cache"].update(cross_key="x.{i}"), r"must both be names or both be null"),
        (
            "t5",
            lambda d: d["kv_cache"].update(cross_key=None, cross_value=None),
            r"seq2seq feeds the encoder's",
        ),
        ("gpt", lambda d: d.update(generation=None), r"generation is missing"),
        ("gpt", lambda d: d["generation"].update(top_p=0), r"generation.top_p must be a number in \(0, 1\]"),
        ("gpt", lambda d: d["generation"].update(temperature=-1), r"temperature must be a number >= 0"),
        (
            "gpt",
            lambda d: d["generation"].update(max_new_tokens=-1),
            r"max_new_tokens must be an integer >= 0",
        ),
        (
            "gpt",
            lambda d: d["generation"].update(stop_tokens=[400]),
            r"token 400, outside the vocabulary of 400",
        ),
        ("gpt", lambda d: d["generation"].update(stop_tokens=[True]), r"must be token ids >= 0"),
        (
            "t5",
            lambda d: d["generation"].update(decoder_start_token_id=None),
            r"decoder_start_token_id is missing",
        ),
        ("gpt", lambda d: d["io"].pop("decoder"), r"io lacks the names of the 'decoder' graph"),
        ("gpt", lambda d: d["io"].update(extra={"inputs": [], "outputs": {}}), r"io.extra describes a graph"),
        (
            "bert",
            lambda d: d["io"]["encoder"].update(inputs=["input_ids", "pixels"]),
            r"\['pixels'\], which this runtime cannot feed",
        ),
        (
            "bert",
            lambda d: d["io"]["encoder"]["outputs"].update(pooled="x"),
            r"io.encoder.outputs.pooled is not an output",
        ),
        (
            "bert",
            lambda d: d["io"]["encoder"]["outputs"].update(class_logits="logits"),
            r"\['logits'\], which encoder.onnx does not list",
        ),
        (
            "t5",
            lambda d: d["kv_cache"].update(present_key="cache.{i}.key"),
            r"\['cache.0.key', 'cache.1.key'\], which decoder.onnx",
        ),
        (
            "t5",
            lambda d: d["graphs"].pop("encoder"),
            r"graphs lacks the 'encoder' graph the 'seq2seq' task needs",
        ),
        ("bert", lambda d: d["config"].update(max_len=0), r"config.max_len must be a positive integer"),
    ],
)
def test_malformed_contract_fields_name_the_problem(family, change, message) -> None:
    with pytest.raises(ManifestError, match=message):
        Manifest.from_json(_model_mutated(family, change))


def _float64_manifest() -> Manifest:
    from onnxformer.runtime.manifest import GoldenCase, GoldenGraph, Goldens

    parity = Parity(
        0.0, 10, {"output": 2e-7}, ("B=1 T=1 P=0 S=4",), max_abs_value={"output": 3.0}, reference="float64",
        factor=16.0, floor=4.8e-7, error={"output": 2e-7}, torch_error={"output": 1e-7}, used={"output": 0.1},
    )  # fmt: skip
    entry = _manifest().files[0]
    case = GoldenCase("goldens/ffn.gelu/test_data_set_0", "B=1", ("hidden_states",), ("output",), (3e-6,))
    goldens = Goldens((GoldenGraph("ffn.gelu.onnx", 0.0, 1e-6, (case,)),))
    listed = [f"{case.dir}/{name}_0.pb" for name in ("input", "output")]
    golden_files = tuple(FileEntry(path, "b" * 64, 1, "golden", {}, (), ()) for path in listed)
    files = (FileEntry(**{**entry.__dict__, "parity": parity}), *golden_files)
    return Manifest(export_kind="blocks", opset=18, versions={}, files=files, goldens=goldens)


def test_the_float64_figures_round_trip_and_are_checked() -> None:
    manifest = _float64_manifest()
    assert Manifest.from_json(manifest.to_json()) == manifest
    assert manifest.files[0].parity.problem() is None
    over = Parity(0.0, 1, {"output": 1.0}, reference="float64", error={"output": 1.0}, used={"output": 1.5})
    assert "used 1.5x its allowance" in over.problem()
    data = json.loads(manifest.to_json())
    data["goldens"]["graphs"][0]["cases"][0]["allowed"] = [1e-6, 2e-6]  # two numbers for one output
    with pytest.raises(
        ManifestError, match=r"cases\[0\]\.allowed must be null or one number >= 0 per output"
    ):
        Manifest.from_json(json.dumps(data))
    data["goldens"]["graphs"][0]["cases"][0]["allowed"] = None  # an int8 folder: the graph's atol applies
    assert Manifest.from_json(json.dumps(data)).goldens.graphs[0].cases[0].allowed is None
    data = json.loads(manifest.to_json())
    data["files"][0]["parity"]["reference"] = "float16"
    with pytest.raises(ManifestError, match=r"parity\.reference must be 'float32' or 'float64'"):
        Manifest.from_json(json.dumps(data))
