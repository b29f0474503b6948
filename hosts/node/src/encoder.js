/**
 * BERT sentence embeddings: `(await openExport("exported/bert")).embed("a sentence")`.
 *
 * A text is framed <cls> + its tokens + <sep>, fed with an all-ones attention mask and zero segment ids;
 * the embedding is the graph's `sentence_embedding` output (the mean of the real tokens' last hidden
 * states).
 */

import { checkIds } from "./decoding.js";
import { InputError } from "./errors.js";
import { ExportModel } from "./model.js";

export class SentenceEncoder extends ExportModel {
  static family = "bert";
  static roles = ["encoder"];

  /** The ids the encoder is fed for `text`. */
  frame(text) {
    if (typeof text !== "string") throw new InputError(`text must be a string, got ${typeof text}`);
    return [this.special.cls, ...this.tokenizer.encode(text), this.special.sep];
  }

  /** The sentence embedding of `text`, a Float32Array of d_model values. */
  async embed(text) {
    return this.embedIds(this.frame(text));
  }

  /** One output of the encoder (default `sentence_embedding`, shape (1, D)) for framed ids, as (D,). */
  async embedIds(inputIds, { output = "sentence_embedding" } = {}) {
    const ids = checkIds(inputIds, { vocabSize: this.vocabSize, limit: this.maxLen, what: "text" });
    const outputs = await this.graphs.encoder.run(
      {
        input_ids: this.engine.ids(ids),
        attention_mask: this.engine.ones(ids.length),
        token_type_ids: this.engine.tensor("int64", new BigInt64Array(ids.length), [1, ids.length]),
      },
      [output],
    );
    return outputs[output].data.slice();
  }
}
