"""The protobuf wire format, by hand: the torch-free runtime may not depend on the `onnx` package.

Only what reading ONNX messages needs (https://protobuf.dev/programming-guides/encoding/): fields as
(number, wire type, value), with varints as ints and every other wire type as the raw bytes. Malformed
input raises `ValueError`; callers turn it into their own typed error. `field` writes one field, for the
tests and scripts that build hostile messages.
"""

from collections.abc import Iterator

VARINT, FIXED64, LENGTH, FIXED32 = 0, 1, 2, 5


def fields(buffer: memoryview | bytes) -> Iterator[tuple[int, int, int | memoryview]]:
    """(field number, wire type, value) of one message: varints as ints, the rest as memoryviews."""
    buffer = memoryview(buffer)
    position = 0
    while position < len(buffer):
        key, position = varint(buffer, position)
        number, wire = key >> 3, key & 7
        if number == 0:
            raise ValueError("field number 0")
        value: int | memoryview
        if wire == VARINT:
            value, position = varint(buffer, position)
        elif wire in (FIXED64, LENGTH, FIXED32):
            if wire == LENGTH:
                size, position = varint(buffer, position)
            else:
                size = 8 if wire == FIXED64 else 4
            if position + size > len(buffer):
                raise ValueError(f"field {number} runs past the end of the data")
            value, position = buffer[position : position + size], position + size
        else:
            raise ValueError(f"unsupported wire type {wire}")
        yield number, wire, value


def varint(buffer: memoryview | bytes, position: int) -> tuple[int, int]:
    """The varint at `position` and the position after it."""
    value = 0
    for shift in range(0, 70, 7):
        if position >= len(buffer):
            raise ValueError("truncated varint")
        byte = buffer[position]
        position += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, position
    raise ValueError("varint longer than 10 bytes")


def signed(value: int) -> int:
    """An int64 field's value from its varint (negative numbers take ten bytes, two's complement)."""
    value &= (1 << 64) - 1
    return value - (1 << 64) if value >= 1 << 63 else value


def packed_varints(value: memoryview | bytes) -> list[int]:
    """The int64 values of a packed repeated field."""
    out, position = [], 0
    while position < len(value):
        item, position = varint(value, position)
        out.append(signed(item))
    return out


def as_varint(number: int, value: int | memoryview) -> int:
    """Field `number`'s value where a varint is expected; `ValueError` if the message holds bytes there."""
    if not isinstance(value, int):
        raise ValueError(f"field {number} holds bytes where a varint belongs")
    return value


def as_bytes(number: int, value: int | memoryview) -> memoryview:
    """Field `number`'s bytes where bytes are expected; `ValueError` if the message holds a varint there."""
    if isinstance(value, int):
        raise ValueError(f"field {number} holds a varint where bytes belong")
    return value


def int64_values(number: int, wire: int, value: int | memoryview) -> list[int]:
    """The values of one occurrence of a repeated int64 field: packed (length-delimited) or one varint."""
    if wire == LENGTH:
        return packed_varints(as_bytes(number, value))
    return [signed(as_varint(number, value))]


def encode_varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def field(number: int, value: bytes | int) -> bytes:
    """One serialized field: an int as a varint, bytes as a length-delimited field (a string or message)."""
    if isinstance(value, int):
        return encode_varint(number << 3) + encode_varint(value)
    return encode_varint(number << 3 | LENGTH) + encode_varint(len(value)) + value
