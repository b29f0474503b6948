/**
 * The decoding loop shared by GPT and T5, one row at a time, the Python runtime's loop
 * (onnxformer.runtime.decoding) step for step: the first step feeds the whole prompt (or the decoder
 * start token) with the empty cache; every later step feeds the one token chosen with the growing cache
 * and an attention mask of ones over past + new. The row ends at a stop token (left out of the result),
 * when `budget` tokens were generated, or when `stopsAt(tokens)` says so (stop strings). A batch is its
 * rows one after another, each with its own sampler: what Python's batch gives, without the padding.
 */

import { InputError } from "./errors.js";
import { optionByNode } from "./options.js";

/**
 * @param {(ids: number[], cache: object, total: number) => Promise<{logits: Float32Array, cache: object}>} step
 *   runs the graph on `ids` (the new tokens), with `total` = past + new positions; returns the logits at
 *   the last position (V,) and the next cache
 * @param {number[]} firstIds what the first step feeds
 * @param {object} cache the empty cache
 * @param {{budget: number, stopTokens: number[], choose?: (logits: Float32Array) => number,
 *   stopsAt?: (tokens: number[]) => boolean}} options `choose` defaults to argmax (greedy)
 * @returns {AsyncGenerator<{tokens: number[], finishReason: "stop"|"length"|null}>} after each step, the
 *   tokens so far and, once the row is done, its finish reason (the same object each time)
 */
export async function* decodeSteps(step, firstIds, cache, { budget, stopTokens, choose = argmax, stopsAt }) {
  const stops = new Set(stopTokens);
  const state = { tokens: [], finishReason: budget <= 0 ? "length" : null };
  let ids = firstIds;
  let total = firstIds.length;
  let steps = 0;
  while (state.finishReason === null) {
    const result = await step(ids, cache, total);
    const token = choose(result.logits);
    steps += 1;
    if (stops.has(token)) {
      state.finishReason = "stop";
    } else {
      state.tokens.push(token);
      if (steps >= budget) state.finishReason = "length";
      if (stopsAt?.(state.tokens)) state.finishReason = "stop";
    }
    yield state;
    ids = [token];
    total += 1;
    cache = result.cache;
  }
}

/** `decodeSteps` run to the end. @returns {Promise<{tokens: number[], finishReason: "stop"|"length"}>} */
export async function decode(step, firstIds, cache, options) {
  let last = { tokens: [], finishReason: "length" };
  for await (const state of decodeSteps(step, firstIds, cache, options)) last = state;
  return { tokens: [...last.tokens], finishReason: last.finishReason ?? "length" };
}

/** Greedy decoding (argmax at every step). */
export async function greedyDecode(step, firstIds, cache, { budget, stopTokens }) {
  return decode(step, firstIds, cache, { budget, stopTokens });
}

/** The index of the largest value, the first one on ties (numpy's argmax). */
export function argmax(values) {
  let best = 0;
  for (let i = 1; i < values.length; i++) if (values[i] > values[best]) best = i;
  return best;
}

/** The last position's row of logits (1, T, V) -> (V,). */
export function lastPosition(logits) {
  const [, length, vocab] = logits.dims;
  return logits.data.subarray((length - 1) * vocab, length * vocab);
}

/** Token ids checked against the vocabulary and, when given, a length limit. */
export function checkIds(ids, { vocabSize, limit, what }) {
  if (!Array.isArray(ids) || ids.length === 0) {
    throw new InputError(`${what} must be a non-empty array of token ids`);
  }
  const bad = ids.filter((id) => !Number.isInteger(id) || id < 0 || id >= vocabSize);
  if (bad.length > 0) {
    throw new InputError(
      `${what} has token ids ${bad.slice(0, 5)} outside the vocabulary 0 .. ${vocabSize - 1}; ` +
        "encode text with the export's tokenizer",
    );
  }
  if (limit !== undefined && ids.length > limit) {
    throw new InputError(`${what} has ${ids.length} tokens but the model's context is ${limit}; shorten it`);
  }
  return ids;
}

/**
 * Option names a method takes: a misspelt or snake_case name is refused rather than silently ignored, and
 * an option of another task (options.js) with the reason that task's export does not take it.
 * @param {object} options what the caller passed @param {string[]} names what the method takes
 * @param {{what: string, task: string, why?: object}} where the method's name, the manifest task of its
 *   class, and why it refuses options its task has (Node name -> reason)
 */
export function checkOptionNames(options, names, { what, task, why = {} }) {
  if (options === null || typeof options !== "object" || Array.isArray(options)) {
    throw new InputError(`${what} options must be an object such as { maxNewTokens: 20 }`);
  }
  for (const key of Object.keys(options)) {
    if (names.includes(key)) continue;
    const camel = key.replace(/_([a-z])/g, (_, letter) => letter.toUpperCase());
    const known = optionByNode(camel);
    const hints = [];
    if (camel !== key && (names.includes(camel) || known !== undefined)) {
      hints.push(`the Node name of ${key} is ${camel}`);
    }
    if (known !== undefined && !known.tasks.includes(task)) hints.push(known.whyNot);
    else if (why[camel] !== undefined) hints.push(why[camel]);
    const hint = hints.length > 0 ? ` (${hints.join("; ")})` : "";
    throw new InputError(`${what} has no option ${JSON.stringify(key)}${hint}; it takes ${names.join(", ")}`);
  }
}

/** A list of prompts or texts, each a string (an array in gives an array out). */
export function checkTexts(texts, { what }) {
  if (!Array.isArray(texts)) {
    throw new InputError(`${what} must be a string or an array of strings, got ${typeof texts}`);
  }
  if (texts.length === 0) throw new InputError(`give at least one ${what}`);
  return texts;
}

/** Token id rows: one row (an array of ids) or several (an array of arrays). */
export function checkIdRows(rows, { vocabSize, limit, what }) {
  const batch = Array.isArray(rows) && rows.length > 0 && rows.every((row) => Array.isArray(row));
  const list = batch ? rows : [rows];
  return {
    single: !batch,
    rows: list.map((row, index) =>
      checkIds(row, { vocabSize, limit, what: batch ? `${what} ${index}` : what }),
    ),
  };
}

export function checkOptions({ maxNewTokens, stopTokens }, { vocabSize }) {
  if (!Number.isInteger(maxNewTokens) || maxNewTokens < 0) {
    throw new InputError(`maxNewTokens must be an integer >= 0, got ${JSON.stringify(maxNewTokens)}`);
  }
  if (
    !Array.isArray(stopTokens) ||
    stopTokens.some((id) => !Number.isInteger(id) || id < 0 || id >= vocabSize)
  ) {
    throw new InputError(
      `stopTokens must be token ids in 0 .. ${vocabSize - 1}, got ${JSON.stringify(stopTokens)}`,
    );
  }
}
