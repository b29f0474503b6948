"""A Triton Inference Server model repository for an export's encoder graphs (onnxruntime backend).

    REPO/<name>_encoder/config.pbtxt      names, dtypes and dims from the manifest
    REPO/<name>_encoder/1/model.onnx      the graph, byte for byte (its sha256 checked on the way)
    REPO/<name>_encoder/1/encoder.onnx.data  its external weights, when the export keeps them outside

Each config.pbtxt opens with a comment that marks the model folder as onnxformer's and lists the files it
wrote there. An existing repository is replaced (with `overwrite`) only when every entry is such a folder
holding only the files its mark lists: another model of yours, or a file you added beside ours, is named
and the repository refused.

The configs set max_batch_size 0: the batch axis is an explicit dynamic dim (-1), as in the graph, and
clients send padded batches; Triton's dynamic batcher could not merge requests of different sequence
lengths anyway. Tokenizing stays on the client (tokenizer.json is in the export folder).
"""

import os
import posixpath
import re
import shutil
from collections.abc import Iterable
from pathlib import Path

from onnxformer.runtime.errors import InputError, ManifestError
from onnxformer.runtime.loader import load
from onnxformer.runtime.manifest import TensorSpec

# manifest dtype -> Triton DataType enum name (model_config.proto)
TRITON_DTYPES = {
    "float32": "TYPE_FP32",
    "float16": "TYPE_FP16",
    "int64": "TYPE_INT64",
    "int32": "TYPE_INT32",
    "bool": "TYPE_BOOL",
}
ENCODER_ROLES = ("encoder",)  # the manifest `graphs` roles that are exported


MARK = "# onnxformer triton wrote this model folder: "  # then the files it wrote, comma-separated


def config_pbtxt(
    name: str,
    inputs: Iterable[TensorSpec],
    outputs: Iterable[TensorSpec],
    *,
    instances: int = 1,
    files: tuple[str, ...] = (),
) -> str:
    """The text-format ModelConfig of one graph (TensorSpecs from the manifest's file entry), opened by the
    mark that lists `files`, the model folder's files besides config.pbtxt (POSIX paths)."""

    def tensors(specs: Iterable[TensorSpec]) -> str:
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
        f"{MARK}{', '.join(('config.pbtxt', *files))}\n"
        f'name: "{name}"\n'
        'backend: "onnxruntime"\n'
        "max_batch_size: 0\n"
        f"input [\n{tensors(inputs)}\n]\n"
        f"output [\n{tensors(outputs)}\n]\n"
        f"instance_group [\n  {{\n    kind: KIND_CPU\n    count: {instances}\n  }}\n]\n"
    )


def write_repository(
    folder: str | os.PathLike[str],
    out: str | os.PathLike[str],
    *,
    name: str | None = None,
    overwrite: bool = False,
) -> list[str]:
    """Write the model repository for the folder's encoder graphs into `out`; returns the model names.

    `out` appears whole or not at all; an existing `out` is replaced only with `overwrite`, and only if it
    is a repository this function wrote, holding nothing else: nothing else is lost."""
    out = Path(out)
    if out.exists() or out.is_symlink():
        _check_ours(out)
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
            files = ["1/model.onnx"]
            for weights in manifest.files:  # external data: beside model.onnx, where its location points
                location = posixpath.relpath(weights.path, posixpath.dirname(path) or ".")
                if weights.weights_of == path and not location.startswith(".."):
                    (version / location).parent.mkdir(parents=True, exist_ok=True)
                    (version / location).write_bytes(model.export.folder.read(weights.path))
                    files.append(f"1/{location}")
            (staging / model_name / "config.pbtxt").write_text(
                config_pbtxt(model_name, entry.inputs, entry.outputs, files=tuple(files)), encoding="utf-8"
            )
            names.append(model_name)
        _swap_in(staging, out)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return names


def _check_ours(out: Path) -> None:
    """Refuse `out` unless it is a repository this module wrote: a folder (not a link) whose every entry is
    a model folder with a marked config.pbtxt and no file its mark does not list."""
    if out.is_symlink() or not out.is_dir():
        raise InputError(
            f"refusing to replace {out}: it is not a Triton model repository onnxformer wrote; choose "
            "another --out"
        )
    foreign = []
    for model in sorted(out.iterdir()):
        listed = _marked_files(model)
        if listed is None:
            foreign.append(model.name)
            continue
        for path in sorted(model.rglob("*")):
            relative = path.relative_to(model).as_posix()
            unlisted = path.is_file() and relative not in listed
            if path.is_symlink() or unlisted or not (path.is_dir() or path.is_file()):
                foreign.append(f"{model.name}/{relative}")
    if foreign:
        shown = ", ".join(foreign[:5]) + (f" and {len(foreign) - 5} more" if len(foreign) > 5 else "")
        raise InputError(
            f"refusing to replace {out}: it is not a Triton model repository onnxformer wrote, or it holds "
            f"what onnxformer did not write ({shown}); move those out or choose another --out"
        )


def _marked_files(model: Path) -> set[str] | None:
    """The files a model folder's config.pbtxt mark lists, or None when the folder has no such mark."""
    config = model / "config.pbtxt"
    if model.is_symlink() or not model.is_dir() or config.is_symlink() or not config.is_file():
        return None
    with config.open("rb") as handle:
        first = handle.readline(4096).decode("utf-8", errors="replace").rstrip("\n")
    if not first.startswith(MARK):
        return None
    return {name.strip() for name in first[len(MARK) :].split(",")}


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
