/**
 * Sentence embeddings on an "encode" export (BERT):
 * `(await openExport("exported/bert")).embed("a sentence")`.
 *
 * A text is framed as manifest `framing.text` says (<cls> + its tokens + <sep> for BERT), fed with an
 * all-ones attention mask and, when the graph takes them (manifest `io.encoder.inputs`), zero segment ids;
 * the embedding is the graph's `sentence_embedding` output (the mean of the real tokens' last hidden
 * states). A text longer than `maxLength` ids (the framing's `max_length`: a sentence-transformers
 * folder's max_seq_length; else the model's context) keeps its first tokens within its framing, as
 * sentence-transformers and the Python runtime cut it, with a warning; `truncate: false` refuses it.
 */

import { checkIds, checkOptionNames } from "./decoding.js";
import { InputError, ManifestError } from "./errors.js";
import { pick } from "./manifest.js";
import { ExportModel } from "./model.js";
import { OPTIONS, optionNames } from "./options.js";

/**
 * Python's TextEncoder (onnxformer.runtime.encoder): embed, similarity. The name hides the platform's
 * UTF-8 TextEncoder in a module that imports it; SentenceEncoder is the same class.
 */
export class TextEncoder extends ExportModel {
  static task = "encode";
  static feeds = { encoder: ["input_ids", "attention_mask", "token_type_ids"] };

  /** The most ids a text is read as, framing included: longer texts are cut to it, or refused. */
  get maxLength() {
    return Math.min(this.framing.maxLength ?? this.maxLen, this.maxLen);
  }

  /**
   * The sentence embedding of `text`, a Float32Array of d_model values; for an array of texts, an array of
   * them, one per text, in order. `normalize: true` scales each to unit L2 norm (sentence-transformers'
   * normalize_embeddings), so a dot product is the cosine similarity; an all-zero embedding stays zero.
   * A text longer than `maxLength` ids is cut to its first tokens (`truncate: false`: refused).
   */
  async embed(text, options = {}) {
    checkOptionNames(options, ["normalize", ...optionNames("encode")], {
      what: "embed",
      task: TextEncoder.task,
    });
    const { normalize = false, truncate = OPTIONS.truncate.default } = options;
    for (const [name, value] of [["normalize", normalize], ["truncate", truncate]]) {
      if (typeof value !== "boolean") {
        throw new InputError(`${name} must be true or false, got ${JSON.stringify(value)}`);
      }
    }
    const vectors = await this.#embed(text, truncate);
    if (!normalize) return vectors;
    return Array.isArray(vectors) ? vectors.map(unitLength) : unitLength(vectors);
  }

  /** Cosine similarity of the two texts' embeddings, in [-1, 1]; `truncate` as for `embed`. */
  async similarity(a, b, options = {}) {
    checkOptionNames(options, optionNames("encode"), { what: "similarity", task: TextEncoder.task });
    const [first, second] = await this.embed([a, b], options);
    let dot = 0;
    for (let i = 0; i < first.length; i++) dot += first[i] * second[i];
    return dot / Math.max(norm(first) * norm(second), 1e-12);
  }

  async #embed(text, truncate) {
    const single = !Array.isArray(text);
    const texts = single ? [text] : text;
    if (texts.length === 0) throw new InputError("give at least one text");
    // Every text is framed and checked before the first runs.
    const cut = [];
    const rows = texts.map((item, index) => {
      const what = single ? "text" : `text ${index}`;
      let row = this.frame(item, { what });
      if (truncate && row.length > this.maxLength) {
        cut.push(`${what}: ${row.length}`);
        const room = this.maxLength - this.framing.prefix.length - this.framing.suffix.length;
        const tokens = row.slice(this.framing.prefix.length, this.framing.prefix.length + room);
        row = [...this.framing.prefix, ...tokens, ...this.framing.suffix];
      }
      if (row.length > this.maxLength) {
        throw new InputError(
          `${what} has ${row.length} tokens but the model reads at most ${this.maxLength}; shorten it, ` +
            "or leave truncate on to cut it",
        );
      }
      return checkIds(row, { vocabSize: this.vocabSize, what });
    });
    if (cut.length > 0) {
      console.warn(
        `${cut.length} text(s) longer than the ${this.maxLength} tokens the model reads were cut to their ` +
          `first tokens (${cut.slice(0, 5).join(", ")} tokens); truncate: false refuses them instead`,
      );
    }
    const vectors = [];
    for (const row of rows) vectors.push(await this.embedIds(row));
    return single ? vectors[0] : vectors;
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
