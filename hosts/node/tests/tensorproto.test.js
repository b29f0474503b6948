// The .pb decoder: files written by the onnx Python package (test/fixtures, see fixtures/README.md), and
// hand-made messages for the wire-format variants onnx itself does not write (packed dims, unpacked
// float_data / int64_data).

import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { test } from "node:test";

import { GoldenError } from "../src/errors.js";
import { decodeTensorProto } from "../src/tensorproto.js";

const fixture = (name) => new Uint8Array(readFileSync(new URL(`fixtures/${name}`, import.meta.url)));

// A minimal protobuf writer for the hand-made cases.
function varint(value) {
  let v = BigInt.asUintN(64, BigInt(value));
  const bytes = [];
  do {
    const low = Number(v & 0x7fn);
    v >>= 7n;
    bytes.push(v ? low | 0x80 : low);
  } while (v);
  return bytes;
}
const key = (field, wire) => varint(field * 8 + wire);
const f32 = (value) => [...new Uint8Array(Float32Array.of(value).buffer)];
const int = (field, value) => [...key(field, 0), ...varint(value)];
const float = (field, value) => [...key(field, 5), ...f32(value)];
const len = (field, bytes) => [...key(field, 2), ...varint(bytes.length), ...bytes];

test("float raw_data, dims written unpacked (as onnx writes them)", () => {
  const tensor = decodeTensorProto(fixture("float_raw_2x3.pb"));
  assert.equal(tensor.name, "logits");
  assert.equal(tensor.dtype, "float32");
  assert.deepEqual(tensor.dims, [2, 3]);
  assert.deepEqual([...tensor.data], [-2.5, -1.5, -0.5, 0.5, 1.5, 2.5]);
});

test("int64 raw_data keeps all 64 bits, negatives included", () => {
  const tensor = decodeTensorProto(fixture("int64_raw_4.pb"));
  assert.equal(tensor.dtype, "int64");
  assert.deepEqual(tensor.dims, [4]);
  assert.deepEqual([...tensor.data], [-1n, 0n, 2n ** 40n, -(2n ** 62n)]);
});

test("a zero-size dimension gives an empty tensor of the right shape", () => {
  const tensor = decodeTensorProto(fixture("float_empty_1x4x0x32.pb"));
  assert.deepEqual(tensor.dims, [1, 4, 0, 32]);
  assert.equal(tensor.data.length, 0);
  assert.equal(tensor.name, "past_key_values.0.key");
});

test("float_data and int64_data (packed) instead of raw_data", () => {
  const floats = decodeTensorProto(fixture("float_data_3.pb"));
  assert.deepEqual([...floats.data], [1.5, -2.0, 3.25]);
  const ints = decodeTensorProto(fixture("int64_data_2x2.pb"));
  assert.deepEqual(ints.dims, [2, 2]);
  assert.deepEqual([...ints.data], [7n, -7n, 2n ** 33n, 0n]);
});

test("packed dims, unpacked float_data and int64_data", () => {
  const floats = new Uint8Array([
    ...len(1, [...varint(1), ...varint(2)]), // dims, packed
    ...int(2, 1), // data_type FLOAT
    ...float(4, 0.25), // float_data, one field per value
    ...float(4, -8),
    ...len(8, [...new TextEncoder().encode("x")]), // name
    ...len(12, [0x61, 0x62]), // doc_string, skipped
  ]);
  assert.deepEqual(decodeTensorProto(floats), {
    name: "x",
    dtype: "float32",
    dims: [1, 2],
    data: Float32Array.of(0.25, -8),
  });
  const ints = new Uint8Array([...int(1, 2), ...int(2, 7), ...int(7, -3), ...int(7, 5)]);
  assert.deepEqual([...decodeTensorProto(ints).data], [-3n, 5n]);
});

test("unsupported data types, truncated messages and wrong counts are refused by name", () => {
  assert.throws(
    () => decodeTensorProto(fixture("int32_raw.pb"), "int32_raw.pb"),
    (error) => {
      assert.ok(error instanceof GoldenError);
      assert.match(error.message, /int32_raw\.pb has data_type 6/);
      return true;
    },
  );
  const whole = fixture("float_raw_2x3.pb");
  assert.throws(
    () => decodeTensorProto(whole.subarray(0, whole.length - 3), "cut.pb"),
    /cut\.pb is not a valid TensorProto/,
  );
  const wrongCount = new Uint8Array([...int(1, 3), ...int(2, 1), ...len(9, f32(1))]);
  assert.throws(
    () => decodeTensorProto(wrongCount, "short.pb"),
    /short\.pb has 1 values but its shape \[3\] needs 3/,
  );
  const external = new Uint8Array([...int(2, 1), ...int(14, 1)]); // data_location EXTERNAL
  assert.throws(() => decodeTensorProto(external, "ext.pb"), /external file/);
});
