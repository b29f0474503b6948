/**
 * Beam search for one source, the Python runtime's `beam_search` (onnxformer.runtime.decoding) step for
 * step: keep the `numBeams` best partial outputs; each step scores every (beam, next token) by the beam's
 * summed log-probability plus the token's and keeps the K best that do not end in a stop token. A stop
 * token among the K best candidates finishes that hypothesis, scored sum / length ** lengthPenalty with its
 * length counting the stop token. The source is done once K hypotheses finished and the best running
 * beam, scored at its current length, does not beat the worst of the K best finished ones (Hugging Face's
 * `early_stopping=False` rule); at the budget the running beams finish with reason "length".
 *
 * Where Python runs the K beams as one batch, this runs each live beam as its own batch-1 step and hands a
 * kept beam the cache of the beam it extends; a beam not yet alive (score -inf) never runs, as nothing it
 * could return is ever kept.
 */

import { InputError } from "./errors.js";
import { pairwiseSum } from "./sampling.js";

export const MAX_LENGTH_PENALTY = 10.0;

export function checkLengthPenalty(value) {
  if (typeof value !== "number" || !(value >= -MAX_LENGTH_PENALTY && value <= MAX_LENGTH_PENALTY)) {
    throw new InputError(
      `lengthPenalty must be a number in [-${MAX_LENGTH_PENALTY}, ${MAX_LENGTH_PENALTY}] ` +
        `(1.0 = average log-probability, 0 = sum), got ${JSON.stringify(value)}`,
    );
  }
  return value;
}

/** Beam search's ranking of a finished hypothesis: sum of log-probabilities / length ** penalty. */
export function sequenceScore(logProb, length, lengthPenalty) {
  return length > 0 ? logProb / length ** lengthPenalty : 0;
}

/** (V,) float32 logits -> (V,) float64 log-probabilities, numpy's arithmetic (pairwise sum). */
export function logSoftmax(logits) {
  let largest = -Infinity;
  for (const value of logits) if (value > largest) largest = value;
  const shifted = Float64Array.from(logits, (value) => value - largest);
  const logTotal = Math.log(pairwiseSum(shifted.map(Math.exp)));
  return shifted.map((value) => value - logTotal);
}

/**
 * @param step as decoding.js's: (ids, cache, total) -> {logits (V,), cache}
 * @returns {Promise<{tokens: number[], finishReason: "stop"|"length", score: number}>}
 */
export async function beamSearch(
  step,
  emptyCache,
  { numBeams, startToken, budget, stopTokens, lengthPenalty },
) {
  const stop = new Set(stopTokens);
  let scores = Array.from({ length: numBeams }, (_, k) => (k === 0 ? 0 : -Infinity));
  let beams = Array.from({ length: numBeams }, () => []);
  let caches = Array.from({ length: numBeams }, () => emptyCache);
  let ids = Array(numBeams).fill(startToken);
  const finished = []; // [score, tokens, reason] in the order they finished
  let done = budget <= 0;
  for (let length = 1; length <= budget && !done; length++) {
    const total = length; // the start token and the length - 1 tokens before this step
    const outputs = [];
    for (let k = 0; k < numBeams; k++) {
      outputs.push(scores[k] === -Infinity ? null : await step([ids[k]], caches[k], total));
    }
    const vocab = outputs.find((output) => output !== null).logits.length;
    const totals = new Float64Array(numBeams * vocab).fill(-Infinity); // (K * V)
    outputs.forEach((output, k) => {
      if (output === null) return;
      const logProbs = logSoftmax(output.logits);
      for (let v = 0; v < vocab; v++) totals[k * vocab + v] = scores[k] + logProbs[v];
    });
    const nextScores = Array(numBeams).fill(-Infinity);
    const nextBeams = [];
    const nextCaches = Array.from({ length: numBeams }, () => emptyCache);
    const nextIds = Array(numBeams).fill(startToken);
    for (const [rank, flat] of topIndices(totals, 2 * numBeams).entries()) {
      const beam = Math.floor(flat / vocab);
      const token = flat % vocab;
      const value = totals[flat];
      if (value === -Infinity) break;
      if (stop.has(token)) {
        if (rank < numBeams) {
          const tokens = beams[beam];
          finished.push([sequenceScore(value, tokens.length + 1, lengthPenalty), tokens, "stop"]);
        }
        continue;
      }
      const k = nextBeams.length;
      nextScores[k] = value;
      nextIds[k] = token;
      nextCaches[k] = outputs[beam].cache;
      nextBeams.push([...beams[beam], token]);
      if (nextBeams.length === numBeams) break;
    }
    done = complete(finished, numBeams, Math.max(...nextScores), length, lengthPenalty);
    while (nextBeams.length < numBeams) nextBeams.push([]);
    [scores, beams, caches, ids] = [nextScores, nextBeams, nextCaches, nextIds];
  }
  if (!done) {
    for (let k = 0; k < numBeams; k++) {
      if (scores[k] > -Infinity) {
        finished.push([sequenceScore(scores[k], beams[k].length, lengthPenalty), beams[k], "length"]);
      }
    }
  }
  if (finished.length === 0) finished.push([0, [], "length"]); // budget 0
  let best = finished[0];
  for (const item of finished) if (item[0] > best[0]) best = item; // the first of equal scores
  return { tokens: best[1], finishReason: best[2], score: best[0] };
}

/** Whether no running beam (best summed log-probability `bestRunning`) is likely to do better. */
function complete(finished, numBeams, bestRunning, length, lengthPenalty) {
  if (bestRunning === -Infinity) return true;
  if (finished.length < numBeams) return false;
  const worstKept = finished.map(([score]) => score).sort((a, b) => b - a)[numBeams - 1];
  return worstKept >= sequenceScore(bestRunning, length, lengthPenalty);
}

/** The indices of the `count` largest values, largest first, equal values by lower index (stable). */
function topIndices(values, count) {
  const order = Array.from(values, (_, index) => index);
  order.sort((a, b) => (values[a] > values[b] ? -1 : values[a] < values[b] ? 1 : a - b));
  return order.slice(0, count);
}
