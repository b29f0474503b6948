// External data, allowed the safe way (as the Python runtime, tests/runtime/test_external_data.py): a
// copy of exported/gpt whose decoder.onnx keeps its weights in decoder.onnx.data, listed in the manifest
// as that graph's weights, passes its goldens on both engines and generates what the inline export does;
// locations that leave the folder or are not listed, offsets past the file and altered weights are refused.

import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { readFile, writeFile } from "node:fs/promises";
import path from "node:path";
import { test } from "node:test";

import { ENGINES, ExportFolder, loadEngine, ManifestError, openExport, verifyExport } from "../src/index.js";
import { exportDir, scratchCopy } from "./helpers.js";

const GRAPH = "decoder.onnx";
const WEIGHTS = "decoder.onnx.data";

const sha256 = (bytes) => createHash("sha256").update(bytes).digest("hex");

function varint(value) {
  const out = [];
  let rest = BigInt(value);
  do {
    const byte = Number(rest & 0x7fn);
    rest >>= 7n;
    out.push(byte | (rest > 0n ? 0x80 : 0));
  } while (rest > 0n);
  return out;
}

const concat = (parts) => {
  const out = new Uint8Array(parts.reduce((total, part) => total + part.length, 0));
  let at = 0;
  for (const part of parts) {
    out.set(part, at);
    at += part.length;
  }
  return out;
};

/** One serialized field: a number as a varint, bytes (or a string) as a length-delimited field. */
function field(number, value) {
  if (typeof value === "number" || typeof value === "bigint") {
    return Uint8Array.from([...varint(number * 8), ...varint(value)]);
  }
  const bytes = typeof value === "string" ? new TextEncoder().encode(value) : value;
  return concat([Uint8Array.from([...varint(number * 8 + 2), ...varint(bytes.length)]), bytes]);
}

/** [field, wire, value, raw bytes of the whole field] of one message. */
function* fields(bytes) {
  let pos = 0;
  const read = () => {
    let value = 0n;
    for (let shift = 0n; ; shift += 7n) {
      const byte = bytes[pos++];
      value |= BigInt(byte & 0x7f) << shift;
      if (!(byte & 0x80)) return value;
    }
  };
  while (pos < bytes.length) {
    const start = pos;
    const key = Number(read());
    const wire = key & 7;
    let value;
    if (wire === 0) value = read();
    else if (wire === 2) {
      const length = Number(read());
      value = bytes.subarray(pos, pos + length);
      pos += length;
    } else {
      const width = wire === 1 ? 8 : 4;
      value = bytes.subarray(pos, pos + width);
      pos += width;
    }
    yield [key >> 3, wire, value, bytes.subarray(start, pos)];
  }
}

/**
 * The model with its big main-graph initializers moved to one weights file; `lie(index, offset,
 * length)` returns the [location, offset, length] strings written for the index-th moved tensor.
 */
function externalize(model, lie) {
  const weights = [];
  let size = 0;
  let moved = 0;
  const out = [];
  for (const [number, , value, raw] of fields(model)) {
    if (number !== 7) {
      out.push(raw);
      continue;
    }
    const graph = [];
    for (const [inner, , item, innerRaw] of fields(value)) {
      const tensorFields = inner === 5 ? [...fields(item)] : [];
      const data = tensorFields.find(([n]) => n === 9)?.[2];
      if (data === undefined || data.length < 1024) {
        graph.push(innerRaw);
        continue;
      }
      const padding = (64 - (size % 64)) % 64;
      weights.push(new Uint8Array(padding), data);
      const offset = size + padding;
      size = offset + data.length;
      const [location, offsetText, lengthText] = lie(moved++, offset, data.length);
      const tensor = tensorFields.filter(([n]) => n !== 9).map(([, , , r]) => r);
      for (const [key, text] of [
        ["location", location],
        ["offset", offsetText],
        ["length", lengthText],
      ]) {
        tensor.push(field(13, concat([field(1, key), field(2, text)])));
      }
      tensor.push(field(14, 1));
      graph.push(field(5, concat(tensor)));
    }
    out.push(field(7, concat(graph)));
  }
  assert.ok(moved > 0, "the reference decoder has initializers to move");
  return [concat(out), concat(weights)];
}

const honest = (index, offset, length) => [WEIGHTS, String(offset), String(length)];

/** Rewrite a copy of exported/gpt so decoder.onnx keeps its weights in decoder.onnx.data. */
async function externalCopy(t, { lie = honest, listed = true } = {}) {
  const dir = await scratchCopy(t, "gpt");
  const [model, weights] = externalize(new Uint8Array(await readFile(path.join(dir, GRAPH))), lie);
  await writeFile(path.join(dir, GRAPH), model);
  await writeFile(path.join(dir, WEIGHTS), weights);
  const manifest = JSON.parse(await readFile(path.join(dir, "manifest.json"), "utf8"));
  const entry = manifest.files.find((file) => file.path === GRAPH);
  Object.assign(entry, { sha256: sha256(model), size: model.length });
  if (listed) {
    manifest.files.push({
      path: WEIGHTS,
      sha256: sha256(weights),
      size: weights.length,
      kind: "weights",
      options: { graph: GRAPH },
      inputs: [],
      outputs: [],
    });
  }
  await writeFile(path.join(dir, "manifest.json"), JSON.stringify(manifest));
  return dir;
}

for (const engine of Object.keys(ENGINES)) {
  test(`an external-data gpt passes its goldens and generates as the inline one on ${engine}`, async (t) => {
    const dir = await externalCopy(t);
    const report = await verifyExport(dir, { engine, threads: 1 });
    assert.ok(report.ok, JSON.stringify(report.results.filter((result) => !result.ok)));
    assert.ok(report.results.some((result) => result.file === GRAPH));
    const graph = await (await ExportFolder.open(dir)).graph(GRAPH);
    assert.deepEqual(
      graph.externalData.map((file) => file.path),
      [WEIGHTS],
    );
    const loaded = await loadEngine(engine, { threads: 1 });
    const entry = (await ExportFolder.open(dir)).entry(GRAPH);
    await assert.rejects(() => loaded.createSession(graph.bytes, entry), ManifestError); // no weights, no run
    const ours = await openExport(dir, { engine, threads: 1 });
    const inline = await openExport(exportDir("gpt"), { engine, threads: 1 });
    try {
      const prompt = "the cat";
      assert.deepEqual(
        await ours.generate(prompt, { maxNewTokens: 8 }),
        await inline.generate(prompt, { maxNewTokens: 8 }),
      );
    } finally {
      await ours.close();
      await inline.close();
    }
  });
}

function first(location, { offset, length } = {}) {
  return (index, realOffset, realLength) =>
    index === 0
      ? [location, offset ?? String(realOffset), length ?? String(realLength)]
      : honest(index, realOffset, realLength);
}

async function refused(dir, pattern) {
  await assert.rejects(
    async () => (await ExportFolder.open(dir)).graph(GRAPH),
    (error) => error instanceof ManifestError && pattern.test(error.message),
  );
  await assert.rejects(
    () => openExport(dir, { engine: "native", threads: 1 }),
    (error) => error instanceof ManifestError && pattern.test(error.message),
  );
}

for (const [location, pattern] of [
  ["../canary.bin", /not a plain relative path/],
  ["/etc/passwd", /not a plain relative path/],
  ["C:\\x", /not a plain relative path/],
  ["*/_ORT_MEM_ADDR_/*", /_ORT_MEM_ADDR_/],
  ["tokenizer.json", /does not list as decoder\.onnx's weights/],
  ["unlisted.bin", /does not list as decoder\.onnx's weights/],
]) {
  test(`an external location ${JSON.stringify(location)} is refused`, async (t) => {
    const dir = await externalCopy(t, { lie: first(location) });
    await writeFile(path.join(dir, "unlisted.bin"), new Uint8Array(1_000_000));
    await refused(dir, pattern);
  });
}

for (const [offset, length, pattern] of [
  ["99999999", undefined, /past the end/],
  ["-4", undefined, /not a decimal number/],
  ["0x10", undefined, /not a decimal number/],
  [undefined, "4", /need/],
]) {
  test(`external offset ${offset} / length ${length} is refused`, async (t) => {
    const dir = await externalCopy(t, { lie: first(WEIGHTS, { offset, length }) });
    await refused(dir, pattern);
  });
}

test("weights that the manifest does not list are refused", async (t) => {
  await refused(await externalCopy(t, { listed: false }), /does not list as decoder\.onnx's weights/);
});

test("altered weights are refused by their sha256", async (t) => {
  const dir = await externalCopy(t);
  const data = new Uint8Array(await readFile(path.join(dir, WEIGHTS)));
  data[100] ^= 1;
  await writeFile(path.join(dir, WEIGHTS), data);
  await refused(dir, /does not match its sha256/);
});
