/**
 * The ONNX engines this host runs on, behind one interface so every model and golden shares one code path.
 * The platform ("#platform") says which there are; in Node (src/node.js):
 *
 * - "native": onnxruntime-node, the CPU build of ONNX Runtime as a Node addon;
 * - "wasm": onnxruntime-web's WebAssembly backend, what a browser runs, here loaded in Node;
 *
 * in a browser (hosts/web/platform.js): "wasm" and "webgpu" (onnxruntime-web). An Engine can also be
 * made around an ONNX Runtime module directly: `new Engine("wasm", ort, {})`.
 *
 * Each engine module carries its own Tensor class, so tensors are always made through the engine that
 * will run them. Sessions are created from the checked bytes of a file, never from its path.
 */

import { cpuCount, ENGINES } from "#platform";

import { InputError, ManifestError } from "./errors.js";

export { ENGINES };

export class Engine {
  constructor(name, ort, { threads }) {
    this.name = name;
    this.ort = ort;
    this.threads = threads;
    // Whether session.run writes the tensors passed as `fetches` (pre-allocated outputs), which an
    // in-place KV cache binds (kvcache.js); the platform says so (onnxruntime-node does).
    this.bindsOutputs = ENGINES[name]?.bindsOutputs === true;
  }

  /**
   * A session over the checked bytes of `entry` (a manifest file entry); names checked against it.
   * `externalData` (from `ExportFolder.graph`) is the checked bytes of the graph's weights files.
   */
  async createSession(bytes, entry, externalData = []) {
    const options = { executionProviders: [ENGINES[this.name].provider], graphOptimizationLevel: "all" };
    if (externalData.length > 0) options.externalData = externalData;
    if (this.threads !== undefined && this.name === "native") {
      options.intraOpNumThreads = this.threads;
      options.interOpNumThreads = 1;
    }
    let session;
    try {
      session = await this.ort.InferenceSession.create(bytes, options);
    } catch (error) {
      throw new ManifestError(`the ${this.name} engine cannot load ${entry.path}: ${firstLine(error)}`);
    }
    for (const [what, promised, actual] of [
      ["inputs", (entry.inputs ?? []).map((spec) => spec.name), session.inputNames],
      ["outputs", (entry.outputs ?? []).map((spec) => spec.name), session.outputNames],
    ]) {
      if (promised.join("\n") !== actual.join("\n")) {
        await session.release();
        throw new ManifestError(
          `${entry.path} ${what} are [${actual}], manifest.json says [${promised}]; re-export the folder`,
        );
      }
    }
    return new Graph(this, session, entry.path);
  }

  /** An engine tensor from a typed array (Float32Array, BigInt64Array) and its dims. */
  tensor(dtype, data, dims) {
    return new this.ort.Tensor(dtype, data, dims);
  }

  /** Token ids (numbers) as an int64 tensor of shape (1, T). */
  ids(tokens) {
    return this.tensor("int64", BigInt64Array.from(tokens, BigInt), [1, tokens.length]);
  }

  /** An int64 tensor (1, length) of ones: every position real. */
  ones(length) {
    return this.tensor("int64", new BigInt64Array(length).fill(1n), [1, length]);
  }
}

/** One loaded ONNX file. */
export class Graph {
  constructor(engine, session, file) {
    this.engine = engine;
    this.session = session;
    this.file = file;
  }

  get inputNames() {
    return this.session.inputNames;
  }

  get outputNames() {
    return this.session.outputNames;
  }

  /**
   * Run with `feeds` (name -> engine tensor); returns name -> tensor for the `outputs` asked for: names, or
   * name -> a tensor to write into (`bindsOutputs` engines) or null (ONNX Runtime's `fetches`).
   */
  async run(feeds, outputs) {
    try {
      return await this.session.run(feeds, outputs);
    } catch (error) {
      throw new InputError(`the ${this.engine.name} engine failed running ${this.file}: ${firstLine(error)}`);
    }
  }

  async release() {
    await this.session.release();
  }
}

/** The most threads an engine may use: the CPUs this process may run on (as the Python runtime). */
export function maxThreads() {
  return Math.max(cpuCount(), 1);
}

/**
 * Load an engine by name. `threads` caps the native engine's intra-op threads (default: ONNX Runtime's
 * choice; at most `maxThreads()`, since a larger pool only makes its threads compete for the cores). The
 * platform's `setup` configures the module once loaded (in Node the wasm engine runs single-threaded,
 * where its worker-thread pool is not needed; a page sets its threads and where its .wasm files are).
 */
export async function loadEngine(name = "native", { threads } = {}) {
  if (!Object.hasOwn(ENGINES, name)) {
    throw new InputError(
      `engine must be one of ${Object.keys(ENGINES).join(", ")}; got ${JSON.stringify(name)}`,
    );
  }
  const limit = maxThreads();
  if (threads !== undefined && (!Number.isInteger(threads) || threads < 1 || threads > limit)) {
    throw new InputError(
      `threads must be an integer >= 1 and at most ${limit} (the CPUs this process may use), got ` +
        `${JSON.stringify(threads)}; leave it unset for ONNX Runtime's default`,
    );
  }
  const ort = await import(ENGINES[name].module);
  ENGINES[name].setup?.(ort, { threads });
  return new Engine(name, ort, { threads });
}

function firstLine(error) {
  return String(error?.message ?? error).split("\n")[0];
}
