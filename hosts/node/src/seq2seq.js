/**
 * T5 text to text: `(await openExport("exported/t5")).generate("some source text")`.
 *
 * A source is framed as the text's tokens + </s>. The encoder runs once and also returns each decoder
 * layer's cross-attention keys and values, which every decoder step reuses; the decoder starts from
 * `generation.decoder_start_token_id` with the empty self-attention cache and decodes greedily. The
 * decoder's context is max_len positions, the start token included.
 */

import { checkIds, checkOptions, greedyDecode, lastPosition } from "./decoding.js";
import { InputError } from "./errors.js";
import { CacheLayout } from "./kvcache.js";
import { ExportModel } from "./model.js";

export class TextToText extends ExportModel {
  static family = "t5";
  static roles = ["encoder", "decoder"];

  constructor(parts) {
    super(parts);
    this.cache = new CacheLayout(this.manifest.kv_cache, { cross: true });
    this.startToken =
      this.generation.decoder_start_token_id ?? this.config.decoder_start_token_id ?? this.special.bos;
  }

  /** The ids the encoder is fed for `text`: its tokens then </s>. */
  frame(text) {
    if (typeof text !== "string" || text === "") throw new InputError("text must be a non-empty string");
    return [...this.tokenizer.encode(text), this.special.eos];
  }

  /** The greedy output text for `text`. */
  async generate(text, options = {}) {
    const { tokens } = await this.generateIds(this.frame(text), options);
    return this.tokenizer.decode(tokens);
  }

  /**
   * Greedy generation from framed source ids (</s> included).
   * @returns {Promise<{tokens: number[], finishReason: "stop"|"length"}>} new tokens, no stop token
   */
  async generateIds(sourceIds, { maxNewTokens, stopTokens } = {}) {
    const options = {
      maxNewTokens: maxNewTokens ?? this.generation.max_new_tokens ?? this.maxLen,
      stopTokens: stopTokens ?? this.generation.stop_tokens ?? [this.special.eos],
    };
    checkOptions(options, { vocabSize: this.vocabSize });
    const source = checkIds(sourceIds, { vocabSize: this.vocabSize, limit: this.maxLen, what: "source" });
    const memory = await this.#encode(source);
    const step = async (ids, cache, total) => {
      const outputs = await this.graphs.decoder.run(
        {
          decoder_input_ids: this.engine.ids(ids),
          decoder_attention_mask: this.engine.ones(total),
          ...memory,
          ...cache,
        },
        ["logits", ...this.cache.presentNames],
      );
      return { logits: lastPosition(outputs.logits), cache: this.cache.next(outputs) };
    };
    const budget = Math.min(options.maxNewTokens, this.maxLen);
    return greedyDecode(step, [this.startToken], this.cache.empty(this.engine), {
      budget,
      stopTokens: options.stopTokens,
    });
  }

  /** Encode once: the encoder mask and every layer's cross keys/values (1, H, S, Dh). */
  async #encode(source) {
    const mask = this.engine.ones(source.length);
    const outputs = await this.graphs.encoder.run(
      { input_ids: this.engine.ids(source), attention_mask: mask },
      this.cache.crossNames,
    );
    const memory = { encoder_attention_mask: mask };
    for (const name of this.cache.crossNames) memory[name] = outputs[name];
    return memory;
  }
}
