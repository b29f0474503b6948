/**
 * GPT text generation: `(await openExport("exported/gpt")).generate("the cat")`.
 *
 * A prompt is framed as manifest `generation.prompt_prefix_tokens` (<s>) + the text's tokens and decoded
 * greedily with the KV cache. A row may grow until the context (config max_len, prompt included) is
 * full: the last token generated needs no position, so at most max_len - prompt + 1 new tokens.
 */

import { checkIds, checkOptions, greedyDecode, lastPosition } from "./decoding.js";
import { InputError } from "./errors.js";
import { CacheLayout } from "./kvcache.js";
import { ExportModel } from "./model.js";

export class TextGenerator extends ExportModel {
  static family = "gpt";
  static roles = ["decoder"];

  constructor(parts) {
    super(parts);
    this.cache = new CacheLayout(this.manifest.kv_cache, { cross: false });
    this.prefix = this.generation.prompt_prefix_tokens ?? [this.special.bos];
  }

  /** The ids the model is fed for `prompt`: the prefix (<s>) then the text's tokens. */
  frame(prompt) {
    if (typeof prompt !== "string") throw new InputError(`prompt must be a string, got ${typeof prompt}`);
    return [...this.prefix, ...this.tokenizer.encode(prompt)];
  }

  /** The greedy continuation of `prompt` as text (special tokens left out). */
  async generate(prompt, options = {}) {
    const { tokens } = await this.generateIds(this.frame(prompt), options);
    return this.tokenizer.decode(tokens);
  }

  /**
   * Greedy generation from framed ids (<s> included).
   * @returns {Promise<{tokens: number[], finishReason: "stop"|"length"}>} new tokens, no stop token
   */
  async generateIds(inputIds, { maxNewTokens, stopTokens } = {}) {
    const options = {
      maxNewTokens: maxNewTokens ?? this.generation.max_new_tokens ?? this.maxLen,
      stopTokens: stopTokens ?? this.generation.stop_tokens ?? [this.special.eos],
    };
    checkOptions(options, { vocabSize: this.vocabSize });
    const ids = checkIds(inputIds, { vocabSize: this.vocabSize, limit: this.maxLen, what: "prompt" });
    const budget = Math.min(options.maxNewTokens, this.maxLen - ids.length + 1);
    return greedyDecode(this.#step, ids, this.cache.empty(this.engine), {
      budget,
      stopTokens: options.stopTokens,
    });
  }

  /** ids (1, T) with the cache (1, H, P, Dh) -> logits at the last position (V,), the cache with P + T. */
  #step = async (ids, cache, total) => {
    const outputs = await this.graphs.decoder.run(
      { input_ids: this.engine.ids(ids), attention_mask: this.engine.ones(total), ...cache },
      ["logits", ...this.cache.presentNames],
    );
    return { logits: lastPosition(outputs.logits), cache: this.cache.next(outputs) };
  };
}
