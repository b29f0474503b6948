"""Weights moved out of a graph into one external-data file beside it, for graphs past protobuf's 2 GB limit.

    model, weights = externalize(data, location="decoder.onnx.data")

keeps the graph's structure (and its small initializers) in `model` and appends every large initializer's
bytes to `weights`, each at an offset aligned to `ALIGNMENT`, the tensor pointing at it through ONNX's
`external_data` (location, offset, length). `externalize_graphs` does that to the graphs of an export and
lists each weights file in the manifest as that graph's (kind `WEIGHTS_KIND`, options `{"graph": path}`),
with its size and sha256, which is all the runtime will read external data from (runtime/folder.py).

When: `external_data=None` (the default) moves a graph's weights out only when its serialized size would
pass `EXTERNAL_THRESHOLD`, so every model that fits stays one self-contained .onnx file; `True` forces it
(the tests use it on tiny models), `False` never does it.
"""

import dataclasses
import posixpath
from collections.abc import Iterable

import numpy as np
import onnx
from onnx import numpy_helper

from onnxformer.runtime.errors import ExportError
from onnxformer.runtime.folder import sha256_bytes
from onnxformer.runtime.manifest import WEIGHTS_KIND, FileEntry
from onnxformer.runtime.tensorproto import DATA_TYPES

EXTERNAL_THRESHOLD = 1_800_000_000  # bytes; protobuf refuses a message of 2 GiB, with margin for the graph
MIN_TENSOR_BYTES = 1024  # smaller initializers (shapes, scales, biases of tiny models) stay inline
ALIGNMENT = 64  # every tensor starts at a multiple of this in the weights file (aligned for any dtype)
WEIGHTS_SUFFIX = ".data"


def weights_path(graph: str) -> str:
    """The weights file of a graph (its path inside the export folder): `decoder.onnx.data`."""
    return graph + WEIGHTS_SUFFIX


def wants_external(size: int, external_data: bool | None) -> bool:
    """Whether a graph of `size` serialized bytes gets its weights moved out (see the module docstring)."""
    if external_data is None:
        return size > EXTERNAL_THRESHOLD
    if not isinstance(external_data, bool):
        raise ExportError(f"external_data must be True, False or None (automatic), got {external_data!r}")
    return external_data


def externalize(
    model: bytes, *, location: str, min_tensor_bytes: int = MIN_TENSOR_BYTES
) -> tuple[bytes, bytes]:
    """The graph with its large initializers moved to external data, and the weights file's bytes.

    `location` is the weights file's name relative to the graph's folder (what ONNX's `location` means).
    """
    proto = onnx.load_from_string(model)
    weights = externalize_proto(proto, location=location, min_tensor_bytes=min_tensor_bytes)
    return proto.SerializeToString(), weights


def externalize_proto(
    model: onnx.ModelProto, *, location: str, min_tensor_bytes: int = MIN_TENSOR_BYTES
) -> bytes:
    """As `externalize`, in place on a ModelProto (which, unlike its bytes, may pass 2 GB); returns the
    weights file's bytes. Only the main graph's initializers move, as the runtime only allows those."""
    if not location or "/" in location or "\\" in location or location in (".", ".."):
        raise ExportError(f"the weights location must be a plain file name, got {location!r}")
    chunks: list[bytes] = []
    offset = 0
    for tensor in model.graph.initializer:
        if tensor.data_location == onnx.TensorProto.EXTERNAL:
            raise ExportError(f"initializer {tensor.name!r} already uses external data")
        if tensor.data_type not in DATA_TYPES:
            continue  # a type the runtime cannot slice from bytes stays inline
        data = _little_endian_bytes(tensor)
        if len(data) < min_tensor_bytes:
            continue
        padding = -offset % ALIGNMENT
        chunks += [b"\0" * padding, data]
        offset += padding
        _point_at(tensor, location=location, offset=offset, length=len(data))
        offset += len(data)
    return b"".join(chunks)


def externalize_graphs(
    files: dict[str, bytes],
    entries: list[FileEntry],
    graphs: Iterable[str],
    *,
    external_data: bool | None,
) -> tuple[dict[str, bytes], list[FileEntry]]:
    """`files` and `entries` of an export with the weights of `graphs` (paths) moved out where
    `wants_external` says so: each such graph's entry gets its new size and sha256, and its weights
    file is listed right after it. Nothing changes for a graph that stays inline."""
    files, entries = dict(files), list(entries)
    for graph in graphs:
        if not wants_external(len(files[graph]), external_data):
            continue
        model, weights = externalize(files[graph], location=posixpath.basename(weights_path(graph)))
        if not weights:
            continue  # no initializer large enough to move: the graph stays self-contained
        files[graph], files[weights_path(graph)] = model, weights
        index = next(i for i, entry in enumerate(entries) if entry.path == graph)
        entries[index] = dataclasses.replace(entries[index], sha256=sha256_bytes(model), size=len(model))
        listed = FileEntry(
            weights_path(graph), sha256_bytes(weights), len(weights), WEIGHTS_KIND, {"graph": graph}, (), ()
        )
        entries.insert(index + 1, listed)
    return files, entries


def _little_endian_bytes(tensor: onnx.TensorProto) -> bytes:
    """The tensor's values as ONNX's raw_data holds them: little-endian, in row-major order."""
    if tensor.HasField("raw_data"):
        return tensor.raw_data
    array = numpy_helper.to_array(tensor)
    return np.ascontiguousarray(array, dtype=array.dtype.newbyteorder("<")).tobytes()


def _point_at(tensor: onnx.TensorProto, *, location: str, offset: int, length: int) -> None:
    for name in ("raw_data", "float_data", "int32_data", "int64_data", "double_data", "uint64_data"):
        tensor.ClearField(name)
    del tensor.external_data[:]
    for key, value in (("location", location), ("offset", str(offset)), ("length", str(length))):
        entry = tensor.external_data.add()
        entry.key, entry.value = key, value
    tensor.data_location = onnx.TensorProto.EXTERNAL
