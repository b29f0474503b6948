/**
 * Choosing the next token from logits, the Python runtime's sampler (onnxformer.runtime.sampling) step
 * for step: greedy (temperature 0) or temperature, top-k, top-p with one numpy `default_rng(seed)` per
 * batch row (rng.js), so the same logits and seed pick the same tokens in Node as in Python.
 *
 * The arithmetic follows numpy's: logits are widened to float64, the stable descending sort keeps the
 * lower id first on ties, sums are numpy's pairwise sums, cumulative sums run left to right, and the draw
 * `random() * total` is placed with searchsorted(side="right"). One difference remains: Math.exp and
 * numpy's exp may differ in the last bit of a probability, which changes a token only when a draw falls
 * within ~1e-16 of a boundary between two tokens' cumulative probabilities.
 */

import { argmax } from "./decoding.js";
import { InputError, ManifestError } from "./errors.js";
import { checkSeed, defaultRng } from "./rng.js";

export const MAX_TEMPERATURE = 1e300;

/**
 * Sampling options checked as the Python SamplingConfig checks them; unset ones take `defaults`
 * (manifest `generation`: temperature, top_k, top_p).
 * @returns {{temperature: number, topK: number, topP: number, seed: bigint|undefined, greedy: boolean}}
 */
export function samplingConfig({ temperature, topK, topP, seed } = {}, defaults = {}) {
  if (temperature === undefined || topK === undefined || topP === undefined) {
    const fallback = {
      temperature: defaults.temperature ?? 1.0,
      topK: defaults.top_k ?? 0,
      topP: defaults.top_p ?? 1.0,
    };
    try {
      samplingConfig(fallback);
    } catch (error) {
      throw new ManifestError(`manifest.json generation defaults: ${error.message}; re-export the folder`);
    }
    temperature = temperature ?? fallback.temperature;
    topK = topK ?? fallback.topK;
    topP = topP ?? fallback.topP;
  }
  if (typeof temperature !== "number" || !(temperature >= 0 && temperature <= MAX_TEMPERATURE)) {
    throw new InputError(
      `temperature must be a number >= 0 (0 = greedy) and at most ${MAX_TEMPERATURE}, got ${JSON.stringify(temperature)}`,
    );
  }
  if (!Number.isInteger(topK) || topK < 0) {
    throw new InputError(`topK must be an integer >= 0 (0 = off), got ${JSON.stringify(topK)}`);
  }
  if (typeof topP !== "number" || !(topP > 0 && topP <= 1)) {
    throw new InputError(`topP must be a number in (0, 1] (1 = off), got ${JSON.stringify(topP)}`);
  }
  const checkedSeed = seed === undefined || seed === null ? undefined : checkSeed(seed);
  return { temperature, topK, topP, seed: checkedSeed, greedy: temperature === 0 };
}

/**
 * One generator per batch row, each seeded with the same seed: a row of a batch draws exactly the numbers
 * it would draw alone, so batched sampling equals one-by-one sampling (as in Python).
 */
export class Sampler {
  constructor(config, batch = 1) {
    this.config = config;
    // Without a seed every row gets fresh entropy, as numpy's default_rng(None).
    this.rngs = Array.from({ length: batch }, () => defaultRng(config.seed));
  }

  /** One row's logits (V,) -> its token id; `row` picks that row's generator. */
  choose(logits, row = 0) {
    if (this.config.greedy) return argmax(logits);
    return sampleRow(logits, this.rngs[row], this.config);
  }
}

/** Temperature, then the stable descending order, top-k, softmax, top-p, and one draw. */
export function sampleRow(logits, rng, { temperature, topK, topP }) {
  const vocab = logits.length;
  const widened = Float64Array.from(logits);
  let scaled = widened.map((value) => value / temperature);
  if (scaled.some((value, index) => !Number.isFinite(value) && Number.isFinite(widened[index]))) {
    // A tiny temperature overflows; shifting by the maximum keeps the largest logit at 0 and sends the
    // rest to -inf: the greedy limit such a temperature nears.
    const largest = numpyMax(widened);
    scaled = widened.map((value) => (value - largest) / temperature);
  }
  const order = stableDescending(scaled);
  const kept = topK ? Math.min(topK, vocab) : vocab;
  const ranked = new Float64Array(kept);
  for (let i = 0; i < kept; i++) ranked[i] = scaled[order[i]];
  let probs = ranked.map((value) => Math.exp(value - ranked[0]));
  const total = pairwiseSum(probs);
  probs = probs.map((value) => value / total);
  if (topP < 1) {
    const keep = Math.min(searchSorted(cumulativeSum(probs), topP, "left") + 1, probs.length);
    const head = probs.subarray(0, keep);
    const headTotal = pairwiseSum(head);
    probs = head.map((value) => value / headTotal);
  }
  const cumulative = cumulativeSum(probs);
  const draw = rng.random() * cumulative[cumulative.length - 1];
  const choice = searchSorted(cumulative, draw, "right");
  return order[Math.min(choice, cumulative.length - 1)];
}

/** numpy's argsort(-values, kind="stable"): largest first, ties by index, NaN last. */
function stableDescending(values) {
  const order = Array.from(values, (_, index) => index);
  const key = (index) => (Number.isNaN(values[index]) ? -Infinity : values[index]);
  order.sort((a, b) => {
    const nanA = Number.isNaN(values[a]);
    const nanB = Number.isNaN(values[b]);
    if (nanA !== nanB) return nanA ? 1 : -1;
    const x = key(a);
    const y = key(b);
    return x > y ? -1 : x < y ? 1 : a - b;
  });
  return order;
}

/** numpy's max: NaN if any value is NaN. */
function numpyMax(values) {
  let best = -Infinity;
  for (const value of values) {
    if (Number.isNaN(value)) return NaN;
    if (value > best) best = value;
  }
  return best;
}

/** np.cumsum: left to right. */
export function cumulativeSum(values) {
  const out = new Float64Array(values.length);
  let total = 0;
  for (let i = 0; i < values.length; i++) {
    total += values[i];
    out[i] = total;
  }
  return out;
}

/** np.searchsorted on an ascending array: "left" counts values < x, "right" values <= x. */
export function searchSorted(sorted, x, side) {
  let low = 0;
  let high = sorted.length;
  while (low < high) {
    const middle = (low + high) >>> 1;
    const before = side === "right" ? sorted[middle] <= x : sorted[middle] < x;
    if (before) low = middle + 1;
    else high = middle;
  }
  return low;
}

/**
 * np.sum of a contiguous float64 array: numpy's pairwise summation (8 accumulators up to 128 values,
 * halves beyond, numpy/_core/src/umath/loops_utils.h.src), added to the reduction's initial 0.
 */
export function pairwiseSum(values) {
  return 0 + pairwise(values, 0, values.length);
}

const BLOCK = 128;

function pairwise(a, start, n) {
  if (n < 8) {
    let total = 0;
    for (let i = 0; i < n; i++) total += a[start + i];
    return total;
  }
  if (n <= BLOCK) {
    const r = [];
    for (let j = 0; j < 8; j++) r.push(a[start + j]);
    let i = 8;
    for (; i < n - (n % 8); i += 8) {
      for (let j = 0; j < 8; j++) r[j] += a[start + i + j];
    }
    let total = r[0] + r[1] + (r[2] + r[3]) + (r[4] + r[5] + (r[6] + r[7]));
    for (; i < n; i++) total += a[start + i];
    return total;
  }
  let half = Math.floor(n / 2);
  half -= half % 8;
  return pairwise(a, start, half) + pairwise(a, start + half, n - half);
}
