/**
 * A minimal decoder for serialized onnx.TensorProto messages (the ONNX backend test-data `.pb` files),
 * written against the protobuf wire format so this host needs no protobuf dependency.
 *
 * Wire format: each field is a varint key (field number << 3 | wire type) followed by a varint (type 0),
 * 8 bytes (type 1), a varint length and that many bytes (type 2), or 4 bytes (type 5). Fields read here
 * (onnx/onnx.proto, TensorProto): dims = 1 (repeated int64, packed or not), data_type = 2,
 * float_data = 4 (packed or not), int64_data = 7 (packed or not), name = 8, raw_data = 9 (little-endian),
 * data_location = 14 (external data is refused). Every other field is skipped.
 */

import { GoldenError } from "./errors.js";

/** onnx.TensorProto.DataType values this host reads, with the engine dtype name. */
export const DATA_TYPES = { 1: "float32", 7: "int64" };

const WIRE_VARINT = 0;
const WIRE_I64 = 1;
const WIRE_LEN = 2;
const WIRE_I32 = 5;

class Reader {
  constructor(bytes, what) {
    this.bytes = bytes;
    this.view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
    this.pos = 0;
    this.what = what;
  }

  get done() {
    return this.pos >= this.bytes.length;
  }

  fail(problem) {
    return new GoldenError(`${this.what} is not a valid TensorProto: ${problem} at byte ${this.pos}`);
  }

  /** A varint as a BigInt (int64 fields need all 64 bits; negative int64s take 10 bytes). */
  varint() {
    let result = 0n;
    for (let shift = 0n; shift < 70n; shift += 7n) {
      if (this.pos >= this.bytes.length) throw this.fail("truncated varint");
      const byte = this.bytes[this.pos++];
      result |= BigInt(byte & 0x7f) << shift;
      if ((byte & 0x80) === 0) return result;
    }
    throw this.fail("varint longer than 10 bytes");
  }

  int64() {
    return BigInt.asIntN(64, this.varint());
  }

  /** A varint that must fit a JS number (field numbers, lengths, enums). */
  smallVarint() {
    const value = this.varint();
    if (value > BigInt(Number.MAX_SAFE_INTEGER)) throw this.fail("varint too large");
    return Number(value);
  }

  take(length) {
    if (this.pos + length > this.bytes.length) throw this.fail(`field of ${length} bytes runs past the end`);
    const slice = this.bytes.subarray(this.pos, this.pos + length);
    this.pos += length;
    return slice;
  }

  lengthDelimited() {
    return this.take(this.smallVarint());
  }

  float32() {
    const offset = this.pos;
    this.take(4);
    return this.view.getFloat32(offset, true);
  }

  skip(wireType) {
    if (wireType === WIRE_VARINT) this.varint();
    else if (wireType === WIRE_I64) this.take(8);
    else if (wireType === WIRE_LEN) this.lengthDelimited();
    else if (wireType === WIRE_I32) this.take(4);
    else throw this.fail(`unsupported wire type ${wireType}`);
  }
}

/**
 * Decode one TensorProto.
 * @param {Uint8Array} bytes the serialized message
 * @param {string} what the file, for error messages
 * @returns {{name: string, dtype: "float32"|"int64", dims: number[], data: Float32Array|BigInt64Array}}
 */
export function decodeTensorProto(bytes, what = "tensor") {
  const reader = new Reader(bytes, what);
  const dims = [];
  const floats = [];
  const int64s = [];
  let dataType = 0;
  let name = "";
  let raw = null;
  let external = false;
  while (!reader.done) {
    const key = reader.smallVarint();
    const field = Math.floor(key / 8);
    const wireType = key & 7;
    if (field === 1 && wireType === WIRE_VARINT) dims.push(reader.int64());
    else if (field === 1 && wireType === WIRE_LEN) readPacked(reader, () => dims.push(reader.int64()));
    else if (field === 2 && wireType === WIRE_VARINT) dataType = reader.smallVarint();
    else if (field === 4 && wireType === WIRE_I32) floats.push(reader.float32());
    else if (field === 4 && wireType === WIRE_LEN) readPacked(reader, () => floats.push(reader.float32()));
    else if (field === 7 && wireType === WIRE_VARINT) int64s.push(reader.int64());
    else if (field === 7 && wireType === WIRE_LEN) readPacked(reader, () => int64s.push(reader.int64()));
    else if (field === 8 && wireType === WIRE_LEN) name = new TextDecoder().decode(reader.lengthDelimited());
    else if (field === 9 && wireType === WIRE_LEN) raw = reader.lengthDelimited();
    else if (field === 14 && wireType === WIRE_VARINT) external = reader.smallVarint() === 1;
    else reader.skip(wireType);
  }
  if (external)
    throw new GoldenError(`${what} keeps its data in an external file; this host reads inline data`);
  const dtype = DATA_TYPES[dataType];
  if (dtype === undefined) {
    throw new GoldenError(`${what} has data_type ${dataType}; this host reads FLOAT (1) and INT64 (7)`);
  }
  const shape = dims.map((dim) => {
    if (dim < 0n || dim > BigInt(Number.MAX_SAFE_INTEGER)) {
      throw new GoldenError(`${what} has a dimension of ${dim}`);
    }
    return Number(dim);
  });
  const count = shape.reduce((product, dim) => product * dim, 1);
  let data;
  if (raw !== null) data = fromRaw(raw, dtype, what);
  else if (dtype === "float32") data = Float32Array.from(floats);
  else data = BigInt64Array.from(int64s);
  if (data.length !== count) {
    throw new GoldenError(`${what} has ${data.length} values but its shape [${shape}] needs ${count}`);
  }
  return { name, dtype, dims: shape, data };
}

function readPacked(reader, readOne) {
  const length = reader.smallVarint();
  const end = reader.pos + length;
  if (end > reader.bytes.length) throw reader.fail("packed field runs past the end");
  while (reader.pos < end) readOne();
  if (reader.pos !== end) throw reader.fail("packed field overruns its length");
}

/** raw_data is little-endian whatever the host; read it through a DataView into an aligned array. */
function fromRaw(raw, dtype, what) {
  const width = dtype === "float32" ? 4 : 8;
  if (raw.length % width !== 0) {
    throw new GoldenError(`${what} has ${raw.length} bytes of raw_data, not a multiple of ${width}`);
  }
  const view = new DataView(raw.buffer, raw.byteOffset, raw.byteLength);
  const count = raw.length / width;
  if (dtype === "float32") {
    const data = new Float32Array(count);
    for (let i = 0; i < count; i++) data[i] = view.getFloat32(i * 4, true);
    return data;
  }
  const data = new BigInt64Array(count);
  for (let i = 0; i < count; i++) data[i] = view.getBigInt64(i * 8, true);
  return data;
}
