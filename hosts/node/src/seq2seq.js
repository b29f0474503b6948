/**
 * Text to text on a "seq2seq" export (T5): `(await openExport("exported/t5")).generate("some source text")`.
 *
 * A source is framed as manifest `framing.source` says (the text's tokens + </s> for T5). The encoder runs
 * once and also returns each decoder layer's cross-attention keys and values, which every decoder step
 * reuses; the decoder starts from `generation.decoder_start_token_id` with the empty self-attention cache
 * and decodes greedily. The decoder's context is max_len positions, the start token included.
 */

import { checkIds, checkOptions, greedyDecode, lastPosition } from "./decoding.js";
import { InputError, ManifestError } from "./errors.js";
import { CacheLayout } from "./kvcache.js";
import { generationDefaults, pick } from "./manifest.js";
import { ExportModel } from "./model.js";

export class TextToText extends ExportModel {
  static task = "seq2seq";
  static feeds = {
    encoder: ["input_ids", "attention_mask"],
    decoder: ["decoder_input_ids", "decoder_attention_mask", "encoder_attention_mask"],
  };

  constructor(parts) {
    super(parts);
    this.cache = new CacheLayout(this.manifest.kv_cache, { cross: true });
    this.generation = generationDefaults(this.manifest);
    this.startToken = this.generation.decoder_start_token_id;
    if (!Number.isInteger(this.startToken) || this.startToken < 0) {
      throw new ManifestError(
        "manifest.json: generation.decoder_start_token_id must be a token id for a seq2seq export; re-export",
      );
    }
    this.logits = this.io.decoder.outputs.logits;
  }

  /** The ids the encoder is fed for `text`: its framing (its tokens then </s>). */
  frame(text) {
    if (typeof text !== "string" || text === "") throw new InputError("text must be a non-empty string");
    return super.frame(text);
  }

  /** The greedy output text for `text`. */
  async generate(text, options = {}) {
    const { tokens } = await this.generateIds(this.frame(text), options);
    return this.tokenizer.decode(tokens);
  }

  /**
   * Greedy generation from framed source ids (</s> included).
   * `choose` and `onToken` as greedyDecode takes them (a sampler; a callback per new token).
   * @returns {Promise<{tokens: number[], finishReason: "stop"|"length"}>} new tokens, no stop token
   */
  async generateIds(sourceIds, { maxNewTokens, stopTokens, choose, onToken } = {}) {
    const options = {
      maxNewTokens: maxNewTokens ?? this.generation.max_new_tokens,
      stopTokens: stopTokens ?? this.generation.stop_tokens,
    };
    checkOptions(options, { vocabSize: this.vocabSize });
    const source = checkIds(sourceIds, { vocabSize: this.vocabSize, limit: this.maxLen, what: "source" });
    const memory = await this.#encode(source);
    const step = async (ids, cache, total) => {
      const feeds = pick(this.io.decoder, {
        decoder_input_ids: this.engine.ids(ids),
        decoder_attention_mask: this.engine.ones(total),
        encoder_attention_mask: memory.mask,
      });
      const outputs = await this.graphs.decoder.run({ ...feeds, ...memory.cross, ...cache }, [
        this.logits,
        ...this.cache.presentNames,
      ]);
      return { logits: lastPosition(outputs[this.logits]), cache: this.cache.next(outputs) };
    };
    const budget = Math.min(options.maxNewTokens, this.maxLen);
    return greedyDecode(step, [this.startToken], this.cache.empty(this.engine), {
      budget,
      stopTokens: options.stopTokens,
      choose,
      onToken,
    });
  }

  /** Encode once: the encoder mask and every layer's cross keys/values (1, H, S, Dh). */
  async #encode(source) {
    const mask = this.engine.ones(source.length);
    const feeds = pick(this.io.encoder, { input_ids: this.engine.ids(source), attention_mask: mask });
    const outputs = await this.graphs.encoder.run(feeds, this.cache.crossNames);
    const cross = {};
    for (const name of this.cache.crossNames) cross[name] = outputs[name];
    return { mask, cross };
  }
}
