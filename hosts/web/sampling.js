/**
 * Choosing the next token from the logits (V,): greedy (temperature 0) or a draw from the softmax at a
 * temperature, kept to the top-k tokens and to the smallest set whose probability reaches top-p (the
 * nucleus, Holtzman et al. 2019), as the Python runtime's options mean them (top_k 0 and top_p 1 turn
 * each filter off). The draws come from a seeded generator (mulberry32), so a seed repeats a sample in
 * this page; they are not the same draws as numpy's generator in the Python runtime.
 */

import { argmax } from "../node/src/decoding.js";
import { InputError } from "../node/src/errors.js";

/** A function logits (V,) -> token id for `greedyDecode`'s `choose`. */
export function sampler({ temperature = 0, topK = 0, topP = 1, seed = 0 } = {}) {
  if (!(Number.isFinite(temperature) && temperature >= 0)) {
    throw new InputError(`temperature must be a number >= 0 (0 is greedy), got ${temperature}`);
  }
  if (!(Number.isInteger(topK) && topK >= 0)) {
    throw new InputError(`top-k must be an integer >= 0 (0 keeps every token), got ${topK}`);
  }
  if (!(topP > 0 && topP <= 1))
    throw new InputError(`top-p must be in (0, 1] (1 keeps every token), got ${topP}`);
  if (!Number.isInteger(seed)) throw new InputError(`seed must be an integer, got ${seed}`);
  if (temperature === 0) return argmax;
  const random = mulberry32(seed);
  return (logits) => draw(logits, { temperature, topK, topP }, random());
}

/** The token whose cumulative probability first passes `u` in [0, 1), after the filters. */
export function draw(logits, { temperature, topK, topP }, u) {
  const order = Array.from(logits.keys()).sort((a, b) => logits[b] - logits[a] || a - b);
  const kept = topK > 0 ? order.slice(0, topK) : order;
  const top = logits[kept[0]];
  const weights = kept.map((id) => Math.exp((logits[id] - top) / temperature)); // stable softmax
  const total = weights.reduce((sum, w) => sum + w, 0);
  let count = kept.length;
  if (topP < 1) {
    let mass = 0;
    count = 0;
    while (count < kept.length && mass < topP * total) mass += weights[count++];
  }
  const nucleus = weights.slice(0, count).reduce((sum, w) => sum + w, 0);
  let target = u * nucleus;
  for (let i = 0; i < count; i++) {
    target -= weights[i];
    if (target < 0) return kept[i];
  }
  return kept[count - 1];
}

/** A small seeded generator of floats in [0, 1) (mulberry32, public domain). */
function mulberry32(seed) {
  let state = seed >>> 0;
  return () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}
