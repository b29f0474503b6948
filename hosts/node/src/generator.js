/**
 * Text generation on a "generate" export (GPT): `(await openExport("exported/gpt")).generate("the cat")`,
 * the Python runtime's TextGenerator (onnxformer.runtime.generator) with camelCase options.
 *
 * A prompt is framed as manifest `framing.prompt` says (<s> + the text's tokens for GPT) and decoded with
 * the KV cache, greedily (temperature 0) or by sampling (temperature, topK, topP, seed: the same draws and
 * tokens as Python for the same seed, see sampling.js). Options left unset take the export's defaults
 * (manifest `generation`), as in Python. A row may grow until the context (config max_len, prompt
 * included) is full: the last token generated needs no position, so at most max_len - prompt + 1 new
 * tokens. Stop tokens end a row and are left out; stop strings end a row and cut its text before them.
 */

import {
  checkIdRows,
  checkOptionNames,
  checkOptions,
  checkTexts,
  decode,
  decodeSteps,
  lastPosition,
} from "./decoding.js";
import { InputError } from "./errors.js";
import { CacheLayout } from "./kvcache.js";
import { generationDefaults, pick } from "./manifest.js";
import { ExportModel } from "./model.js";
import { optionNames } from "./options.js";
import { Sampler, samplingConfig } from "./sampling.js";

const TEXT_OPTIONS = optionNames("generate");
const ID_OPTIONS = TEXT_OPTIONS.filter((name) => name !== "stop");
const ID_ONLY = {
  stop: "stop strings cut text, and this call returns token ids; give stopTokens, or call generate",
};
const REPLACEMENT = "\ufffd"; // what decoding shows for bytes that are not (yet) a whole UTF-8 character

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

  /**
   * The continuation of `prompt` (a string), or of each prompt (an array in, an array out), special
   * tokens left out ("" for maxNewTokens 0).
   * @param {string|string[]} prompt
   * @param {{maxNewTokens?: number, temperature?: number, topK?: number, topP?: number,
   *   seed?: number|bigint, stop?: string[], stopTokens?: number[]}} options
   */
  async generate(prompt, options = {}) {
    const single = typeof prompt === "string";
    const request = this.#request(this.#frameAll(single ? [prompt] : prompt), options, TEXT_OPTIONS);
    const texts = [];
    for (const row of request.rows) {
      const loop = this.#loop(request, row);
      const { tokens } = await decode(this.#step, row, this.#emptyCache(row, loop.budget), loop);
      texts.push(cut(this.tokenizer.decode(tokens), request.stop));
    }
    return single ? texts[0] : texts;
  }

  /**
   * Generation from framed ids (<s> included): one row (an array of ids) gives one result, an array of
   * rows an array of results, each row decoded as it would be alone.
   * @returns {Promise<{tokens: number[], finishReason: "stop"|"length"}>} new tokens, no stop token
   */
  async generateIds(inputIds, options = {}) {
    const { single, rows } = checkIdRows(inputIds, {
      vocabSize: this.vocabSize,
      limit: this.maxLen,
      what: "prompt",
    });
    const request = this.#request(rows, options, ID_OPTIONS);
    const results = [];
    for (const row of rows) {
      const loop = this.#loop(request, row);
      results.push(await decode(this.#step, row, this.#emptyCache(row, loop.budget), loop));
    }
    return single ? results[0] : results;
  }

  /**
   * The continuation of one prompt in pieces as it is produced, an async iterator of strings that join to
   * `generate`'s text (Python's `stream`). A piece is only given once it is final: a character split across
   * byte-level tokens waits for its last byte, and text that may be the start of a stop string waits until
   * it is not. The prompt and options are checked now; the model runs as the caller iterates.
   */
  stream(prompt, options = {}) {
    if (typeof prompt !== "string") {
      throw new InputError(`stream takes one prompt string, got ${typeof prompt}; loop over an array`);
    }
    const request = this.#request(this.#frameAll([prompt]), options, TEXT_OPTIONS);
    return this.#stream(request);
  }

  async *#stream(request) {
    const [row] = request.rows;
    const loop = this.#loop(request, row);
    let emitted = 0;
    for await (const state of decodeSteps(this.#step, row, this.#emptyCache(row, loop.budget), loop)) {
      const text = this.tokenizer.decode(state.tokens);
      let end = cut(text, request.stop).length;
      if (state.finishReason === null) {
        const settled = this.tokenizer.settled(state.tokens);
        const stable = settled === state.tokens.length ? text : this.tokenizer.decode(state.tokens.slice(0, settled));
        end = Math.min(end, finalEnd(stable, request.stop));
      }
      if (end > emitted) {
        yield text.slice(emitted, end);
        emitted = end;
      }
    }
  }

  /** Checked options, unset ones taking the export's defaults, and the framed rows. */
  #request(rows, options, names) {
    checkOptionNames(options, names, { what: "generate", task: TextGenerator.task, why: ID_ONLY });
    const checked = {
      maxNewTokens: options.maxNewTokens ?? this.generation.max_new_tokens,
      stopTokens: options.stopTokens ?? this.generation.stop_tokens,
    };
    checkOptions(checked, { vocabSize: this.vocabSize });
    return {
      rows,
      ...checked,
      sampling: samplingConfig(options, this.generation),
      stop: checkStopStrings(options.stop),
    };
  }

  /** One row's loop options: its budget, a fresh sampler (seeded as Python's row), stop strings. */
  #loop(request, row) {
    const sampler = new Sampler(request.sampling, 1);
    const stopsAt =
      request.stop.length > 0
        ? (tokens) => findStop(this.tokenizer.decode(tokens), request.stop) >= 0
        : undefined;
    return {
      budget: Math.min(request.maxNewTokens, this.maxLen - row.length + 1),
      stopTokens: request.stopTokens,
      choose: (logits) => sampler.choose(logits),
      stopsAt,
    };
  }

  /** Every prompt framed and checked before the first runs. */
  #frameAll(prompts) {
    checkTexts(prompts, { what: "prompt" });
    return checkIdRows(
      prompts.map((prompt, index) => super.frame(prompt, { what: `prompt ${index}` })),
      { vocabSize: this.vocabSize, limit: this.maxLen, what: "prompt" },
    ).rows;
  }

  /**
   * The first step's cache of `row`: empty, or for an in-place cache buffers with room for the prompt and
   * one token per later step (the last token chosen is never fed), as the Python runtime's.
   */
  #emptyCache(row, budget) {
    return this.cache.empty(this.engine, row.length + Math.max(budget, 1));
  }

  /**
   * ids (1, T) with the cache (1, H, P, Dh), or an in-place buffer holding P positions, -> logits at the
   * last position (V,), the cache with P + T.
   */
  #step = async (ids, cache, total) => {
    const feeds = pick(this.io.decoder, {
      input_ids: this.engine.ids(ids),
      attention_mask: this.engine.ones(total),
    });
    const step = await this.cache.run(this.graphs.decoder, feeds, cache, [this.logits]);
    return { logits: lastPosition(step.outputs[this.logits]), cache: step.cache };
  };
}

function checkStopStrings(stop) {
  if (stop === undefined || stop === null) return [];
  if (!Array.isArray(stop)) {
    throw new InputError(`stop must be an array of strings, e.g. stop: [${JSON.stringify(stop)}]`);
  }
  if (!stop.every((item) => typeof item === "string" && item !== "")) {
    throw new InputError(`stop strings must be non-empty strings, got ${JSON.stringify(stop)}`);
  }
  return [...stop];
}

/** Where the first stop string starts in `text`, or -1. */
function findStop(text, stop) {
  const found = stop.map((item) => text.indexOf(item)).filter((index) => index >= 0);
  return found.length > 0 ? Math.min(...found) : -1;
}

/** `text` up to the first stop string. */
function cut(text, stop) {
  const index = findStop(text, stop);
  return index < 0 ? text : text.slice(0, index);
}

/**
 * How much of `text` can no longer change while generation goes on: not a trailing incomplete character
 * (shown as U+FFFD until its last byte comes), nor a tail that may begin a stop string.
 */
function finalEnd(text, stop) {
  let end = text.length;
  while (end > 0 && text[end - 1] === REPLACEMENT) end -= 1;
  let hold = 0;
  const head = text.slice(0, end);
  for (const item of stop) {
    for (let size = Math.min(item.length - 1, end); size > hold; size--) {
      if (head.endsWith(item.slice(0, size))) {
        hold = size;
        break;
      }
    }
  }
  return end - hold;
}
