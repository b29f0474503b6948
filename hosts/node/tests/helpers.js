// Where the committed reference exports are, relative to this file, and a scratch copy of one.

import { cp, mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";

export const EXPORTED = fileURLToPath(new URL("../../../exported/", import.meta.url));
export const exportDir = (name) => path.join(EXPORTED, name);

/** A fresh copy of exported/`name` in a temporary folder; removed after the test. */
export async function scratchCopy(t, name) {
  const parent = await mkdtemp(path.join(tmpdir(), "onnxformer-node-"));
  t.after(() => rm(parent, { recursive: true, force: true }));
  const copy = path.join(parent, name);
  await cp(exportDir(name), copy, { recursive: true });
  return copy;
}
