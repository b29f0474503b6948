/**
 * The Node.js platform of the host library (package.json `imports` maps "#platform" here; a web page's
 * import map points it at hosts/web/platform.js instead): the engines Node runs, the CPUs it may use, the
 * sha256 of bytes, and a file reader over the local file system. Every other module in src/ is shared
 * with the browser and reaches the platform only through "#platform".
 */

import { createHash } from "node:crypto";
import { constants as fsConstants } from "node:fs";
import { open, realpath, stat } from "node:fs/promises";
import { availableParallelism } from "node:os";
import path from "node:path";

import { ManifestError } from "./errors.js";

/** The wasm engine runs single-threaded in Node, where its worker-thread pool is not needed. */
function singleThreadedWasm(ort) {
  ort.env.wasm.numThreads = 1;
}

/**
 * `bindsOutputs`: session.run writes into the output tensors passed in `fetches` (onnxruntime-node wraps
 * their memory; onnxruntime-web copies them into its heap and does not copy CPU outputs back).
 */
export const ENGINES = {
  native: { module: "onnxruntime-node", provider: "cpu", bindsOutputs: true },
  wasm: { module: "onnxruntime-web", provider: "wasm", setup: singleThreadedWasm },
};

/** The CPUs this process may run on. */
export function cpuCount() {
  return availableParallelism();
}

/** The lowercase hex sha256 of `bytes` (sync here; shared code awaits it, as the browser's is async). */
export function sha256Hex(bytes) {
  return createHash("sha256").update(bytes).digest("hex");
}

/**
 * A reader over the local folder `dir`: `read(parts, shown)` gives the bytes of a file inside it, refusing
 * one that resolves outside it (a symbolic link) or is not a regular file.
 */
export async function openFiles(dir) {
  const root = path.resolve(String(dir));
  let info;
  try {
    info = await stat(root);
  } catch {
    throw new ManifestError(`${root} does not exist; pass the folder an \`onnxformer export\` wrote`);
  }
  if (!info.isDirectory()) {
    throw new ManifestError(`${root} is not a folder; pass the export folder, not a file inside it`);
  }
  return new LocalFiles(root);
}

class LocalFiles {
  constructor(root) {
    this.root = root;
  }

  /** manifest.json's bytes, never through a symbolic link. */
  async readManifest(name) {
    return readRegularFile(path.join(this.root, name));
  }

  /** The bytes of the file at `parts` (checked plain parts of a manifest path `shown`). */
  async read(parts, shown) {
    const location = path.join(this.root, ...parts);
    let real;
    try {
      real = await realpath(location);
    } catch {
      throw new ManifestError(`${shown} is listed in manifest.json but missing; re-export the folder`);
    }
    const realRoot = await realpath(this.root);
    if (!real.startsWith(realRoot + path.sep)) {
      throw new ManifestError(`${shown} leads outside the export folder ${this.root}; refusing it`);
    }
    return readRegularFile(location);
  }
}

/** The bytes of a regular file, never through a final symbolic link. */
async function readRegularFile(location) {
  let handle;
  try {
    handle = await open(location, fsConstants.O_RDONLY | (fsConstants.O_NOFOLLOW ?? 0));
  } catch (error) {
    throw new ManifestError(`cannot open ${location}: ${error.code ?? error.message}`);
  }
  try {
    if (!(await handle.stat()).isFile()) {
      throw new ManifestError(`${location} is not a regular file; refusing it`);
    }
    const buffer = await handle.readFile();
    return new Uint8Array(buffer.buffer, buffer.byteOffset, buffer.byteLength);
  } finally {
    await handle.close();
  }
}
