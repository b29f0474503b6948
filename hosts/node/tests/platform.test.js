// What the browser host (hosts/web) relies on in the shared modules: a file reader given to
// ExportFolder.open (the checks stay in the shared code, whoever reads the bytes), goldens on an Engine
// made around an ONNX Runtime module. (Sampling and streaming are the shared TextGenerator's: tests/
// sampling.test.js, tests/stream.test.js.)

import assert from "node:assert/strict";
import { readFile } from "node:fs/promises";
import path from "node:path";
import { test } from "node:test";

import * as ort from "onnxruntime-node";

import { Engine, ExportFolder, ManifestError, verifyFolder } from "../src/index.js";
import { exportDir } from "./helpers.js";

/** A reader over exported/`name` that hands out `change(relative, bytes)` instead of the file's bytes. */
function reader(name, change = (relative, bytes) => bytes) {
  const root = exportDir(name);
  return {
    root: `memory:${name}`,
    readManifest: async (file) => new Uint8Array(await readFile(path.join(root, file))),
    read: async (parts, shown) => change(shown, new Uint8Array(await readFile(path.join(root, ...parts)))),
  };
}

test("a given reader's bytes are checked against the manifest like the file system's", async () => {
  const flip = (relative, bytes) => {
    if (relative === "decoder.onnx") bytes[bytes.length - 1] ^= 1;
    return bytes;
  };
  const folder = await ExportFolder.open(null, { files: reader("gpt", flip) });
  assert.equal(folder.root, "memory:gpt");
  assert.equal((await folder.read("tokenizer.json")).length, folder.entry("tokenizer.json").size);
  await assert.rejects(folder.read("decoder.onnx"), (error) => {
    assert.ok(error instanceof ManifestError);
    assert.match(error.message, /decoder\.onnx does not match its sha256 in manifest\.json/);
    return true;
  });
});

test("goldens run on an Engine made around an ONNX Runtime module, files from a given reader", async () => {
  const folder = await ExportFolder.open(null, { files: reader("bert") });
  const report = await verifyFolder(folder, { engine: new Engine("native", ort, { threads: 1 }) });
  assert.equal(report.engine, "native");
  assert.ok(report.ok, JSON.stringify(report.results.filter((result) => !result.ok).slice(0, 3)));
  assert.ok(report.results.some((result) => result.check === "embedding"));
});
