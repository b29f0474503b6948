/**
 * Text to text on a "seq2seq" export (T5): `(await openExport("exported/t5")).generate("some source text")`.
 *
 * A source is framed as manifest `framing.source` says (the text's tokens + </s> for T5). The encoder runs
 * once and also returns each decoder layer's cross-attention keys and values, which every decoder step
 * reuses; the decoder starts from `generation.decoder_start_token_id` with the empty self-attention cache
 * and decodes greedily or samples (temperature, topK, topP, seed: the Python runtime's draws, see
 * sampling.js), options left unset taking the export's defaults (manifest `generation`). The decoder's
 * context is max_len positions, the start token included. `numBeams > 1` runs beam search (beam.js).
 * Python's TextToText with camelCase options.
 */

import { beamSearch, checkLengthPenalty } from "./beam.js";
import { checkIdRows, checkOptionNames, checkOptions, checkTexts, decode, lastPosition } from "./decoding.js";
import { InputError, ManifestError } from "./errors.js";
import { CacheLayout } from "./kvcache.js";
import { generationDefaults, pick } from "./manifest.js";
import { ExportModel } from "./model.js";
import { OPTIONS, optionNames } from "./options.js";
import { Sampler, samplingConfig } from "./sampling.js";

const NAMES = optionNames("seq2seq");
const SAMPLING = ["temperature", "topK", "topP", "seed"]; // what beam search, deterministic, refuses
const BEAM_NAMES = NAMES.filter((name) => !SAMPLING.includes(name));

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

  /** The output text for `text` (a string), or for each text (an array in, an array out). */
  async generate(text, options = {}) {
    const single = typeof text === "string";
    const texts = single ? [text] : checkTexts(text, { what: "text" });
    const rows = texts.map((item, index) => {
      if (typeof item !== "string" || item === "") {
        const what = single ? "text" : `text ${index}`;
        throw new InputError(`${what} must be a non-empty string; give the text to transform`);
      }
      return super.frame(item, { what: single ? "text" : `text ${index}` });
    });
    const results = await this.generateIds(single ? rows[0] : rows, options);
    const outputs = (single ? [results] : results).map(({ tokens }) => this.tokenizer.decode(tokens));
    return single ? outputs[0] : outputs;
  }

  /**
   * Generation from framed source ids (</s> included): one row (an array of ids) gives one result, an
   * array of rows an array of results, each row decoded as it would be alone.
   * @returns {Promise<{tokens: number[], finishReason: "stop"|"length"}>} new tokens, no stop token
   */
  async generateIds(sourceIds, options = {}) {
    checkOptionNames(options, NAMES, { what: "generate", task: TextToText.task });
    const { numBeams = OPTIONS.num_beams.default, lengthPenalty = OPTIONS.length_penalty.default } = options;
    if (!Number.isInteger(numBeams) || numBeams < 1) {
      throw new InputError(
        `numBeams must be an integer >= 1 (1 = no beam search), got ${JSON.stringify(numBeams)}`,
      );
    }
    if (numBeams > 1) {
      if (SAMPLING.some((name) => options[name] !== undefined && options[name] !== null)) {
        throw new InputError(
          "beam search chooses tokens deterministically; leave temperature, topK, topP and seed unset, " +
            "or use numBeams 1 to sample",
        );
      }
      return this.beamSearchIds(sourceIds, {
        numBeams,
        lengthPenalty,
        maxNewTokens: options.maxNewTokens,
        stopTokens: options.stopTokens,
      });
    }
    const { single, rows, budget, stopTokens } = this.#check(sourceIds, options);
    checkLengthPenalty(lengthPenalty);
    const sampling = samplingConfig(options, this.generation);
    const results = [];
    for (const source of rows) {
      const sampler = new Sampler(sampling, 1); // each row seeded as Python seeds its row
      const result = await decode(
        this.#stepper(await this.#encode(source)),
        [this.startToken],
        this.cache.empty(this.engine),
        {
          budget,
          stopTokens,
          choose: (logits) => sampler.choose(logits),
        },
      );
      results.push(result);
    }
    return single ? results[0] : results;
  }

  /**
   * Beam search from framed source ids; each result carries its `score` (sum of log-probabilities /
   * length ** lengthPenalty). `numBeams: 1` is allowed here (it equals greedy decoding), while `generate`
   * sends 1 to the greedy loop, as in Python.
   * @returns {Promise<{tokens: number[], finishReason: "stop"|"length", score: number}>}
   */
  async beamSearchIds(sourceIds, options = {}) {
    checkOptionNames(options, BEAM_NAMES, { what: "beamSearchIds", task: TextToText.task });
    const { numBeams, lengthPenalty = OPTIONS.length_penalty.default } = options;
    if (!Number.isInteger(numBeams) || numBeams < 1) {
      throw new InputError(`numBeams must be an integer >= 1, got ${JSON.stringify(numBeams)}`);
    }
    if (numBeams > this.vocabSize) {
      throw new InputError(`numBeams must be at most the vocabulary size ${this.vocabSize}, got ${numBeams}`);
    }
    const { single, rows, budget, stopTokens } = this.#check(sourceIds, options);
    const penalty = checkLengthPenalty(lengthPenalty);
    const results = [];
    for (const source of rows) {
      results.push(
        await beamSearch(this.#stepper(await this.#encode(source)), this.cache.empty(this.engine), {
          numBeams,
          startToken: this.startToken,
          budget,
          stopTokens,
          lengthPenalty: penalty,
        }),
      );
    }
    return single ? results[0] : results;
  }

  /** Checked source rows, the decoding budget (the start token counts), the stop tokens. */
  #check(sourceIds, options) {
    const checked = {
      maxNewTokens: options.maxNewTokens ?? this.generation.max_new_tokens,
      stopTokens: options.stopTokens ?? this.generation.stop_tokens,
    };
    checkOptions(checked, { vocabSize: this.vocabSize });
    const { single, rows } = checkIdRows(sourceIds, {
      vocabSize: this.vocabSize,
      limit: this.maxLen,
      what: "source",
    });
    return {
      single,
      rows,
      budget: Math.min(checked.maxNewTokens, this.maxLen),
      stopTokens: checked.stopTokens,
    };
  }

  /** One decoder step over an encoded source: ids (1, T), cache (1, H, P, Dh) -> logits (V,), next cache. */
  #stepper(memory) {
    return async (ids, cache, total) => {
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
