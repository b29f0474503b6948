/**
 * The KV-cache names of an export (manifest `kv_cache`, one "{i}" per layer) and the tensors that go with
 * them: the empty cache of the first step, and one step's `present.*` outputs as the next step's
 * `past_key_values.*` inputs. Tensors are laid out (batch, kv_heads, sequence, head_dim).
 */

import { ManifestError } from "./errors.js";
import { CACHE_LAYOUT } from "./manifest.js";

// The layout of an in-place cache (Python runtime only), refused with its own message.
const IN_PLACE_LAYOUT = ["batch", "heads", "max_sequence", "head_dim"];

/**
 * Refuse a manifest `kv_cache` whose decoder writes its cache in place (`onnxformer optimize`'s default),
 * which this host does not bind: called before any session is made (opening, verifying).
 */
export function refuseInPlaceCache(kvCache) {
  if (JSON.stringify(kvCache?.layout) === JSON.stringify(IN_PLACE_LAYOUT)) {
    throw new ManifestError(
      "manifest.json: kv_cache.layout says the decoder writes its cache in place (an `onnxformer optimize` " +
        "export), which this host does not bind; optimize with --kv-cache concat for Node and the browser",
    );
  }
}

export class CacheLayout {
  constructor(kvCache, { cross }) {
    if (kvCache === null || typeof kvCache !== "object") {
      throw new ManifestError("manifest.json: kv_cache is missing; re-export the folder with onnxformer");
    }
    refuseInPlaceCache(kvCache);
    if (JSON.stringify(kvCache.layout) !== JSON.stringify(CACHE_LAYOUT)) {
      throw new ManifestError(
        `manifest.json: kv_cache.layout must be ${JSON.stringify(CACHE_LAYOUT)}, got ` +
          `${JSON.stringify(kvCache.layout)}; re-export`,
      );
    }
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

  /** The cache before the first step: every past tensor of shape (1, H, 0, Dh). */
  empty(engine) {
    const dims = [1, this.heads, 0, this.headDim];
    return Object.fromEntries(
      this.pastNames.map((name) => [name, engine.tensor("float32", new Float32Array(0), dims)]),
    );
  }

  /** One step's outputs (name -> tensor) as the next step's cache feeds. */
  next(outputs) {
    return Object.fromEntries(this.pastNames.map((name, index) => [name, outputs[this.presentNames[index]]]));
  }
}
