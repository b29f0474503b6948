/**
 * The KV-cache names of an export (manifest `kv_cache`, one "{i}" per layer) and the tensors that go with
 * them, in either of the manifest's layouts (tensors laid out (batch, kv_heads, positions, head_dim)):
 *
 * - "sequence" (past in, past + new out): the first step feeds an empty cache (1, H, 0, Dh) and every
 *   step's `present.*` outputs are the next step's `past_key_values.*` inputs;
 * - "max_sequence" (`onnxformer optimize`'s in-place cache, builder/optimize/cache.py): each past is a
 *   zeroed buffer (1, H, M, Dh) of M >= every position the row will hold, and the graph writes a step's
 *   keys and values at positions P .. P + T - 1, P being attention_mask's length minus T. An engine whose
 *   pre-allocated outputs are written (onnxruntime-node: `bindsOutputs`) gets each buffer as its past
 *   input and as its present output (session.run's `fetches`), as the Python runtime's IO binding
 *   (runtime/session.py BoundCache): ONNX Runtime wraps the buffer's memory for both, so the graph writes
 *   the step into it and copies no past (onnxruntime-node 1.30 still returns a copy of every output,
 *   bound ones included, which is dropped). Any other engine (onnxruntime-web copies tensors into its
 *   heap and does not write pre-allocated CPU outputs back) runs the same graph unbound: the presents it
 *   returns, the buffers with the step written, are the next step's pasts.
 */

import { ManifestError } from "./errors.js";
import { CACHE_LAYOUT, IN_PLACE_LAYOUT } from "./manifest.js";

const sameLayout = (layout, expected) => JSON.stringify(layout) === JSON.stringify(expected);

/** Whether a manifest `kv_cache` is an in-place cache (layout "max_sequence"). */
export const isInPlace = (kvCache) => sameLayout(kvCache?.layout, IN_PLACE_LAYOUT);

export class CacheLayout {
  constructor(kvCache, { cross }) {
    if (kvCache === null || typeof kvCache !== "object") {
      throw new ManifestError("manifest.json: kv_cache is missing; re-export the folder with onnxformer");
    }
    this.inPlace = isInPlace(kvCache);
    if (!this.inPlace && !sameLayout(kvCache.layout, CACHE_LAYOUT)) {
      throw new ManifestError(
        `manifest.json: kv_cache.layout must be ${JSON.stringify(CACHE_LAYOUT)} or ` +
          `${JSON.stringify(IN_PLACE_LAYOUT)}, got ${JSON.stringify(kvCache.layout)}; re-export`,
      );
    }
    refuseCrossInPlace(kvCache, { cross });
    for (const key of ["layers", "kv_heads", "head_dim"]) {
      if (!Number.isInteger(kvCache?.[key]) || kvCache[key] <= 0) {
        throw new ManifestError(`manifest.json: kv_cache.${key} must be a positive integer; re-export`);
      }
    }
    const patterns = ["past_key", "past_value", "present_key", "present_value"];
    if (cross) patterns.push("cross_key", "cross_value");
    for (const key of patterns) {
      if (typeof kvCache[key] !== "string" || !kvCache[key].includes("{i}")) {
        throw new ManifestError(`manifest.json: kv_cache.${key} must be a name with '{i}'; re-export`);
      }
    }
    this.layers = kvCache.layers;
    this.heads = kvCache.kv_heads;
    this.headDim = kvCache.head_dim;
    this.pastNames = this.#names(kvCache.past_key, kvCache.past_value);
    this.presentNames = this.#names(kvCache.present_key, kvCache.present_value);
    this.crossNames = cross ? this.#names(kvCache.cross_key, kvCache.cross_value) : [];
  }

  /** Layer by layer, key then value. */
  #names(keyPattern, valuePattern) {
    const names = [];
    for (let i = 0; i < this.layers; i++) {
      names.push(keyPattern.replaceAll("{i}", i), valuePattern.replaceAll("{i}", i));
    }
    return names;
  }

  /**
   * The cache before the first step of one row: every past tensor of shape (1, H, 0, Dh), or for an
   * in-place cache a zeroed buffer (1, H, `positions`, Dh), `positions` being all the row will hold (its
   * prompt, then one per later step).
   */
  empty(engine, positions = 0) {
    const length = this.inPlace ? positions : 0;
    const dims = [1, this.heads, length, this.headDim];
    const size = this.heads * length * this.headDim;
    return Object.fromEntries(
      this.pastNames.map((name) => [name, engine.tensor("float32", new Float32Array(size), dims)]),
    );
  }

  /** One step's outputs (name -> tensor) as the next step's cache feeds. */
  next(outputs) {
    return Object.fromEntries(this.pastNames.map((name, index) => [name, outputs[this.presentNames[index]]]));
  }

  /**
   * One decoder step with its cache: `feeds` (the other inputs) and `cache` in; the `outputs` asked for
   * (name -> tensor) and the cache of the next step out. An in-place cache on an engine that writes
   * pre-allocated outputs is bound: each buffer is the step's past and its present, written in place.
   * @param {import("./engine.js").Graph} graph
   */
  async run(graph, feeds, cache, outputs) {
    if (this.inPlace && graph.engine.bindsOutputs) {
      const fetches = Object.fromEntries(outputs.map((name) => [name, null]));
      this.presentNames.forEach((name, index) => (fetches[name] = cache[this.pastNames[index]]));
      return { outputs: await graph.run({ ...feeds, ...cache }, fetches), cache };
    }
    const result = await graph.run({ ...feeds, ...cache }, [...outputs, ...this.presentNames]);
    return { outputs: result, cache: this.next(result) };
  }
}

/**
 * An in-place cache is for decoders without an encoder (manifest `kv_cache.layout` "max_sequence" with
 * cross-attention names is refused, as the Python runtime's manifest check refuses it): checked before
 * any session is made.
 */
export function refuseCrossInPlace(kvCache, { cross }) {
  if (cross && isInPlace(kvCache)) {
    throw new ManifestError(
      "manifest.json: kv_cache.layout max_sequence (an in-place cache) is for decoders without an " +
        "encoder; re-export the folder, or optimize it with --kv-cache concat",
    );
  }
}

/**
 * Golden inputs of an in-place decoder, which are written as the plain contract takes them (past
 * (B, H, P, Dh)): each past followed by `room` zeroed positions, the buffer the graph writes the step's
 * keys and values into, so that its presents have the goldens' shape (B, H, P + room, Dh). The Python
 * runtime's `with_room` (runtime/decoding.py).
 * @param {Object<string, {dtype: string, data: Float32Array, dims: number[]}>} tensors name -> tensor
 */
export function withRoom(tensors, pastNames, room) {
  const padded = { ...tensors };
  for (const name of pastNames) {
    const { dtype, data, dims } = tensors[name];
    const [batch, heads, past, headDim] = dims;
    const grown = new Float32Array(batch * heads * (past + room) * headDim);
    const [before, after] = [past * headDim, (past + room) * headDim]; // one (batch, head) row's floats
    for (let row = 0; row < batch * heads; row++) {
      grown.set(data.subarray(row * before, (row + 1) * before), row * after);
    }
    padded[name] = { dtype, data: grown, dims: [batch, heads, past + room, headDim] };
  }
  return padded;
}
