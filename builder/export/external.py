"""Weights moved out of a graph into one external-data file beside it, for graphs past protobuf's 2 GB limit.

    model, weights = externalize(data, location="decoder.onnx.data")

keeps the graph's structure (and its small initializers) in `model` and appends every large initializer's
bytes to `weights`, each at an offset aligned to `ALIGNMENT`, the tensor pointing at it through ONNX's
`external_data` (location, offset, length). The export pipeline (`pipeline.export_one`) does that with
`move_weights_out` on the in-memory ModelProto, before the graph is serialised or checked, so a model
past 2 GB never has to fit in one protobuf; it lists each weights file in the manifest as that graph's
(kind `WEIGHTS_KIND`, options `{"graph": path}`), with its size and sha256, which is all the runtime will
read external data from (runtime/folder.py).

When: `external_data=None` (the default) moves a graph's weights out only when its serialized size would
pass `EXTERNAL_THRESHOLD`, so every model that fits stays one self-contained .onnx file; `True` forces it
(the tests use it on tiny models), `False` never does it.
"""

import posixpath
import tempfile
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper

from onnxformer.runtime.errors import ExportError
from onnxformer.runtime.folder import GraphBytes, external_tensors, sha256_bytes
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


def move_weights_out(model: onnx.ModelProto, graph: str, external_data: bool | None) -> bytes:
    """In the export pipeline, before the graph is ever serialised: move `model`'s weights out in place
    when `wants_external` says so (by its in-memory size, which may pass 2 GB); returns the weights
    file's bytes (b"" when the graph stays self-contained)."""
    if not wants_external(model.ByteSize(), external_data):
        return b""
    return externalize_proto(model, location=posixpath.basename(weights_path(graph)))


def check_graph_with_weights(model: onnx.ModelProto, graph: str, weights: bytes) -> None:
    """onnx.checker (with shape inference) on a graph whose weights are already out: it reads external data
    from files only, so both go to a temporary folder first (only for graphs past the threshold)."""
    with tempfile.TemporaryDirectory(prefix="onnxformer-check-") as folder:
        (Path(folder) / posixpath.basename(weights_path(graph))).write_bytes(weights)
        path = Path(folder) / posixpath.basename(graph)
        path.write_bytes(model.SerializeToString())
        try:
            onnx.checker.check_model(str(path), full_check=True)
        except onnx.checker.ValidationError as error:
            raise ExportError(f"the exported graph fails onnx.checker: {error}") from error


def weights_entry(graph: str, weights: bytes) -> FileEntry:
    """The manifest entry of a graph's weights file."""
    return FileEntry(
        weights_path(graph), sha256_bytes(weights), len(weights), WEIGHTS_KIND, {"graph": graph}, (), ()
    )


def graph_bytes(model: bytes, weights: bytes) -> bytes | GraphBytes:
    """What ONNX Runtime is given for a graph and its weights file: the plain bytes when there are no
    weights, else the graph with its external tensors sliced from `weights` (as the runtime does)."""
    if not weights:
        return model
    tensors = {}
    for tensor in external_tensors(model, name="the exported graph"):
        count = int(np.prod(tensor.dims, dtype=np.int64))
        flat = np.frombuffer(weights, dtype=tensor.dtype, count=count, offset=tensor.offset)
        tensors[tensor.name] = flat.reshape(tensor.dims)
    return GraphBytes(model, tensors)


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
