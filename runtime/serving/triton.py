"""A Triton Inference Server model repository for an export's encoder graphs (onnxruntime backend).

    REPO/<name>_encoder/config.pbtxt      names, dtypes and dims from the manifest
    REPO/<name>_encoder/1/model.onnx      the graph, byte for byte (its sha256 checked on the way)
    REPO/<name>_encoder/1/encoder.onnx.data  its external weights, when the export keeps them outside

The configs set max_batch_size 0: the batch axis is an explicit dynamic dim (-1), as in the graph, and
clients send padded batches; Triton's dynamic batcher could not merge requests of different sequence
lengths anyway. Tokenizing stays on the client (tokenizer.json is in the export folder).
"""

import os
import posixpath
import re
import shutil
from pathlib import Path

from onnxformer.runtime.errors import InputError, ManifestError
from onnxformer.runtime.loader import load

# manifest dtype -> Triton DataType enum name (model_config.proto)
TRITON_DTYPES = {
    "float32": "TYPE_FP32",
    "float16": "TYPE_FP16",
    "int64": "TYPE_INT64",
    "int32": "TYPE_INT32",
    "bool": "TYPE_BOOL",
}
ENCODER_ROLES = ("encoder",)  # the manifest `graphs` roles that are exported


def config_pbtxt(name: str, inputs, outputs, *, instances: int = 1) -> str:
    """The text-format ModelConfig of one graph (TensorSpecs from the manifest's file entry)."""

    def tensors(specs) -> str:
        rows = []
        for spec in specs:
            if spec.dtype not in TRITON_DTYPES:
                raise ManifestError(f"{name}: {spec.name} has dtype {spec.dtype}, which Triton cannot take")
            dims = ", ".join(str(d) if isinstance(d, int) else "-1" for d in spec.shape)
            rows.append(
                f'  {{\n    name: "{spec.name}"\n    data_type: {TRITON_DTYPES[spec.dtype]}\n'
                f"    dims: [ {dims} ]\n  }}"
            )
        return ",\n".join(rows)

    return (
        f'name: "{name}"\n'
        'backend: "onnxruntime"\n'
        "max_batch_size: 0\n"
        f"input [\n{tensors(inputs)}\n]\n"
        f"output [\n{tensors(outputs)}\n]\n"
        f"instance_group [\n  {{\n    kind: KIND_CPU\n    count: {instances}\n  }}\n]\n"
    )


def write_repository(
    folder: str | os.PathLike, out: str | os.PathLike, *, name: str | None = None, overwrite: bool = False
) -> list[str]:
    """Write the model repository for the folder's encoder graphs into `out`; returns the model names.

    `out` appears whole or not at all; an existing `out` is replaced only with `overwrite`, and only if it
    is a Triton model repository (each entry a model folder with its config.pbtxt): nothing else is lost."""
    out = Path(out)
    if out.exists() and not _is_repository(out):
        raise InputError(
            f"refusing to replace {out}: it is not a Triton model repository (a folder whose entries are "
            "model folders with config.pbtxt); choose another --out"
        )
    if out.exists() and not overwrite:
        raise InputError(f"{out} already exists; pass --overwrite to replace it, or choose another --out")
    model = load(folder, device="cpu", threads=1)
    manifest = model.export.manifest
    base = _model_name(name or Path(folder).resolve().name)
    roles = [role for role in ENCODER_ROLES if role in manifest.graphs]
    if not roles:
        raise InputError(
            f"{folder} is a {manifest.family} export with no encoder graph (it has "
            f"{sorted(manifest.graphs)}); Triton repositories are written for encoder exports (bert, t5)"
        )
    entries = {entry.path: entry for entry in manifest.files}
    staging = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    shutil.rmtree(staging, ignore_errors=True)
    names = []
    try:
        for role in roles:
            path = str(manifest.graphs[role])
            entry = entries[path]
            model_name = f"{base}_{role}"
            version = staging / model_name / "1"
            version.mkdir(parents=True)
            (version / "model.onnx").write_bytes(model.export.folder.read(path))
            for weights in manifest.files:  # external data: beside model.onnx, where its location points
                location = posixpath.relpath(weights.path, posixpath.dirname(path) or ".")
                if weights.weights_of == path and not location.startswith(".."):
                    (version / location).parent.mkdir(parents=True, exist_ok=True)
                    (version / location).write_bytes(model.export.folder.read(weights.path))
            (staging / model_name / "config.pbtxt").write_text(
                config_pbtxt(model_name, entry.inputs, entry.outputs), encoding="utf-8"
            )
            names.append(model_name)
        _swap_in(staging, out)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return names


def _is_repository(path: Path) -> bool:
    if path.is_symlink() or not path.is_dir():
        return False
    entries = list(path.iterdir())
    return all(entry.is_dir() and (entry / "config.pbtxt").is_file() for entry in entries)


def _swap_in(staging: Path, out: Path) -> None:
    """Rename `staging` to `out`; a previous `out` is moved aside first and removed after."""
    old = out.with_name(f".{out.name}.{os.getpid()}.old")
    if out.exists():
        os.replace(out, old)
    os.replace(staging, out)
    shutil.rmtree(old, ignore_errors=True)


def _model_name(text: str) -> str:
    """A Triton model name (a folder name): letters, digits, '_', '-', '.'."""
    cleaned = re.sub(r"[^A-Za-z0-9_.-]+", "_", text).strip("._")
    if not cleaned:
        raise InputError(f"cannot make a model name from {text!r}; pass --name")
    return cleaned
