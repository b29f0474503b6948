"""Reading `onnx.TensorProto` messages without `onnx`: the golden `input_i.pb` / `output_i.pb` files,
and the description of an initializer whose bytes live in an external-data file.

The runtime cannot depend on the `onnx` package, and the message is small: these are the fields a tensor
needs (onnx.proto), read with `runtime.protobuf`:

    dims = 1 (repeated int64)   data_type = 2 (int32)   float_data = 4   int32_data = 5
    string_data = 6             int64_data = 7          name = 8 (string)
    raw_data = 9 (bytes, little-endian)                 double_data = 10     uint64_data = 11
    external_data = 13 (repeated {key = 1, value = 2})  data_location = 14 (1 = EXTERNAL)

Goldens never use external data (`read_tensor` refuses it). `read_external_tensor` only describes where
an external tensor's bytes are; `runtime.folder` decides whether that place may be read.
"""

import struct
from dataclasses import dataclass

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
    typed: dict[int, list[tuple[int, int | memoryview]]] = {}
    for number, wire, value in protobuf.fields(data):
        if number == 1:
            dims.extend(protobuf.int64_values(number, wire, value))
        elif number == 2:
            code = protobuf.as_varint(number, value)
        elif number == 8:
            name = bytes(protobuf.as_bytes(number, value)).decode("utf-8")
        elif number == 9:
            raw = bytes(protobuf.as_bytes(number, value))
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


def _typed_values(typed: dict[int, list[tuple[int, int | memoryview]]]) -> list[float]:
    values: list[float] = []
    for number, items in typed.items():
        for wire, value in items:
            if number == 4:  # float_data: packed or single fixed32
                floats = protobuf.as_bytes(number, value)
                values.extend(struct.unpack(f"<{len(floats) // 4}f", bytes(floats)))
            elif number == 10:
                doubles = protobuf.as_bytes(number, value)
                values.extend(struct.unpack(f"<{len(doubles) // 8}d", bytes(doubles)))
            else:  # int32_data / int64_data: packed or single varint
                values.extend(protobuf.int64_values(number, wire, value))
    return values


EXTERNAL = 1  # TensorProto.DataLocation
_EXTERNAL_KEYS = ("location", "offset", "length", "checksum")  # onnx.proto's keys for external_data
_DATA_FIELDS = (4, 5, 6, 7, 9, 10, 11)  # every field that holds a tensor's values inline


@dataclass(frozen=True)
class ExternalTensor:
    """An initializer whose bytes are `length` bytes at `offset` of the file `location` (relative to the
    model's folder, as onnx.proto defines it)."""

    name: str
    dtype: np.dtype
    dims: tuple[int, ...]
    location: str
    offset: int
    length: int  # always the tensor's byte size (checked against `length` when the model gives one)

    @property
    def end(self) -> int:
        return self.offset + self.length


def is_external(data: bytes | memoryview) -> bool:
    """Whether a serialized TensorProto says anything about external data (entries or location)."""
    return any(
        number == 13 or (number == 14 and wire == protobuf.VARINT and value != 0)
        for number, wire, value in protobuf.fields(data)
    )


def read_external_tensor(data: bytes | memoryview) -> ExternalTensor:
    """Where an external tensor's bytes are; `ValueError` naming the problem unless the message is a
    complete, consistent external tensor (data_location EXTERNAL, a location, no inline values)."""
    dims: list[int] = []
    code, name, location_flag = 0, None, 0
    entries: dict[str, str] = {}
    for number, wire, value in protobuf.fields(data):
        if number == 1:
            dims.extend(protobuf.int64_values(number, wire, value))
        elif number == 2 and wire == protobuf.VARINT:
            code = protobuf.as_varint(number, value)
        elif number == 8 and wire == protobuf.LENGTH:
            name = _text(protobuf.as_bytes(number, value), "name")
        elif number == 13 and wire == protobuf.LENGTH:
            key, text = _entry(protobuf.as_bytes(number, value))
            if key not in _EXTERNAL_KEYS:
                raise ValueError(f"external_data has the unknown key {key!r} (known: {_EXTERNAL_KEYS})")
            if key in entries:
                raise ValueError(f"external_data gives {key!r} twice")
            entries[key] = text
        elif number == 14 and wire == protobuf.VARINT:
            location_flag = protobuf.as_varint(number, value)
        elif number in _DATA_FIELDS:
            raise ValueError("it holds inline values as well as external data")
    shown = repr(name) if name else "a tensor"
    if location_flag != EXTERNAL:
        raise ValueError(f"{shown} has external_data entries but data_location is not EXTERNAL")
    if not name:
        raise ValueError("an external tensor has no name")
    if "location" not in entries:
        raise ValueError(f"{shown} is marked EXTERNAL but its external_data gives no location")
    if code not in DATA_TYPES:
        raise ValueError(f"{shown} has data_type {code}, which the runtime cannot load from external data")
    if any(d < 0 for d in dims):
        raise ValueError(f"{shown} has a negative dimension in {dims}")
    dtype = DATA_TYPES[code]
    size = int(np.prod(dims, dtype=object)) * dtype.itemsize if dims else dtype.itemsize
    offset = _number(entries.get("offset", "0"), "offset", shown)
    length = _number(entries["length"], "length", shown) if "length" in entries else size
    if length != size:
        raise ValueError(f"{shown} gives length {length}, but shape {dims} of {dtype} needs {size} bytes")
    return ExternalTensor(name, dtype, tuple(dims), entries["location"], offset, length)


def _entry(value: memoryview) -> tuple[str, str]:
    key, text = "", ""
    for number, wire, item in protobuf.fields(value):
        if number == 1 and wire == protobuf.LENGTH:
            key = _text(protobuf.as_bytes(number, item), "external_data key")
        elif number == 2 and wire == protobuf.LENGTH:
            text = _text(protobuf.as_bytes(number, item), "external_data value")
    return key, text


def _text(value: memoryview, what: str) -> str:
    try:
        return bytes(value).decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError(f"its {what} is not UTF-8") from None


def _number(text: str, key: str, shown: str) -> int:
    """A decimal offset or length, as onnx writes them: ASCII digits only (no sign, space or '0x')."""
    if not text or len(text) > 20 or not all("0" <= c <= "9" for c in text):
        raise ValueError(f"{shown} gives external_data {key} {text[:40]!r}, not a decimal number of bytes")
    return int(text)
