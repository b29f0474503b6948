/**
 * The browser platform of the host library (hosts/node/src): the page's import map points "#platform"
 * here, so the same modules that run in Node run in the page with these engines, this file reader and
 * SubtleCrypto's sha256.
 *
 * - Engines: "wasm" (onnxruntime-web's WebAssembly backend) and "webgpu" (its WebGPU backend, with the
 *   WebAssembly one for the operators WebGPU lacks). The .wasm files are fetched from onnxruntime-web's
 *   dist/ folder beside the page. WebAssembly runs threaded only where the page is cross-origin
 *   isolated (COOP/COEP headers, as hosts/web/serve.py sends): SharedArrayBuffer needs it.
 * - Files: fetched from the folder's URL, a redirect refused (it could lead out of the folder), or read
 *   from the files of a picked directory (`pickedFiles`).
 */

import { ManifestError } from "../node/src/errors.js";

const WASM_FILES = new URL("../node/node_modules/onnxruntime-web/dist/", import.meta.url).href;
const MOST_WASM_THREADS = 4; // more threads than this only compete on small models

function setupWasm(ort, { threads }) {
  ort.env.wasm.wasmPaths = WASM_FILES;
  const threaded = globalThis.crossOriginIsolated === true;
  ort.env.wasm.numThreads = threaded ? (threads ?? Math.min(MOST_WASM_THREADS, cpuCount())) : 1;
}

export const ENGINES = {
  wasm: { module: "onnxruntime-web", provider: "wasm", setup: setupWasm },
  webgpu: { module: "onnxruntime-web/webgpu", provider: "webgpu", setup: setupWasm },
};

/** The logical processors the browser reports. */
export function cpuCount() {
  return globalThis.navigator?.hardwareConcurrency ?? 1;
}

/** The lowercase hex sha256 of `bytes`, by SubtleCrypto (a secure context: https, localhost, 127.0.0.1). */
export async function sha256Hex(bytes) {
  if (globalThis.crypto?.subtle === undefined) {
    throw new ManifestError(
      "this page is not a secure context, so SubtleCrypto cannot check the files' sha256; open it from " +
        "http://127.0.0.1 or http://localhost (or https)",
    );
  }
  const digest = new Uint8Array(await crypto.subtle.digest("SHA-256", bytes));
  return Array.from(digest, (byte) => byte.toString(16).padStart(2, "0")).join("");
}

/** A reader over the export folder at `dir`, a URL (relative to the page) of the folder. */
export async function openFiles(dir) {
  const root = new URL(String(dir), globalThis.location?.href);
  if (!root.pathname.endsWith("/")) root.pathname += "/";
  return new FetchedFiles(root);
}

class FetchedFiles {
  constructor(root) {
    this.base = root;
    this.root = root.href.replace(/\/$/, "");
  }

  async readManifest(name) {
    return this.#fetch(new URL(name, this.base), name, `cannot fetch ${this.root}/${name}`);
  }

  /** The bytes of the file at `parts` (checked plain parts of a manifest path `shown`). */
  async read(parts, shown) {
    const url = new URL(parts.map(encodeURIComponent).join("/"), this.base);
    return this.#fetch(url, shown, `${shown} is listed in manifest.json but cannot be fetched`);
  }

  async #fetch(url, shown, problem) {
    let response;
    try {
      response = await fetch(url, { redirect: "error", cache: "no-cache" });
    } catch (error) {
      throw new ManifestError(`${problem} (${error.message}); serve the folder and check its URL`);
    }
    if (!response.ok) {
      throw new ManifestError(`${problem} (HTTP ${response.status}); re-export or re-serve the folder`);
    }
    if (!response.url.startsWith(this.base.href)) {
      throw new ManifestError(`${shown} leads outside the export folder ${this.root}; refusing it`);
    }
    return new Uint8Array(await response.arrayBuffer());
  }
}

/**
 * A reader over the files of a directory the user picked (`<input type="file" webkitdirectory>`): each
 * File's webkitRelativePath is "<folder>/<path>".
 */
export function pickedFiles(fileList) {
  const files = new Map();
  let folder = null;
  for (const file of fileList) {
    const [top, ...rest] = file.webkitRelativePath.split("/");
    folder ??= top;
    files.set(rest.join("/"), file);
  }
  if (folder === null) throw new ManifestError("the picked folder is empty; pick an export folder");
  const read = async (relative, problem) => {
    const file = files.get(relative);
    if (file === undefined) throw new ManifestError(problem);
    return new Uint8Array(await file.arrayBuffer());
  };
  return {
    root: folder,
    readManifest: (name) => read(name, `cannot open ${folder}/${name}: no such file`),
    read: (parts, shown) =>
      read(parts.join("/"), `${shown} is listed in manifest.json but missing; re-export the folder`),
  };
}
