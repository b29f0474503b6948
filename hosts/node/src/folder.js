/**
 * Opening an export folder: manifest.json is parsed and every path it lists is checked before anything
 * is read. `read` returns the bytes of a listed file only after their size and sha256 match the
 * manifest; callers hand those same bytes to the engine or the tokenizer, so what is checked is what
 * runs. The bytes come from the platform's file reader ("#platform": the file system in Node, fetch in
 * a browser) or from the `files` reader given to `open`.
 */

import { openFiles, sha256Hex } from "#platform";

import { ManifestError } from "./errors.js";
import { externalTensors } from "./externaldata.js";

export { sha256Hex };

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

export class ExportFolder {
  /**
   * @param {string} root the folder, as shown in messages @param {object} manifest parsed and checked
   * @param {{root: string, readManifest(name): Promise<Uint8Array>, read(parts, shown): Promise<Uint8Array>}} files
   */
  constructor(root, manifest, files) {
    this.root = root;
    this.manifest = manifest;
    this.files = files;
    this.entries = new Map(manifest.files.map((entry) => [entry.path, entry]));
  }

  /**
   * Read and check `dir/manifest.json`; every listed path is checked here, before any file is read.
   * `files` is a reader to use instead of the platform's (a browser's directory picker, for one).
   */
  static async open(dir, { files } = {}) {
    const reader = files ?? (await openFiles(dir));
    const root = reader.root;
    const manifestPath = `${root}/${MANIFEST_NAME}`;
    let text;
    try {
      text = new TextDecoder("utf-8", { fatal: true }).decode(await reader.readManifest(MANIFEST_NAME));
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
    return new ExportFolder(root, checkManifest(manifest), reader);
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
    const bytes = await this.files.read(checkRelativePath(entry.path), entry.path);
    if (bytes.length !== entry.size) {
      throw new ManifestError(
        `${entry.path} has ${bytes.length} bytes but ${MANIFEST_NAME} says ${entry.size}: the file was ` +
          "truncated or altered; re-export the folder",
      );
    }
    const digest = await sha256Hex(bytes);
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
    const folder = relative.includes("/") ? relative.slice(0, relative.lastIndexOf("/")) : "."; // its dirname
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
