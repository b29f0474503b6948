/**
 * The greedy decoding loop shared by GPT and T5, batch 1, the Python runtime's loop
 * (onnxformer.runtime.decoding) step for step: the first step feeds the whole prompt (or the decoder
 * start token) with the empty cache; every later step feeds the one token chosen with the growing cache
 * and an attention mask of ones over past + new. The row ends at a stop token (left out of the result)
 * or when `budget` tokens were generated.
 */

import { InputError } from "./errors.js";

/**
 * @param {(ids: number[], cache: object, total: number) => Promise<{logits: Float32Array, cache: object}>} step
 *   runs the graph on `ids` (the new tokens), with `total` = past + new positions; returns the logits at
 *   the last position (V,) and the next cache
 * @param {number[]} firstIds what the first step feeds
 * @param {object} cache the empty cache
 * `choose(logits)` picks each token (default argmax: greedy; a sampler for sampling) and
 * `onToken(token, tokens)`, when given, is awaited after each new token (streaming).
 * @returns {Promise<{tokens: number[], finishReason: "stop"|"length"}>}
 */
export async function greedyDecode(step, firstIds, cache, { budget, stopTokens, choose = argmax, onToken }) {
  const stops = new Set(stopTokens);
  const tokens = [];
  let ids = firstIds;
  let total = firstIds.length;
  while (tokens.length < budget) {
    const result = await step(ids, cache, total);
    const token = choose(result.logits);
    if (stops.has(token)) return { tokens, finishReason: "stop" };
    tokens.push(token);
    if (onToken !== undefined) await onToken(token, tokens);
    ids = [token];
    total += 1;
    cache = result.cache;
  }
  return { tokens, finishReason: "length" };
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
