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
class Manifest:
    export_kind: str  # "blocks" for a per-block export
    opset: int
    versions: dict[str, str]  # tool -> version used at export
    files: tuple[FileEntry, ...]
    format_version: int = FORMAT_VERSION
    extra: dict[str, Any] = field(default_factory=dict)

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
    return Manifest(
        export_kind=_get(data, "export_kind", str, ""),
        opset=_get(data, "opset", int, ""),
        versions={str(k): str(v) for k, v in versions.items()},
        files=tuple(_parse_file(item, f"files[{i}]") for i, item in enumerate(files)),
        format_version=version,
        extra=_get(data, "extra", dict, "") if "extra" in data else {},
    )
