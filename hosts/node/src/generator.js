/**
 * Text generation on a "generate" export (GPT): `(await openExport("exported/gpt")).generate("the cat")`.
 *
 * A prompt is framed as manifest `framing.prompt` says (<s> + the text's tokens for GPT) and decoded
 * greedily with the KV cache. A row may grow until the context (config max_len, prompt included) is
 * full: the last token generated needs no position, so at most max_len - prompt + 1 new tokens.
 */

import { checkIds, checkOptions, greedyDecode, lastPosition } from "./decoding.js";
import { CacheLayout } from "./kvcache.js";
import { generationDefaults, pick } from "./manifest.js";
import { ExportModel } from "./model.js";

export class TextGenerator extends ExportModel {
  static task = "generate";
  static feeds = { decoder: ["input_ids", "attention_mask"] };

  constructor(parts) {
    super(parts);
    this.cache = new CacheLayout(this.manifest.kv_cache, { cross: false });
    this.generation = generationDefaults(this.manifest);
    this.prefix = this.framing.prefix;
    this.logits = this.io.decoder.outputs.logits;
  }

  /** The ids the model is fed for `prompt`: the framing's prefix (<s>) then the text's tokens. */
  frame(prompt) {
    return super.frame(prompt, { what: "prompt" });
  }

  /** The greedy continuation of `prompt` as text (special tokens left out; "" for maxNewTokens 0). */
  async generate(prompt, options = {}) {
    const { tokens } = await this.generateIds(this.frame(prompt), options);
    return this.tokenizer.decode(tokens);
  }

  /**
   * Greedy generation from framed ids (<s> included).
   * `choose` and `onToken` as greedyDecode takes them (a sampler; a callback per new token).
   * @returns {Promise<{tokens: number[], finishReason: "stop"|"length"}>} new tokens, no stop token
   */
  async generateIds(inputIds, { maxNewTokens, stopTokens, choose, onToken } = {}) {
    const options = {
      maxNewTokens: maxNewTokens ?? this.generation.max_new_tokens,
      stopTokens: stopTokens ?? this.generation.stop_tokens,
    };
    checkOptions(options, { vocabSize: this.vocabSize });
    const ids = checkIds(inputIds, { vocabSize: this.vocabSize, limit: this.maxLen, what: "prompt" });
    const budget = Math.min(options.maxNewTokens, this.maxLen - ids.length + 1);
    return greedyDecode(this.#step, ids, this.cache.empty(this.engine), {
      budget,
      stopTokens: options.stopTokens,
      choose,
      onToken,
    });
  }

  /** ids (1, T) with the cache (1, H, P, Dh) -> logits at the last position (V,), the cache with P + T. */
  #step = async (ids, cache, total) => {
    const feeds = pick(this.io.decoder, {
      input_ids: this.engine.ids(ids),
      attention_mask: this.engine.ones(total),
    });
    const outputs = await this.graphs.decoder.run({ ...feeds, ...cache }, [
      this.logits,
      ...this.cache.presentNames,
    ]);
    return { logits: lastPosition(outputs[this.logits]), cache: this.cache.next(outputs) };
  };
}
