"""Reading `onnx.TensorProto` files (the golden `input_i.pb` / `output_i.pb`) without `onnx`.

The runtime cannot depend on the `onnx` package, and the message is small: these are the fields a tensor
needs (onnx.proto), read with `runtime.protobuf`:

    dims = 1 (repeated int64)   data_type = 2 (int32)   float_data = 4   int32_data = 5
    int64_data = 7              name = 8 (string)       raw_data = 9 (bytes, little-endian)
    double_data = 10            data_location = 14 (EXTERNAL data is refused)
"""

import struct

import numpy as np

from onnxformer.runtime import protobuf
from onnxformer.runtime.errors import ManifestError

# onnx.TensorProto.DataType -> numpy dtype
DATA_TYPES: dict[int, np.dtype] = {
    1: np.dtype("<f4"),
    2: np.dtype("u1"),
    3: np.dtype("i1"),
    6: np.dtype("<i4"),
    7: np.dtype("<i8"),
    9: np.dtype("bool"),
    10: np.dtype("<f2"),
    11: np.dtype("<f8"),
}


def read_tensor(data: bytes, *, source: str = "tensor") -> tuple[str, np.ndarray]:
    """The name and value of a serialized TensorProto; `ManifestError` naming `source` if it is not one."""
    try:
        return _read(data)
    except (ValueError, struct.error) as error:
        raise ManifestError(
            f"{source} is not a readable ONNX TensorProto ({error}); re-export the folder"
        ) from None


def _read(data: bytes) -> tuple[str, np.ndarray]:
    dims: list[int] = []
    code, name, raw = 0, "", None
    typed: dict[int, list] = {}
    for number, wire, value in protobuf.fields(data):
        if number == 1:
            dims.extend(
                protobuf.packed_varints(value) if wire == protobuf.LENGTH else [protobuf.signed(value)]
            )
        elif number == 2:
            code = value
        elif number == 8:
            name = bytes(value).decode("utf-8")
        elif number == 9:
            raw = bytes(value)
        elif number == 14 and value == 1:
            raise ValueError("it points at external data, which goldens never use")
        elif number in (4, 5, 7, 10):
            typed.setdefault(number, []).append((wire, value))
    if code not in DATA_TYPES:
        raise ValueError(f"data_type {code} is not supported")
    if any(d < 0 for d in dims):
        raise ValueError(f"negative dimension in {dims}")
    dtype = DATA_TYPES[code]
    count = int(np.prod(dims, dtype=np.int64)) if dims else 1
    if raw is not None:
        if len(raw) != count * dtype.itemsize:
            raise ValueError(
                f"raw_data holds {len(raw)} bytes, shape {dims} of {dtype} needs {count * dtype.itemsize}"
            )
        array = np.frombuffer(raw, dtype=dtype).copy()
    else:
        array = np.array(_typed_values(typed), dtype=dtype)
        if array.size != count:
            raise ValueError(f"holds {array.size} values, shape {dims} needs {count}")
    return name, array.reshape(dims).astype(dtype.newbyteorder("="))


def _typed_values(typed: dict[int, list]) -> list:
    values: list = []
    for number, items in typed.items():
        for wire, value in items:
            if number == 4:  # float_data: packed or single fixed32
                values.extend(struct.unpack(f"<{len(value) // 4}f", bytes(value)))
            elif number == 10:
                values.extend(struct.unpack(f"<{len(value) // 8}d", bytes(value)))
            else:  # int32_data / int64_data: packed or single varint
                values.extend(
                    protobuf.packed_varints(value) if wire == protobuf.LENGTH else [protobuf.signed(value)]
                )
    return values
