// README.md's install sizes, held to node_modules as `du -sh` measures it (allocated blocks).

import assert from "node:assert/strict";
import { lstat, readdir } from "node:fs/promises";
import path from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";

import { README } from "./readme.js";

const MODULES = fileURLToPath(new URL("../node_modules/", import.meta.url));

/** Bytes allocated under `folder` (what du counts), links not followed. */
async function allocated(folder) {
  let total = 0;
  for (const entry of await readdir(folder, { withFileTypes: true })) {
    const full = path.join(folder, entry.name);
    const stats = await lstat(full);
    total += stats.blocks * 512;
    if (entry.isDirectory()) total += await allocated(full);
  }
  return total;
}

test("the sizes README.md gives are within 10% of node_modules", async () => {
  const sizes = [
    /`du -sh node_modules` is (\d+)M: onnxruntime-node (\d+)M/,
    /@huggingface\/transformers (\d+)M/,
    /onnxruntime-web (\d+)M/,
  ];
  const match = sizes.map((pattern) => README.replace(/\s+/g, " ").match(pattern));
  assert.ok(match.every(Boolean), "README.md no longer states the sizes this test reads");
  const stated = {
    "": Number(match[0][1]),
    "onnxruntime-node": Number(match[0][2]),
    "@huggingface/transformers": Number(match[1][1]),
    "onnxruntime-web": Number(match[2][1]),
  };
  for (const [name, mib] of Object.entries(stated)) {
    const measured = (await allocated(path.join(MODULES, name))) / 2 ** 20;
    const shown = `node_modules/${name}: README ${mib}M, measured ${measured.toFixed(0)}M`;
    assert.ok(Math.abs(measured - mib) <= 0.1 * mib, shown);
  }
});
