/**
 * Sentence embeddings on an "encode" export (BERT):
 * `(await openExport("exported/bert")).embed("a sentence")`.
 *
 * A text is framed as manifest `framing.text` says (<cls> + its tokens + <sep> for BERT), fed with an
 * all-ones attention mask and, when the graph takes them (manifest `io.encoder.inputs`), zero segment ids;
 * the embedding is the graph's `sentence_embedding` output (the mean of the real tokens' last hidden
 * states).
 */

import { checkIds, checkOptionNames } from "./decoding.js";
import { InputError, ManifestError } from "./errors.js";
import { pick } from "./manifest.js";
import { ExportModel } from "./model.js";

/**
 * Python's TextEncoder (onnxformer.runtime.encoder): embed, similarity. The name hides the platform's
 * UTF-8 TextEncoder in a module that imports it; SentenceEncoder is the same class.
 */
export class TextEncoder extends ExportModel {
  static task = "encode";
  static feeds = { encoder: ["input_ids", "attention_mask", "token_type_ids"] };

  /**
   * The sentence embedding of `text`, a Float32Array of d_model values; for an array of texts, an array of
   * them, one per text, in order. `normalize: true` scales each to unit L2 norm (sentence-transformers'
   * normalize_embeddings), so a dot product is the cosine similarity; an all-zero embedding stays zero.
   */
  async embed(text, options = {}) {
    checkOptionNames(options, ["normalize"], { what: "embed" });
    const { normalize = false } = options;
    if (typeof normalize !== "boolean") {
      throw new InputError(`normalize must be true or false, got ${JSON.stringify(normalize)}`);
    }
    const vectors = await this.#embed(text);
    if (!normalize) return vectors;
    return Array.isArray(vectors) ? vectors.map(unitLength) : unitLength(vectors);
  }

  /** Cosine similarity of the two texts' embeddings, in [-1, 1]. */
  async similarity(a, b) {
    const [first, second] = await this.#embed([a, b]);
    let dot = 0;
    for (let i = 0; i < first.length; i++) dot += first[i] * second[i];
    return dot / Math.max(norm(first) * norm(second), 1e-12);
  }

  async #embed(text) {
    if (Array.isArray(text)) {
      if (text.length === 0) throw new InputError("give at least one text");
      // Every text is framed and checked before the first runs.
      const rows = text.map((item, index) =>
        checkIds(this.frame(item, { what: `text ${index}` }), {
          vocabSize: this.vocabSize,
          limit: this.maxLen,
          what: `text ${index}`,
        }),
      );
      const vectors = [];
      for (const row of rows) vectors.push(await this.embedIds(row));
      return vectors;
    }
    return this.embedIds(this.frame(text));
  }

  /** One output of the encoder (an io key, default `sentence_embedding`, (1, D)) for framed ids, as (D,). */
  async embedIds(inputIds, { output = "sentence_embedding" } = {}) {
    const ids = checkIds(inputIds, { vocabSize: this.vocabSize, limit: this.maxLen, what: "text" });
    const heads = this.io.encoder.outputs;
    // An io key ("sentence_embedding"), or the graph's own name for one of its outputs.
    const name = heads[output] ?? (Object.values(heads).includes(output) ? output : undefined);
    if (typeof name !== "string") {
      throw new ManifestError(
        `${this.manifest.graphs.encoder} has no ${output} output (it returns ` +
          `${Object.keys(heads).join(", ")}); export a checkpoint with that head`,
      );
    }
    const feeds = pick(this.io.encoder, {
      input_ids: this.engine.ids(ids),
      attention_mask: this.engine.ones(ids.length),
      token_type_ids: this.engine.tensor("int64", new BigInt64Array(ids.length), [1, ids.length]),
    });
    const outputs = await this.graphs.encoder.run(feeds, [name]);
    return outputs[name].data.slice();
  }
}

/** The name this host used before it took the Python runtime's. */
export const SentenceEncoder = TextEncoder;

function norm(vector) {
  let total = 0;
  for (const value of vector) total += value * value;
  return Math.sqrt(total);
}

function unitLength(vector) {
  const scale = Math.max(norm(vector), 1e-12);
  return vector.map((value) => value / scale);
}
