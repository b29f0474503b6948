"""The schema of `manifest.json`: the contract between the exporter (builder) and the runtime.

The builder builds a `Manifest` and writes `manifest.to_json()`; the runtime reads it with
`Manifest.from_json`, which checks every field and names each problem it finds. Unknown format versions
are refused: a newer exporter's folder fails with a message to upgrade onnxformer rather than being
misread.
"""

import json
import re
from dataclasses import asdict, dataclass, field
from typing import Any

from onnxformer.runtime.errors import ManifestError

FORMAT_VERSION = 1
MANIFEST_NAME = "manifest.json"
DTYPES = ("float32", "float16", "int64", "int32", "bool")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")


@dataclass(frozen=True)
class TensorSpec:
    """One graph input or output. Shape entries are ints (fixed) or names (dynamic: "batch", ...)."""

    name: str
    dtype: str
    shape: tuple[int | str, ...]


@dataclass(frozen=True)
class Parity:
    """PyTorch vs ONNX Runtime at export time, over `cases` input shapes none equal to the trace shape."""

    tolerance: float
    cases: int
    max_abs_diff: dict[str, float]  # output name -> largest |onnx - torch| over all cases
    shapes: tuple[str, ...] = ()  # the case shapes, e.g. "B=4 T=17 P=5"
    rtol: float = 0.0  # allowed diff = tolerance + rtol * max |torch output| (0: absolute only)
    max_abs_value: dict[str, float] = field(default_factory=dict)  # output name -> largest |torch output|


@dataclass(frozen=True)
class FileEntry:
    path: str  # relative to the export folder, forward slashes
    sha256: str
    size: int
    kind: str  # what the graph computes, e.g. "encoder_block", "ffn"
    options: dict[str, Any]
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    parity: Parity | None = None


@dataclass(frozen=True)
class GoldenCase:
    """One golden run of a graph: `dir` holds input_i.pb and output_i.pb (ONNX backend test-data layout),
    numbered in the order of `inputs` and `outputs` (the graph's own order)."""

    dir: str
    label: str  # the shape, e.g. "cached step B=3 P=9 T=1"
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]

    def input_files(self) -> list[str]:
        return [f"{self.dir}/input_{i}.pb" for i in range(len(self.inputs))]

    def output_files(self) -> list[str]:
        return [f"{self.dir}/output_{i}.pb" for i in range(len(self.outputs))]


@dataclass(frozen=True)
class GoldenGraph:
    """The golden cases of one ONNX file. A case passes when every output has the golden's shape and
    max |got - golden| <= atol + rtol * max |golden| (fp32 rounding grows with the numbers' size)."""

    file: str
    atol: float
    rtol: float
    cases: tuple[GoldenCase, ...]
    note: str = ""  # why this file needs more than the default tolerance, when it does


@dataclass(frozen=True)
class Goldens:
    """Test data written at export time from PyTorch (see docs/goldens.md)."""

    graphs: tuple[GoldenGraph, ...]
    end_to_end: str | None = None  # goldens/end_to_end.json for model exports


EXPORT_KINDS = ("blocks", "model")
FAMILIES = ("gpt", "bert", "t5")


@dataclass(frozen=True)
class Manifest:
    """What an export folder holds. For `export_kind == "model"` the model fields are filled:

    - `graphs`: role -> file, roles "decoder" (gpt, t5), "encoder" (bert, t5), "attentions" (all);
    - `kv_cache`: {"layers", "heads", "head_dim", "past_key", "past_value", "present_key", "present_value",
      "cross_key", "cross_value" (t5)}: input/output name patterns with "{i}" for the layer, tensors laid
      out (batch, heads, sequence, head_dim);
    - `special_tokens`: name -> id (pad, bos, eos, unk, mask, sep, cls);
    - `generation`: defaults (max_new_tokens, temperature, top_k, top_p, stop_tokens, and for t5
      decoder_start_token_id); `config`: the model config; `tokenizer`: the tokenizer file.
    """

    export_kind: str  # "blocks" or "model"
    opset: int
    versions: dict[str, str]  # tool -> version used at export
    files: tuple[FileEntry, ...]
    format_version: int = FORMAT_VERSION
    family: str | None = None
    config: dict[str, Any] = field(default_factory=dict)
    tokenizer: str | None = None
    special_tokens: dict[str, int] = field(default_factory=dict)
    graphs: dict[str, str] = field(default_factory=dict)
    kv_cache: dict[str, Any] = field(default_factory=dict)
    generation: dict[str, Any] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)
    goldens: Goldens | None = None

    def file(self, path: str) -> FileEntry:
        for entry in self.files:
            if entry.path == path:
                return entry
        raise ManifestError(f"{MANIFEST_NAME} lists no file {path!r}; listed: {[f.path for f in self.files]}")

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, sort_keys=True) + "\n"

    @classmethod
    def from_json(cls, text: str) -> "Manifest":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as error:
            raise ManifestError(
                f"{MANIFEST_NAME} is not valid JSON ({error}); re-export the folder"
            ) from None
        return _parse_manifest(data)


def _fail(where: str, problem: str) -> ManifestError:
    return ManifestError(f"{MANIFEST_NAME}: {where} {problem}; re-export the folder with onnxformer")


def _get(data: dict, key: str, kind: type | tuple[type, ...], where: str) -> Any:
    if key not in data:
        raise _fail(f"{where}{key}", "is missing")
    value = data[key]
    # bool is an int subclass; a field typed int must not accept true/false.
    if not isinstance(value, kind) or (isinstance(value, bool) and bool not in _as_tuple(kind)):
        names = " or ".join(t.__name__ for t in _as_tuple(kind))
        raise _fail(f"{where}{key}", f"must be {names}, got {type(value).__name__}")
    return value


def _as_tuple(kind: type | tuple[type, ...]) -> tuple[type, ...]:
    return kind if isinstance(kind, tuple) else (kind,)


def _parse_tensors(items: Any, where: str) -> tuple[TensorSpec, ...]:
    if not isinstance(items, list):
        raise _fail(where, "must be a list")
    specs = []
    for i, item in enumerate(items):
        at = f"{where}[{i}]."
        if not isinstance(item, dict):
            raise _fail(f"{where}[{i}]", "must be an object")
        dtype = _get(item, "dtype", str, at)
        if dtype not in DTYPES:
            raise _fail(f"{at}dtype", f"must be one of {DTYPES}, got {dtype!r}")
        shape = _get(item, "shape", list, at)
        for dim in shape:
            if isinstance(dim, bool) or not isinstance(dim, int | str):
                raise _fail(f"{at}shape", f"entries must be ints or names, got {dim!r}")
        specs.append(TensorSpec(_get(item, "name", str, at), dtype, tuple(shape)))
    return tuple(specs)


def _parse_parity(item: Any, where: str) -> Parity | None:
    if item is None:
        return None
    if not isinstance(item, dict):
        raise _fail(where, "must be an object or null")
    at = f"{where}."
    diffs = _get(item, "max_abs_diff", dict, at)
    for name, value in diffs.items():
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise _fail(f"{at}max_abs_diff.{name}", "must be a number")
    return Parity(
        tolerance=float(_get(item, "tolerance", (int, float), at)),
        cases=_get(item, "cases", int, at),
        max_abs_diff={k: float(v) for k, v in diffs.items()},
        shapes=tuple(_get(item, "shapes", list, at)) if "shapes" in item else (),
        rtol=float(_get(item, "rtol", (int, float), at)) if "rtol" in item else 0.0,
        max_abs_value={k: float(v) for k, v in _get(item, "max_abs_value", dict, at).items()}
        if "max_abs_value" in item
        else {},
    )


def _parse_file(item: Any, where: str) -> FileEntry:
    if not isinstance(item, dict):
        raise _fail(where, "must be an object")
    at = f"{where}."
    sha = _get(item, "sha256", str, at)
    if not _SHA256.match(sha):
        raise _fail(f"{at}sha256", "must be 64 lowercase hex characters")
    size = _get(item, "size", int, at)
    if size < 0:
        raise _fail(f"{at}size", "must be >= 0")
    return FileEntry(
        path=_get(item, "path", str, at),
        sha256=sha,
        size=size,
        kind=_get(item, "kind", str, at),
        options=_get(item, "options", dict, at),
        inputs=_parse_tensors(_get(item, "inputs", list, at), f"{at}inputs"),
        outputs=_parse_tensors(_get(item, "outputs", list, at), f"{at}outputs"),
        parity=_parse_parity(item.get("parity"), f"{at}parity"),
    )


def _parse_manifest(data: Any) -> Manifest:
    if not isinstance(data, dict):
        raise _fail("the top level", "must be a JSON object")
    version = _get(data, "format_version", int, "")
    if version != FORMAT_VERSION:
        hint = "upgrade onnxformer" if version > FORMAT_VERSION else "re-export the folder"
        raise ManifestError(
            f"{MANIFEST_NAME}: format_version {version} is not supported (this onnxformer reads "
            f"{FORMAT_VERSION}); {hint}"
        )
    files = _get(data, "files", list, "")
    versions = _get(data, "versions", dict, "")
    kind = _get(data, "export_kind", str, "")
    if kind not in EXPORT_KINDS:
        raise _fail("export_kind", f"must be one of {EXPORT_KINDS}, got {kind!r}")
    manifest = Manifest(
        export_kind=kind,
        opset=_get(data, "opset", int, ""),
        versions={str(k): str(v) for k, v in versions.items()},
        files=tuple(_parse_file(item, f"files[{i}]") for i, item in enumerate(files)),
        format_version=version,
        family=_get(data, "family", (str, type(None)), "") if "family" in data else None,
        config=_optional(data, "config", dict),
        tokenizer=_get(data, "tokenizer", (str, type(None)), "") if "tokenizer" in data else None,
        special_tokens=_optional(data, "special_tokens", dict),
        graphs=_optional(data, "graphs", dict),
        kv_cache=_optional(data, "kv_cache", dict),
        generation=_optional(data, "generation", dict),
        extra=_optional(data, "extra", dict),
        goldens=_parse_goldens(data.get("goldens"), "goldens"),
    )
    if manifest.goldens is not None:
        _check_goldens(manifest)
    if kind == "model":
        _check_model_fields(manifest)
    return manifest


def _parse_goldens(item: Any, where: str) -> Goldens | None:
    if item is None:
        return None
    if not isinstance(item, dict):
        raise _fail(where, "must be an object or null")
    graphs = []
    for i, graph in enumerate(_get(item, "graphs", list, f"{where}.")):
        at = f"{where}.graphs[{i}]."
        if not isinstance(graph, dict):
            raise _fail(at[:-1], "must be an object")
        cases = []
        for j, case in enumerate(_get(graph, "cases", list, at)):
            case_at = f"{at}cases[{j}]."
            if not isinstance(case, dict):
                raise _fail(case_at[:-1], "must be an object")
            names = {key: _get(case, key, list, case_at) for key in ("inputs", "outputs")}
            for key, values in names.items():
                if not all(isinstance(value, str) for value in values):
                    raise _fail(f"{case_at}{key}", "must be a list of names")
            cases.append(
                GoldenCase(
                    _get(case, "dir", str, case_at),
                    _get(case, "label", str, case_at),
                    tuple(names["inputs"]),
                    tuple(names["outputs"]),
                )
            )
        tolerances = {key: float(_get(graph, key, (int, float), at)) for key in ("atol", "rtol")}
        if any(not value >= 0 for value in tolerances.values()):
            raise _fail(f"{at}atol/rtol", "must be numbers >= 0")
        graphs.append(
            GoldenGraph(
                _get(graph, "file", str, at),
                cases=tuple(cases),
                note=_get(graph, "note", str, at) if "note" in graph else "",
                **tolerances,
            )
        )
    end_to_end = _get(item, "end_to_end", (str, type(None)), f"{where}.") if "end_to_end" in item else None
    return Goldens(tuple(graphs), end_to_end)


def _check_goldens(manifest: Manifest) -> None:
    """Every golden file must be a listed (so sha256-checked) file."""
    listed = {entry.path for entry in manifest.files}
    goldens = manifest.goldens
    for i, graph in enumerate(goldens.graphs):
        if graph.file not in listed:
            raise _fail(f"goldens.graphs[{i}].file", f"names {graph.file!r}, which is not in files")
        for case in graph.cases:
            for path in case.input_files() + case.output_files():
                if path not in listed:
                    raise _fail(f"goldens of {graph.file}", f"use {path!r}, which is not in files")
    if goldens.end_to_end is not None and goldens.end_to_end not in listed:
        raise _fail("goldens.end_to_end", f"names {goldens.end_to_end!r}, which is not in files")


def _optional(data: dict, key: str, kind: type) -> Any:
    return _get(data, key, kind, "") if key in data else kind()


def _check_model_fields(manifest: Manifest) -> None:
    if manifest.family not in FAMILIES:
        raise _fail("family", f"must be one of {FAMILIES} for a model export, got {manifest.family!r}")
    listed = {entry.path for entry in manifest.files}
    needed = {"gpt": ("decoder",), "bert": ("encoder",), "t5": ("encoder", "decoder")}[manifest.family]
    for role in needed:
        if role not in manifest.graphs:
            raise _fail("graphs", f"lacks the {role!r} graph a {manifest.family} export needs")
    for role, path in manifest.graphs.items():
        if path not in listed:
            raise _fail(f"graphs.{role}", f"names {path!r}, which is not in files")
    if manifest.tokenizer is None or manifest.tokenizer not in listed:
        raise _fail("tokenizer", "must name a file listed in files")
    for name, value in manifest.special_tokens.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise _fail(f"special_tokens.{name}", "must be an integer id >= 0")
    for key in ("vocab_size", "max_len", "n_layers", "n_heads", "d_model"):
        value = manifest.config.get(key)
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise _fail(f"config.{key}", "must be a positive integer")
