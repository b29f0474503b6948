// The export folder: manifest paths are refused unless they are plain relative paths inside the folder,
// and a file whose bytes differ from the manifest's size or sha256 is refused by name before it is used.

import assert from "node:assert/strict";
import { readFile, symlink, unlink, writeFile, mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import { test } from "node:test";

import {
  checkRelativePath,
  Engine,
  ExportFolder,
  loadEngine,
  ManifestError,
  openExport,
  openFolder,
  verifyExport,
  verifyFolder,
} from "../src/index.js";
import { scratchCopy } from "./helpers.js";

async function flipByte(file, offset) {
  const bytes = await readFile(file);
  bytes[offset] ^= 0xff;
  await writeFile(file, bytes);
}

/** `promise` rejects with a ManifestError whose message matches `pattern`. */
async function refused(promise, pattern) {
  await assert.rejects(promise, (error) => {
    assert.ok(error instanceof ManifestError, `expected a ManifestError, got ${error}`);
    assert.match(error.message, pattern);
    return true;
  });
}

async function folderWithManifest(t, manifest) {
  const dir = await mkdtemp(path.join(tmpdir(), "onnxformer-node-"));
  t.after(() => rm(dir, { recursive: true, force: true }));
  await writeFile(path.join(dir, "manifest.json"), JSON.stringify(manifest));
  return dir;
}

test("plain relative paths are accepted", () => {
  assert.deepEqual(checkRelativePath("decoder.onnx"), ["decoder.onnx"]);
  assert.deepEqual(checkRelativePath("goldens/blocks/decoder_layer_0/test_data_set_0/input_0.pb").length, 5);
});

// The path cases every host shares: pytest and scripts/reliability.py read the same file.
const PATH_CASES = JSON.parse(
  await readFile(new URL("../../../tests/path_cases.json", import.meta.url), "utf-8"),
);

test("the shared path cases: each plain path accepted, each other path refused", () => {
  assert.ok(PATH_CASES.refuse.length >= 25 && PATH_CASES.accept.length >= 5);
  for (const { path: plain, reason } of PATH_CASES.accept) {
    assert.deepEqual(checkRelativePath(plain), plain.split("/"), reason);
  }
  for (const { path: bad, reason } of PATH_CASES.refuse) {
    assert.throws(
      () => checkRelativePath(bad),
      (error) => error instanceof ManifestError && /not a plain relative path/.test(error.message),
      `${JSON.stringify(bad)} (${reason}) must be refused`,
    );
  }
  for (const bad of ["line\nbreak", "a\x7fb", "a:b.onnx"]) {
    assert.ok(
      PATH_CASES.refuse.some((item) => item.path === bad),
      `${JSON.stringify(bad)} is a case`,
    );
  }
});

test("absolute, '..', '.', empty-part and backslash paths are refused", () => {
  for (const bad of [
    "/etc/passwd",
    "../secret.onnx",
    "blocks/../../x.onnx",
    "./x.onnx",
    "a//b",
    "blocks\\x.onnx",
    "C:x",
    "",
  ]) {
    assert.throws(() => checkRelativePath(bad), ManifestError, bad);
  }
});

test("a manifest listing a path with '..' is refused when the folder opens", async (t) => {
  const dir = await folderWithManifest(t, {
    format_version: 2,
    files: [{ path: "../outside.onnx", size: 1, sha256: "0".repeat(64), kind: "decoder" }],
  });
  await assert.rejects(ExportFolder.open(dir), (error) => {
    assert.ok(error instanceof ManifestError);
    assert.match(error.message, /"\.\.\/outside\.onnx", which is not a plain relative path/);
    return true;
  });
});

test("a golden case folder with '..' is refused too", async (t) => {
  const dir = await folderWithManifest(t, {
    format_version: 2,
    files: [],
    goldens: {
      end_to_end: null,
      graphs: [{ file: "x.onnx", atol: 0, rtol: 0, cases: [{ dir: "../../tmp" }] }],
    },
  });
  await refused(ExportFolder.open(dir), /"\.\.\/\.\.\/tmp", which is not a plain relative path/);
});

test("an unknown format_version is refused with the fix", async (t) => {
  const dir = await folderWithManifest(t, { format_version: 3, files: [] });
  await refused(ExportFolder.open(dir), /format_version 3, this host reads 2/);
});

test("a format 1 folder is refused, naming the command that re-exports it", async (t) => {
  const model = await folderWithManifest(t, { format_version: 1, export_kind: "model", files: [] });
  await refused(
    ExportFolder.open(model),
    /format_version 1, this host reads 2; re-export .*`onnxformer export CHECKPOINT --out DIR`/,
  );
  const blocks = await folderWithManifest(t, { format_version: 1, export_kind: "blocks", files: [] });
  await refused(ExportFolder.open(blocks), /`onnxformer export-blocks --out DIR`/);
});

test("a folder without manifest.json is not an export", async (t) => {
  const dir = await mkdtemp(path.join(tmpdir(), "onnxformer-node-"));
  t.after(() => rm(dir, { recursive: true, force: true }));
  await refused(ExportFolder.open(dir), /is not an onnxformer export/);
  await refused(ExportFolder.open(path.join(dir, "nope")), /does not exist/);
});

test("a flipped byte in a graph is refused, naming the file", async (t) => {
  const dir = await scratchCopy(t, "gpt");
  await flipByte(path.join(dir, "decoder.onnx"), 1000);
  await assert.rejects(openExport(dir), (error) => {
    assert.ok(error instanceof ManifestError);
    assert.match(error.message, /^decoder\.onnx does not match its sha256 in manifest\.json/);
    return true;
  });
});

test("a truncated tokenizer is refused, naming the file and both sizes", async (t) => {
  const dir = await scratchCopy(t, "bert");
  const file = path.join(dir, "tokenizer.json");
  const bytes = await readFile(file);
  await writeFile(file, bytes.subarray(0, bytes.length - 1));
  await refused(
    openExport(dir),
    new RegExp(`^tokenizer\\.json has ${bytes.length - 1} bytes but manifest\\.json says ${bytes.length}`),
  );
});

test("a flipped byte in a golden file is refused by verify, naming the file", async (t) => {
  const dir = await scratchCopy(t, "t5");
  const folder = await ExportFolder.open(dir);
  const golden = folder.manifest.files.find((entry) => entry.path.endsWith(".pb"));
  assert.ok(golden, "the export lists golden .pb files");
  await flipByte(path.join(dir, golden.path), golden.size - 1);
  await refused(
    verifyExport(dir),
    new RegExp(`^${golden.path.replaceAll(".", "\\.")} does not match its sha256`),
  );
});

test("a listed file that is a symbolic link out of the folder is refused", async (t) => {
  const dir = await scratchCopy(t, "gpt");
  const outside = path.join(path.dirname(dir), "tokenizer.json");
  await writeFile(outside, await readFile(path.join(dir, "tokenizer.json")));
  await unlink(path.join(dir, "tokenizer.json"));
  await symlink(outside, path.join(dir, "tokenizer.json"));
  await refused(openExport(dir), /tokenizer\.json leads outside the export folder/);
});

test("a missing listed file is named", async (t) => {
  const dir = await scratchCopy(t, "gpt");
  await unlink(path.join(dir, "decoder.onnx"));
  await refused(openExport(dir), /^decoder\.onnx is listed in manifest\.json but missing/);
});

/** A scratch copy of exported/`name` with its manifest changed by `change`. */
async function withManifest(t, name, change) {
  const dir = await scratchCopy(t, name);
  const file = path.join(dir, "manifest.json");
  const manifest = JSON.parse(await readFile(file, "utf-8"));
  change(manifest);
  await writeFile(file, JSON.stringify(manifest));
  return dir;
}

test("the manifest's task picks the class; an unknown task or an unfeedable input is refused", async (t) => {
  await refused(
    openExport(await withManifest(t, "gpt", (m) => (m.task = "translate"))),
    /has task "translate"; this host runs generate, encode, seq2seq/,
  );
  await refused(
    openExport(await withManifest(t, "bert", (m) => m.io.encoder.inputs.push("pixel_values"))),
    /io\.encoder\.inputs names \["pixel_values"\], which this task does not feed/,
  );
  await refused(
    openExport(await withManifest(t, "gpt", (m) => (m.framing.prompt.prefix = ["start"]))),
    /framing\.prompt names "start", which special_tokens lacks/,
  );
  await refused(
    openExport(
      await withManifest(t, "t5", (m) => (m.kv_cache.layout = ["batch", "sequence", "heads", "head_dim"])),
    ),
    /kv_cache\.layout must be/,
  );
  await refused(
    openExport(await withManifest(t, "bert", (m) => delete m.graphs.encoder)),
    /^manifest\.json has no graphs\.encoder for an encode export; re-export$/,
  );
});

test("an in-place KV cache on an encoder-decoder is refused before any session is made", async (t) => {
  // `onnxformer optimize` writes one for decoders without an encoder only (as the Python runtime checks).
  const inPlace = (m) => (m.kv_cache.layout = ["batch", "heads", "max_sequence", "head_dim"]);
  const dir = await withManifest(t, "t5", inPlace);
  await refused(openExport(dir), /max_sequence \(an in-place cache\) is for decoders without an encoder/);
  const native = await loadEngine("native");
  const created = [];
  class Counting extends Engine {
    async createSession(bytes, entry, externalData) {
      created.push(entry.path);
      return super.createSession(bytes, entry, externalData);
    }
  }
  const engine = new Counting(native.name, native.ort, { threads: 1 });
  await refused(verifyFolder(await ExportFolder.open(dir), { engine }), /decoders without an encoder/);
  await refused(openFolder(await ExportFolder.open(dir), { engine }), /decoders without an encoder/);
  assert.deepEqual(created, []);
});
