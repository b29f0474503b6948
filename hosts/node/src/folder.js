/**
 * Opening an export folder: manifest.json is parsed and every path it lists is checked before anything
 * is read. `read` returns the bytes of a listed file only after their size and sha256 match the
 * manifest; callers hand those same bytes to the engine or the tokenizer, so what is checked is what
 * runs.
 */

import { createHash } from "node:crypto";
import { constants as fsConstants } from "node:fs";
import { open, realpath, stat } from "node:fs/promises";
import path from "node:path";

import { ManifestError } from "./errors.js";
import { externalTensors } from "./externaldata.js";

export const MANIFEST_NAME = "manifest.json";
export const FORMAT_VERSION = 2;
export const WEIGHTS_KIND = "weights"; // a graph's external-data file: options {graph: <the graph's path>}
const SHA256 = /^[0-9a-f]{64}$/;

/**
 * The parts of a manifest path, or a ManifestError: only plain relative forward-slash paths that stay
 * inside the folder ("blocks/x.onnx"): never absolute, no empty, `.` or `..` part, no backslash, colon,
 * control character or DEL. The same rule as the Python runtime's `plain_parts`, checked on the same
 * cases (tests/path_cases.json).
 */
export function checkRelativePath(relative) {
  const plain =
    typeof relative === "string" &&
    relative !== "" &&
    !relative.startsWith("/") &&
    ![...relative].some(isRefusedCharacter) &&
    relative.split("/").every((part) => part !== "" && part !== "." && part !== "..");
  if (!plain) {
    throw new ManifestError(
      `${MANIFEST_NAME} names ${JSON.stringify(relative)}, which is not a plain relative path inside ` +
        "the folder (no absolute paths, '..', '.', empty parts, backslashes, colons or control " +
        "characters); refusing the export",
    );
  }
  return relative.split("/");
}

/** A control character, DEL, a backslash or a colon: never part of a plain manifest path. */
function isRefusedCharacter(c) {
  const code = c.charCodeAt(0);
  return code < 32 || code === 127 || c === "\\" || c === ":";
}

export function sha256Hex(bytes) {
  return createHash("sha256").update(bytes).digest("hex");
}

export class ExportFolder {
  /** @param {string} root @param {object} manifest parsed and checked */
  constructor(root, manifest) {
    this.root = root;
    this.manifest = manifest;
    this.entries = new Map(manifest.files.map((entry) => [entry.path, entry]));
  }

  /** Read and check `dir/manifest.json`; every listed path is checked here, before any file is read. */
  static async open(dir) {
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
    const manifestPath = path.join(root, MANIFEST_NAME);
    let text;
    try {
      text = new TextDecoder("utf-8", { fatal: true }).decode(await readRegularFile(manifestPath));
    } catch (error) {
      if (error instanceof ManifestError) {
        throw new ManifestError(
          `${root} is not an onnxformer export (${error.message}); pass the folder an \`onnxformer export\` wrote`,
        );
      }
      throw new ManifestError(`${manifestPath} is not UTF-8 text; re-export the folder`);
    }
    let manifest;
    try {
      manifest = JSON.parse(text);
    } catch (error) {
      throw new ManifestError(`${manifestPath} is not valid JSON (${error.message}); re-export the folder`);
    }
    return new ExportFolder(root, checkManifest(manifest));
  }

  /** The manifest entry of `relative`, or a ManifestError if the manifest does not list it. */
  entry(relative) {
    const entry = this.entries.get(relative);
    if (entry === undefined) {
      throw new ManifestError(
        `${relative} is not listed in ${MANIFEST_NAME}'s files, so it cannot be checked; re-export the folder`,
      );
    }
    return entry;
  }

  /** The bytes of a listed file (a Uint8Array) after checking their size and sha256 against the manifest. */
  async read(relative) {
    const entry = this.entry(relative);
    const location = path.join(this.root, ...checkRelativePath(entry.path));
    let real;
    try {
      real = await realpath(location);
    } catch {
      throw new ManifestError(
        `${entry.path} is listed in ${MANIFEST_NAME} but missing; re-export the folder`,
      );
    }
    const realRoot = await realpath(this.root);
    if (!real.startsWith(realRoot + path.sep)) {
      throw new ManifestError(`${entry.path} leads outside the export folder ${this.root}; refusing it`);
    }
    const bytes = await readRegularFile(location);
    if (bytes.length !== entry.size) {
      throw new ManifestError(
        `${entry.path} has ${bytes.length} bytes but ${MANIFEST_NAME} says ${entry.size}: the file was ` +
          "truncated or altered; re-export the folder",
      );
    }
    const digest = sha256Hex(bytes);
    if (digest !== entry.sha256) {
      throw new ManifestError(
        `${entry.path} does not match its sha256 in ${MANIFEST_NAME} (got ${digest.slice(0, 12)}..., ` +
          `expected ${entry.sha256.slice(0, 12)}...): the file was altered; re-export the folder`,
      );
    }
    return bytes;
  }

  /**
   * A listed graph ready for `Engine.createSession`: `{bytes, externalData}`, where `externalData` is
   * `[{path, data}]` for the engine's `externalData` session option: each weights file the graph's
   * external initializers name, allowed only if the manifest lists it as that graph's weights and every
   * tensor lies inside it, read once with its size and sha256 checked. Any other external location
   * (leaving the folder, unlisted, ONNX Runtime's `_ORT_MEM_ADDR_` marker) is a ManifestError.
   */
  async graph(relative) {
    const bytes = await this.read(relative);
    const tensors = externalTensors(bytes, relative);
    if (tensors.length === 0) return { bytes, externalData: [] };
    const weights = new Map(
      this.manifest.files
        .filter((entry) => entry.kind === WEIGHTS_KIND && entry.options?.graph === relative)
        .map((entry) => [entry.path, entry]),
    );
    const folder = path.posix.dirname(relative);
    const names = new Set();
    const locations = new Map(); // location as the model writes it -> listed path
    for (const tensor of tensors) {
      const shown = `${relative}: tensor ${JSON.stringify(tensor.name)} has its data in external file ${JSON.stringify(tensor.location)}`;
      if (tensor.location.includes("_ORT_MEM_ADDR_")) {
        throw new ManifestError(
          `${shown}, ONNX Runtime's marker for reading process memory; refusing the model`,
        );
      }
      let parts;
      try {
        parts = checkRelativePath(tensor.location);
      } catch {
        throw new ManifestError(
          `${shown}, which is not a plain relative path inside the folder (external data may only name ` +
            "the graph's listed weights file); refusing the model",
        );
      }
      const listedPath = folder === "." ? parts.join("/") : [folder, ...parts].join("/");
      const listed = weights.get(listedPath);
      if (listed === undefined) {
        throw new ManifestError(
          `${shown}, which ${MANIFEST_NAME} does not list as ${relative}'s weights (listed: ` +
            `${JSON.stringify([...weights.keys()])}); external data is only read from listed weights files; re-export the folder`,
        );
      }
      if (tensor.offset + tensor.length > BigInt(listed.size)) {
        throw new ManifestError(
          `${shown} at bytes ${tensor.offset}..${tensor.offset + tensor.length}, past the end of ` +
            `${listedPath} (${listed.size} bytes): the graph or its weights were altered; re-export the folder`,
        );
      }
      if (names.has(tensor.name)) {
        throw new ManifestError(
          `${relative} keeps tensor ${JSON.stringify(tensor.name)} in external data twice`,
        );
      }
      names.add(tensor.name);
      locations.set(tensor.location, listedPath);
    }
    const externalData = [];
    for (const [location, listedPath] of locations) {
      externalData.push({ path: location, data: await this.read(listedPath) });
    }
    return { bytes, externalData };
  }

  /** A listed JSON file, checked, parsed. */
  async readJson(relative) {
    const bytes = await this.read(relative);
    try {
      return JSON.parse(new TextDecoder("utf-8", { fatal: true }).decode(bytes));
    } catch (error) {
      throw new ManifestError(`${relative} is not UTF-8 JSON (${error.message}); re-export the folder`);
    }
  }
}

/** The manifest's own fields, checked to the depth this host relies on. */
function checkManifest(manifest) {
  if (manifest === null || typeof manifest !== "object" || Array.isArray(manifest)) {
    throw new ManifestError(`${MANIFEST_NAME} must hold a JSON object; re-export the folder`);
  }
  const version = manifest.format_version;
  if (version !== FORMAT_VERSION) {
    const command =
      manifest.export_kind === "blocks"
        ? "onnxformer export-blocks --out DIR"
        : "onnxformer export CHECKPOINT --out DIR";
    const fix =
      Number.isInteger(version) && version < FORMAT_VERSION
        ? `re-export the folder with this onnxformer: \`${command}\``
        : "use a matching onnxformer version or re-export";
    throw new ManifestError(
      `${MANIFEST_NAME} has format_version ${JSON.stringify(version)}, this host reads ` +
        `${FORMAT_VERSION}; ${fix}`,
    );
  }
  if (!Array.isArray(manifest.files)) {
    throw new ManifestError(`${MANIFEST_NAME} has no files list; re-export the folder`);
  }
  const seen = new Set();
  for (const entry of manifest.files) {
    checkRelativePath(entry?.path);
    if (seen.has(entry.path)) {
      throw new ManifestError(`${MANIFEST_NAME} lists ${entry.path} twice; re-export the folder`);
    }
    seen.add(entry.path);
    if (!Number.isSafeInteger(entry.size) || entry.size < 0 || !SHA256.test(String(entry.sha256))) {
      throw new ManifestError(
        `${MANIFEST_NAME}'s entry for ${entry.path} needs a size and a lowercase hex sha256; re-export`,
      );
    }
  }
  for (const entry of manifest.files) {
    if (entry.kind !== WEIGHTS_KIND) continue;
    const graph = entry.options?.graph;
    const target = manifest.files.find((other) => other.path === graph);
    if (typeof graph !== "string" || target === undefined || target.kind === WEIGHTS_KIND) {
      throw new ManifestError(
        `${MANIFEST_NAME}'s weights file ${entry.path} names ${JSON.stringify(graph)}, which is not a graph in files; re-export`,
      );
    }
  }
  const referenced = [manifest.tokenizer, ...Object.values(manifest.graphs ?? {})];
  for (const graph of manifest.goldens?.graphs ?? []) {
    referenced.push(graph.file);
    for (const golden of graph.cases ?? []) checkRelativePath(golden.dir);
  }
  if (manifest.goldens?.end_to_end != null) referenced.push(manifest.goldens.end_to_end);
  for (const relative of referenced) {
    if (relative != null && !seen.has(relative)) {
      checkRelativePath(relative);
      throw new ManifestError(
        `${MANIFEST_NAME} refers to ${relative}, which its files list lacks; re-export`,
      );
    }
  }
  return manifest;
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
