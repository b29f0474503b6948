/**
 * External data in an ONNX model, judged without onnx (the same rules as the Python runtime's
 * runtime/folder.py): only the main graph's initializers may keep their bytes in an external file, and
 * `ExportFolder.graph` then allows only the file the manifest lists as that graph's weights, every
 * tensor's offset and length inside its checked size. The engine is handed the checked bytes
 * (`externalData: [{ path, data }]`), never left to open a path.
 *
 * Where a TensorProto can sit (onnx.proto field numbers): ModelProto.graph = 7, .training_info = 20,
 * .functions = 25; GraphProto.node = 1, .initializer = 5, .sparse_initializer = 15; NodeProto.attribute =
 * 5; AttributeProto.t = 5, .g = 6, .tensors = 10, .graphs = 11, .sparse_tensor = 22, .sparse_tensors =
 * 23; FunctionProto.node = 7, .attribute_proto = 11; SparseTensorProto.values = 1, .indices = 2;
 * TrainingInfoProto.initialization = 1, .algorithm = 2. TensorProto.external_data = 13 (entries: key = 1,
 * value = 2), .data_location = 14 (1 = EXTERNAL).
 */

import { ManifestError } from "./errors.js";

const MODEL = "model";
const GRAPH = "graph";
const TENSOR = "tensor";
const HOLDS = {
  model: { 7: GRAPH, 20: "training", 25: "function" },
  training: { 1: GRAPH, 2: GRAPH },
  graph: { 1: "node", 5: TENSOR, 15: "sparse" },
  node: { 5: "attribute" },
  attribute: { 5: TENSOR, 6: GRAPH, 10: TENSOR, 11: GRAPH, 22: "sparse", 23: "sparse" },
  function: { 7: "node", 11: "attribute" },
  sparse: { 1: TENSOR, 2: TENSOR },
  tensor: {},
};
const MAX_DEPTH = 64;
const INLINE_FIELDS = new Set([4, 5, 6, 7, 9, 10, 11]); // fields holding a tensor's values inline
const KEYS = ["location", "offset", "length", "checksum"];
/** onnx.TensorProto.DataType -> bytes per element, for the types an external tensor may have. */
const ITEM_SIZE = { 1: 4, 2: 1, 3: 1, 6: 4, 7: 8, 9: 1, 10: 2, 11: 8 };

class Invalid extends Error {}

/** The fields of one message as [field, wireType, value]: numbers for varints, subarrays otherwise. */
function* fields(bytes) {
  let pos = 0;
  const varint = () => {
    let value = 0n;
    for (let shift = 0n; shift < 70n; shift += 7n) {
      if (pos >= bytes.length) throw new Invalid("truncated varint");
      const byte = bytes[pos++];
      value |= BigInt(byte & 0x7f) << shift;
      if ((byte & 0x80) === 0) return value;
    }
    throw new Invalid("varint longer than 10 bytes");
  };
  const take = (length) => {
    if (length > BigInt(bytes.length - pos)) throw new Invalid("a field runs past the end of the data");
    const slice = bytes.subarray(pos, pos + Number(length));
    pos += Number(length);
    return slice;
  };
  while (pos < bytes.length) {
    const key = varint();
    const field = Number(key >> 3n);
    const wire = Number(key & 7n);
    if (field === 0) throw new Invalid("field number 0");
    if (wire === 0) yield [field, wire, varint()];
    else if (wire === 1) yield [field, wire, take(8n)];
    else if (wire === 2) yield [field, wire, take(varint())];
    else if (wire === 5) yield [field, wire, take(4n)];
    else throw new Invalid(`unsupported wire type ${wire}`);
  }
}

function usesExternal(bytes, kind, depth) {
  if (depth > MAX_DEPTH) throw new Invalid(`messages nested more than ${MAX_DEPTH} deep`);
  for (const [field, wire, value] of fields(bytes)) {
    if (kind === TENSOR && (field === 13 || (field === 14 && wire === 0 && value !== 0n))) return true;
    const held = HOLDS[kind][field];
    if (held === undefined) continue;
    if (wire !== 2) throw new Invalid(`field ${field} has wire type ${wire}, not a message`);
    if (usesExternal(value, held, depth + 1)) return true;
  }
  return false;
}

const decode = (bytes) => new TextDecoder("utf-8", { fatal: true }).decode(bytes);

/** A decimal offset or length as onnx writes it: ASCII digits only. */
function number(text, key, shown) {
  if (!/^[0-9]{1,20}$/.test(text)) {
    throw new Invalid(
      `${shown} gives external_data ${key} ${JSON.stringify(text.slice(0, 40))}, not a decimal number of bytes`,
    );
  }
  return BigInt(text);
}

/** Where one external initializer's bytes are: {name, location, offset, length} (BigInt offsets). */
function readExternalTensor(bytes) {
  const dims = [];
  let dataType = 0;
  let name = "";
  let flag = 0n;
  const entries = {};
  for (const [field, wire, value] of fields(bytes)) {
    if (field === 1 && wire === 0) dims.push(BigInt.asIntN(64, value));
    else if (field === 1 && wire === 2)
      for (const [, , dim] of fields(packedAsFields(value))) dims.push(BigInt.asIntN(64, dim));
    else if (field === 2 && wire === 0) dataType = Number(value);
    else if (field === 8 && wire === 2) name = decode(value);
    else if (field === 13 && wire === 2) {
      let key = "";
      let text = "";
      for (const [inner, innerWire, item] of fields(value)) {
        if (inner === 1 && innerWire === 2) key = decode(item);
        else if (inner === 2 && innerWire === 2) text = decode(item);
      }
      if (!KEYS.includes(key)) throw new Invalid(`external_data has the unknown key ${JSON.stringify(key)}`);
      if (Object.hasOwn(entries, key)) throw new Invalid(`external_data gives ${JSON.stringify(key)} twice`);
      entries[key] = text;
    } else if (field === 14 && wire === 0) flag = value;
    else if (INLINE_FIELDS.has(field)) throw new Invalid("it holds inline values as well as external data");
  }
  const shown = name ? JSON.stringify(name) : "a tensor";
  if (flag !== 1n) throw new Invalid(`${shown} has external_data entries but data_location is not EXTERNAL`);
  if (!name) throw new Invalid("an external tensor has no name");
  if (!Object.hasOwn(entries, "location"))
    throw new Invalid(`${shown} is marked EXTERNAL but gives no location`);
  const itemSize = ITEM_SIZE[dataType];
  if (itemSize === undefined)
    throw new Invalid(`${shown} has data_type ${dataType}, which cannot be loaded from external data`);
  if (dims.some((dim) => dim < 0n)) throw new Invalid(`${shown} has a negative dimension`);
  const size = dims.reduce((product, dim) => product * dim, 1n) * BigInt(itemSize);
  const offset = number(entries.offset ?? "0", "offset", shown);
  const length = Object.hasOwn(entries, "length") ? number(entries.length, "length", shown) : size;
  if (length !== size)
    throw new Invalid(`${shown} gives length ${length}, but its shape and type need ${size} bytes`);
  return { name, location: entries.location, offset, length };
}

/** A packed repeated varint field, re-keyed as field-1 varints so `fields` can walk it. */
function packedAsFields(value) {
  const out = [];
  let pos = 0;
  while (pos < value.length) {
    out.push(0x08);
    do {
      if (pos >= value.length) throw new Invalid("truncated packed varint");
      out.push(value[pos]);
    } while (value[pos++] & 0x80);
  }
  return Uint8Array.from(out);
}

/**
 * The main graph's initializers that keep their data in external files, as [{name, location, offset,
 * length}]; a ManifestError if `bytes` is not an ONNX model, if any other tensor uses external data, or
 * an external initializer is incomplete.
 */
export function externalTensors(bytes, what) {
  const found = [];
  try {
    for (const [field, wire, value] of fields(bytes)) {
      const held = HOLDS.model[field];
      if (held === undefined) continue;
      if (wire !== 2) throw new Invalid(`field ${field} has wire type ${wire}, not a message`);
      if (field !== 7) {
        if (usesExternal(value, held, 1)) throw notAllowed(what, "a function or training graph");
        continue;
      }
      for (const [inner, innerWire, item] of fields(value)) {
        const kind = HOLDS.graph[inner];
        if (kind === undefined) continue;
        if (innerWire !== 2) throw new Invalid(`field ${inner} has wire type ${innerWire}, not a message`);
        if (inner === 5) {
          if (usesExternal(item, TENSOR, 2)) found.push(readExternalTensor(item));
        } else if (usesExternal(item, kind, 2)) {
          throw notAllowed(what, "a node's attribute, a subgraph or a sparse initializer");
        }
      }
    }
  } catch (error) {
    if (!(error instanceof Invalid) && !(error instanceof TypeError)) throw error; // TypeError: bad UTF-8
    throw new ManifestError(
      `${what} is not a valid ONNX model or describes its external data wrongly (${error.message}); ` +
        "re-export the folder",
    );
  }
  return found;
}

function notAllowed(what, where) {
  return new ManifestError(
    `${what} keeps tensor data of ${where} in an external file; external data is allowed only for the ` +
      "main graph's initializers, so the model is refused; re-export the folder",
  );
}
