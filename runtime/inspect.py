"""What an export folder or a single ONNX file holds, as a plain dict that the CLI renders or prints as JSON.

A folder is described from its manifest.json (`ExportFolder.open`); `verify=True` also re-checks every
file with `check_export` (size, sha256, ONNX Runtime loads the graph). A single `.onnx` file is loaded in
ONNX Runtime, which gives its inputs, outputs and metadata_props; when the file sits in an export folder,
its manifest entry (with the parity figures) comes along. ONNX Runtime does not expose the opset and the
`onnx` package is not a runtime dependency, so the opset is read from the ModelProto's top-level protobuf
fields directly.
"""

import dataclasses
import hashlib
import json
from pathlib import Path
from typing import Any

from onnxformer.runtime import protobuf
from onnxformer.runtime.check import check_export
from onnxformer.runtime.errors import ExportError, ManifestError, OnnxformerError
from onnxformer.runtime.folder import MAX_MODEL_BYTES, ExportFolder, read_regular_file
from onnxformer.runtime.manifest import MANIFEST_NAME, FileEntry, Manifest, Parity, TensorSpec
from onnxformer.runtime.session import create_session

METADATA_PREFIX = "onnxformer."
_ORT_DTYPES = {"float": "float32", "double": "float64"}  # ONNX Runtime's "tensor(float)" -> our names


def inspect_path(path: str | Path, *, verify: bool = False) -> dict[str, Any]:
    """An export folder (`"type": "folder"`) or one `.onnx` file (`"type": "file"`), described."""
    path = Path(path)
    if not path.exists():
        raise ManifestError(f"{path} does not exist; pass an export folder or an .onnx file inside one")
    if path.is_dir():
        return inspect_folder(path, verify=verify)
    if path.suffix != ".onnx":
        raise ManifestError(
            f"{path} is neither an export folder nor an .onnx file; pass the folder that holds "
            f"{MANIFEST_NAME} or one of its .onnx files"
        )
    return inspect_onnx_file(path, verify=verify)


def inspect_folder(path: str | Path, *, verify: bool = False) -> dict[str, Any]:
    """Everything manifest.json records; with `verify`, each file's check (sha256, size, graph loads)."""
    folder = ExportFolder.open(path)
    manifest = folder.manifest
    result = {
        "type": "folder",
        "path": str(path),
        "export_kind": manifest.export_kind,
        "family": manifest.family,
        "task": manifest.task,
        "format_version": manifest.format_version,
        "opset": manifest.opset,
        "versions": dict(manifest.versions),
        "config": dict(manifest.config),
        "tokenizer": manifest.tokenizer,
        "graphs": dict(manifest.graphs),
        "io": {role: _plain(io) for role, io in manifest.io.items()},
        "kv_cache": _plain(manifest.kv_cache),
        "special_tokens": dict(manifest.special_tokens),
        "generation": _plain(manifest.generation),
        "framing": {key: _plain(framing) for key, framing in manifest.framing.items()},
        "extra": dict(manifest.extra),
        "files": [describe_entry(entry, manifest) for entry in manifest.files],
        "total_size": sum(entry.size for entry in manifest.files),
        "goldens": _goldens(manifest),
        "verify": None,
    }
    if verify:
        checks = [{"path": c.entry.path, "ok": c.ok, "problem": c.problem} for c in check_export(folder)]
        result["verify"] = {"ok": all(c["ok"] for c in checks), "files": checks}
    return result


def _plain(value: Any) -> dict[str, Any]:
    """A contract dataclass as JSON-ready data ({} for None), tuples as lists."""
    return {} if value is None else json.loads(json.dumps(dataclasses.asdict(value)))


def describe_entry(entry: FileEntry, manifest: Manifest) -> dict[str, Any]:
    """One manifest file entry, with its role: the graph role, "tokenizer", or "block"."""
    roles = {file: role for role, file in manifest.graphs.items()}
    role = roles.get(entry.path) or (
        "tokenizer" if entry.path == manifest.tokenizer else "golden" if entry.kind == "golden" else "block"
    )
    return {
        "path": entry.path,
        "role": role,
        "kind": entry.kind,
        "size": entry.size,
        "sha256": entry.sha256,
        "options": dict(entry.options),
        "inputs": [_tensor(spec) for spec in entry.inputs],
        "outputs": [_tensor(spec) for spec in entry.outputs],
        "parity": None if entry.parity is None else _parity(entry.parity),
    }


def _goldens(manifest: Manifest) -> dict[str, Any] | None:
    """How much golden test data the folder carries (None for an export made before goldens)."""
    goldens = manifest.goldens
    if goldens is None:
        return None
    files = [entry for entry in manifest.files if entry.kind == "golden"]
    return {
        "graphs": len(goldens.graphs),
        "cases": sum(len(graph.cases) for graph in goldens.graphs),
        "files": len(files),
        "size": sum(entry.size for entry in files),
        "end_to_end": goldens.end_to_end,
        "tolerances": sorted({(graph.atol, graph.rtol) for graph in goldens.graphs}),
    }


def _tensor(spec: TensorSpec) -> dict[str, Any]:
    return {"name": spec.name, "dtype": spec.dtype, "shape": list(spec.shape)}


def _parity(parity: Parity) -> dict[str, Any]:
    """The recorded parity under the export's own rule (the one `check_export` applies): `error` is the
    distance to the reference, `used` the share of the allowance it took (<= 1 passes)."""
    if parity.reference == "float64":
        error, used = dict(parity.error), dict(parity.used)
        rule = f"error <= {parity.factor:g} x PyTorch fp32's error + {parity.floor:.2g} x max |output|"
    else:
        error = dict(parity.max_abs_diff)
        used = {
            name: diff / parity.allowed(name) if parity.allowed(name) else float(diff > 0)
            for name, diff in error.items()
        }
        rule = f"diff to PyTorch fp32 <= {parity.tolerance:g} + {parity.rtol:g} x max |output|"
    return {
        "reference": parity.reference,
        "rule": rule,
        "tolerance": parity.tolerance,
        "rtol": parity.rtol,
        "factor": parity.factor,
        "floor": parity.floor,
        "cases": parity.cases,
        "shapes": list(parity.shapes),
        "max_abs_diff": dict(parity.max_abs_diff),
        "max_abs_value": dict(parity.max_abs_value),
        "error": error,
        "torch_error": dict(parity.torch_error),
        "used": used,
        "within_tolerance": parity.problem() is None,
    }


def inspect_onnx_file(path: str | Path, *, verify: bool = False) -> dict[str, Any]:
    """One graph as ONNX Runtime sees it, plus its manifest entry when it sits in an export folder.

    With `verify`, the file must be listed in that manifest with the same size, sha256, inputs and outputs.
    """
    path = Path(path)
    data = read_regular_file(path, limit=MAX_MODEL_BYTES)  # a FIFO or device named .onnx is refused
    try:
        session = create_session(data, device="cpu").session
    except OnnxformerError:
        raise
    except Exception as error:  # ONNX Runtime's load errors are untyped
        first_line = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise ExportError(
            f"{path} is not an ONNX model that ONNX Runtime can load ({first_line}); pass an .onnx file "
            "written by `onnxformer export` or `onnxformer export-blocks`"
        ) from None
    meta = session.get_modelmeta()
    header = _model_header(data)
    digest = hashlib.sha256(data).hexdigest()
    result = {
        "type": "file",
        "path": str(path),
        "size": len(data),
        "sha256": digest,
        "ir_version": header.get("ir_version"),
        "opset": header.get("opsets", {}).get("ai.onnx"),
        "opset_imports": header.get("opsets", {}),
        "producer": meta.producer_name,
        "producer_version": header.get("producer_version"),
        "graph_name": meta.graph_name,
        "onnxformer": {},
        "metadata": {},
        "inputs": [_ort_tensor(value) for value in session.get_inputs()],
        "outputs": [_ort_tensor(value) for value in session.get_outputs()],
        "export": _surrounding_export(path, size=len(data), sha256=digest),
        "verify": None,
    }
    for key, value in sorted(meta.custom_metadata_map.items()):
        if key.startswith(METADATA_PREFIX):
            result["onnxformer"][key.removeprefix(METADATA_PREFIX)] = _json_or_text(value)
        else:
            result["metadata"][key] = value
    if verify:
        problem = _file_problem(result)
        result["verify"] = {"ok": problem is None, "problem": problem}
    return result


def _ort_tensor(value: Any) -> dict[str, Any]:
    kind = value.type
    if kind.startswith("tensor(") and kind.endswith(")"):
        kind = kind[len("tensor(") : -1]
        kind = _ORT_DTYPES.get(kind, kind)
    return {"name": value.name, "dtype": kind, "shape": list(value.shape)}


def _json_or_text(value: str) -> Any:
    try:
        return json.loads(value)
    except json.JSONDecodeError:
        return value


def _surrounding_export(path: Path, *, size: int, sha256: str) -> dict[str, Any] | None:
    """The nearest folder above `path` holding a manifest.json, and what it says about this file."""
    absolute = path.absolute()
    for depth, parent in enumerate(absolute.parents):
        if not (parent / MANIFEST_NAME).is_file():
            continue
        shown = path.parents[depth] if depth < len(path.parents) else parent
        found: dict[str, Any] = {"folder": str(shown), "entry": None, "sha256_matches": None, "problem": None}
        try:
            manifest = ExportFolder.open(parent).manifest
            entry = manifest.file(absolute.relative_to(parent).as_posix())
        except ManifestError as error:
            found["problem"] = str(error)
            return found
        found["entry"] = describe_entry(entry, manifest)
        found["sha256_matches"] = size == entry.size and sha256 == entry.sha256
        return found
    return None


def _file_problem(result: dict[str, Any]) -> str | None:
    export = result["export"]
    if export is None:
        return (
            f"{result['path']} sits in no export folder, so there is no {MANIFEST_NAME} to verify it against"
        )
    if export["entry"] is None:
        problem: str = export["problem"]  # set whenever the entry is not
        return problem
    entry = export["entry"]
    if not export["sha256_matches"]:
        return (
            f"{entry['path']} does not match its size and sha256 in {MANIFEST_NAME}: the file was altered; "
            "re-export the folder"
        )
    for what in ("inputs", "outputs"):
        actual, promised = [t["name"] for t in result[what]], [t["name"] for t in entry[what]]
        if actual != promised:
            return f"{entry['path']} {what} are {actual}, {MANIFEST_NAME} says {promised}"
    return None


def _model_header(data: bytes) -> dict[str, Any]:
    """ir_version (field 1), producer_version (3) and opset_import (8: {1: domain, 2: version}) of a
    serialized ModelProto (onnx.proto); {} when the bytes do not parse, so nothing is made up."""
    header: dict[str, Any] = {"opsets": {}}
    try:
        for number, _, value in protobuf.fields(data):
            if number == 1 and isinstance(value, int):
                header["ir_version"] = value
            elif number == 3 and isinstance(value, memoryview):
                header["producer_version"] = bytes(value).decode("utf-8")
            elif number == 8 and isinstance(value, memoryview):
                fields = {n: v for n, _, v in protobuf.fields(value)}
                domain = bytes(fields.get(1, b"")).decode("utf-8") or "ai.onnx"
                header["opsets"][domain] = fields.get(2, 0)
    except (ValueError, UnicodeDecodeError):
        return {}
    return header
