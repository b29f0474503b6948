/**
 * Choosing the next token from the logits (V,), step for step as the Python runtime's sampler
 * (runtime/sampling.py): greedy at temperature 0, else a draw from the softmax of logits / temperature
 * (in float64), kept to the top-k tokens (0: all) and then to the smallest set whose probability reaches
 * top-p (the nucleus, Holtzman et al. 2019; 1: all). The draws are numpy's `default_rng(seed).random()`
 * (numpyrandom.js), so a seed samples the same tokens here as in Python, unless a draw falls within the
 * engines' ~1e-6 difference in logits of a boundary between two tokens' cumulative probabilities.
 */

import { argmax } from "../node/src/decoding.js";
import { InputError } from "../node/src/errors.js";

import { defaultRng } from "./numpyrandom.js";

/** A function logits (V,) -> token id for `greedyDecode`'s `choose`; `seed` null draws a fresh one. */
export function sampler({ temperature = 1, topK = 0, topP = 1, seed = null } = {}) {
  if (!(typeof temperature === "number" && temperature >= 0 && temperature <= 1e300)) {
    throw new InputError(`temperature must be a number >= 0 (0 = greedy), got ${temperature}`);
  }
  if (!(Number.isInteger(topK) && topK >= 0)) {
    throw new InputError(`top-k must be an integer >= 0 (0 = off), got ${topK}`);
  }
  if (!(typeof topP === "number" && topP > 0 && topP <= 1)) {
    throw new InputError(`top-p must be in (0, 1] (1 = off), got ${topP}`);
  }
  if (seed !== null && !(Number.isSafeInteger(seed) && seed >= 0)) {
    throw new InputError(`seed must be an integer >= 0, or empty for a fresh one, got ${seed}`);
  }
  if (temperature === 0) return argmax;
  const rng = defaultRng(seed ?? freshSeed());
  return (logits) => sampleRow(logits, { temperature, topK, topP }, rng.random());
}

function freshSeed() {
  const [high, low] = crypto.getRandomValues(new Uint32Array(2));
  return (high & 0x1fffff) * 2 ** 32 + low; // 53 bits: a safe integer
}

/** The token drawn by `u` in [0, 1) from `logits` (V,), as Sampler._sample_row does it. */
export function sampleRow(logits, { temperature, topK, topP }, u) {
  let scaled = Float64Array.from(logits, (x) => x / temperature); // (V,)
  if (scaled.some((x, i) => !Number.isFinite(x) && Number.isFinite(logits[i]))) {
    // A tiny temperature overflows: shifted by the maximum first, the largest logit stays 0.
    const top = Math.max(...logits);
    scaled = Float64Array.from(logits, (x) => (x - top) / temperature);
  }
  // Most likely first; ties keep the lower id first (numpy's stable argsort of -scaled).
  const order = Array.from(scaled.keys()).sort((a, b) =>
    scaled[a] === scaled[b] ? a - b : scaled[b] > scaled[a] ? 1 : -1,
  );
  let ranked = order.map((id) => scaled[id]);
  if (topK > 0) ranked = ranked.slice(0, topK);
  let probs = Float64Array.from(ranked, (x) => Math.exp(x - ranked[0]));
  probs = divide(probs, pairwiseSum(probs));
  if (topP < 1) {
    const keep = searchSorted(cumulativeSum(probs), topP, "left") + 1; // reach p, then stop
    const kept = probs.subarray(0, keep);
    probs = divide(kept, pairwiseSum(kept));
  }
  const cumulative = cumulativeSum(probs);
  const choice = searchSorted(cumulative, u * cumulative[cumulative.length - 1], "right");
  return order[Math.min(choice, cumulative.length - 1)];
}

const divide = (values, by) => values.map((x) => x / by);

function cumulativeSum(values) {
  const out = new Float64Array(values.length);
  let total = 0;
  for (let i = 0; i < values.length; i++) out[i] = total += values[i];
  return out;
}

/** The index numpy's searchsorted gives: the first value >= x ("left") or > x ("right"). */
function searchSorted(sorted, x, side) {
  let [low, high] = [0, sorted.length];
  while (low < high) {
    const mid = (low + high) >>> 1;
    if (side === "left" ? sorted[mid] < x : sorted[mid] <= x) low = mid + 1;
    else high = mid;
  }
  return low;
}

/** numpy's float64 sum: pairwise, 8 partial sums per block of up to 128 values (pairwise_sum in loops). */
function pairwiseSum(values, start = 0, n = values.length) {
  if (n < 8) {
    let sum = 0;
    for (let i = start; i < start + n; i++) sum += values[i];
    return sum;
  }
  if (n <= 128) {
    const r = Array.from({ length: 8 }, (_, j) => values[start + j]);
    let i = 8;
    for (; i < n - (n % 8); i += 8) for (let j = 0; j < 8; j++) r[j] += values[start + i + j];
    let sum = r[0] + r[1] + (r[2] + r[3]) + (r[4] + r[5] + (r[6] + r[7]));
    for (; i < n; i++) sum += values[start + i];
    return sum;
  }
  let half = Math.floor(n / 2);
  half -= half % 8;
  return pairwiseSum(values, start, half) + pairwiseSum(values, start + half, n - half);
}
