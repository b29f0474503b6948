/**
 * numpy's `np.random.default_rng(seed)` in JavaScript, so a seed draws the same numbers in Node as in the
 * Python runtime (onnxformer.runtime.sampling): a SeedSequence turns the seed into PCG64's 128-bit state
 * and increment, and `random()` is PCG64's next 64-bit output >> 11, times 2**-53.
 *
 * Sources (numpy's own, read for the algorithms): numpy/random/bit_generator.pyx (SeedSequence: the
 * hashmix / mix entropy pool of M. E. O'Neill's "seed_seq" design, generate_state), numpy/random/
 * _pcg64.pyx and src/pcg64/pcg64.h (pcg64_set_seed, the 128-bit LCG with XSL-RR output), and
 * src/distributions (next_double). 128-bit arithmetic is BigInt; the pool is 32-bit words (Math.imul).
 */

import { InputError } from "./errors.js";

// SeedSequence's constants (bit_generator.pyx).
const INIT_A = 0x43b0d7e5;
const MULT_A = 0x931e8875;
const INIT_B = 0x8b51f9dd;
const MULT_B = 0x58f38ded;
const MIX_MULT_L = 0xca01f9dd;
const MIX_MULT_R = 0x4973f715;
const XSHIFT = 16;
const POOL_SIZE = 4;

// PCG64 (pcg64.h): PCG_DEFAULT_MULTIPLIER_128.
const MASK64 = (1n << 64n) - 1n;
const MASK128 = (1n << 128n) - 1n;
const PCG_MULTIPLIER = (2549297995355413924n << 64n) + 4865540595714422341n;
const TWO_TO_MINUS_53 = 2 ** -53;

/** A seed as a BigInt >= 0; a number must be a safe integer (larger seeds: pass a BigInt). */
export function checkSeed(seed, { what = "seed" } = {}) {
  if (typeof seed === "bigint") {
    if (seed < 0n) throw new InputError(`${what} must be an integer >= 0, got ${seed}`);
    return seed;
  }
  if (typeof seed !== "number" || !Number.isInteger(seed) || seed < 0) {
    throw new InputError(`${what} must be an integer >= 0 or undefined, got ${JSON.stringify(seed)}`);
  }
  if (!Number.isSafeInteger(seed)) {
    throw new InputError(
      `${what} ${seed} is past 2**53 and not exact as a JavaScript number; pass it as a BigInt (e.g. 2n ** 64n + 5n)`,
    );
  }
  return BigInt(seed);
}

/** An integer >= 0 as little-endian 32-bit words ([0] for 0), numpy's _int_to_uint32_array. */
function uint32Words(value) {
  if (value === 0n) return [0];
  const words = [];
  for (let rest = value; rest > 0n; rest >>= 32n) words.push(Number(rest & 0xffffffffn));
  return words;
}

/** numpy's SeedSequence(entropy) without spawn keys: the 4-word pool and generate_state. */
export class SeedSequence {
  /** @param {bigint|number|undefined} entropy undefined draws 128 bits from the system's CSPRNG */
  constructor(entropy) {
    if (entropy === undefined || entropy === null) {
      const words = crypto.getRandomValues(new Uint32Array(4));
      entropy = words.reduce((total, word, index) => total | (BigInt(word) << BigInt(32 * index)), 0n);
    }
    this.entropy = checkSeed(entropy, { what: "entropy" });
    this.pool = mixEntropy(uint32Words(this.entropy));
  }

  /** `count` 32-bit words of state (numpy's generate_state(count, np.uint32)). */
  generateState(count) {
    const state = new Array(count);
    let hashConst = INIT_B;
    for (let i = 0; i < count; i++) {
      let value = this.pool[i % POOL_SIZE];
      value = (value ^ hashConst) >>> 0;
      hashConst = Math.imul(hashConst, MULT_B) >>> 0;
      value = Math.imul(value, hashConst) >>> 0;
      value = (value ^ (value >>> XSHIFT)) >>> 0;
      state[i] = value;
    }
    return state;
  }

  /** `count` 64-bit words (generate_state(count, np.uint64): pairs of 32-bit words, low word first). */
  generateState64(count) {
    const words = this.generateState(2 * count);
    const state = [];
    for (let i = 0; i < count; i++) state.push(BigInt(words[2 * i]) | (BigInt(words[2 * i + 1]) << 32n));
    return state;
  }
}

function hashmix(value, hashConst) {
  value = (value ^ hashConst[0]) >>> 0;
  hashConst[0] = Math.imul(hashConst[0], MULT_A) >>> 0;
  value = Math.imul(value, hashConst[0]) >>> 0;
  return (value ^ (value >>> XSHIFT)) >>> 0;
}

function mix(x, y) {
  const result = (Math.imul(MIX_MULT_L, x) - Math.imul(MIX_MULT_R, y)) >>> 0;
  return (result ^ (result >>> XSHIFT)) >>> 0;
}

/** SeedSequence.mix_entropy: every entropy word stirred into the 4-word pool. */
function mixEntropy(entropy) {
  const hashConst = [INIT_A];
  const pool = new Array(POOL_SIZE);
  for (let i = 0; i < POOL_SIZE; i++) pool[i] = hashmix(i < entropy.length ? entropy[i] : 0, hashConst);
  for (let src = 0; src < POOL_SIZE; src++) {
    for (let dst = 0; dst < POOL_SIZE; dst++) {
      if (src !== dst) pool[dst] = mix(pool[dst], hashmix(pool[src], hashConst));
    }
  }
  for (let src = POOL_SIZE; src < entropy.length; src++) {
    for (let dst = 0; dst < POOL_SIZE; dst++) pool[dst] = mix(pool[dst], hashmix(entropy[src], hashConst));
  }
  return pool;
}

/** numpy's PCG64 bit generator: a 128-bit LCG (state, odd increment) read through XSL-RR. */
export class PCG64 {
  /** @param {SeedSequence} seedSequence */
  constructor(seedSequence) {
    const [seedHigh, seedLow, incHigh, incLow] = seedSequence.generateState64(4);
    // pcg64_set_seed -> pcg_setseq_128_srandom_r(state = seed, sequence = inc).
    this.inc = ((((incHigh << 64n) | incLow) << 1n) | 1n) & MASK128;
    this.state = 0n;
    this.#step();
    this.state = (this.state + ((seedHigh << 64n) | seedLow)) & MASK128;
    this.#step();
  }

  #step() {
    this.state = (this.state * PCG_MULTIPLIER + this.inc) & MASK128;
  }

  /** The next 64-bit output, a BigInt. */
  nextUint64() {
    this.#step();
    const high = this.state >> 64n;
    const xored = (high ^ this.state) & MASK64;
    const rotation = high >> 58n; // state >> 122
    return ((xored >> rotation) | (xored << ((64n - rotation) & 63n))) & MASK64;
  }
}

/** numpy's Generator over PCG64, the part the sampler uses: `random()`. */
export class Generator {
  constructor(bitGenerator) {
    this.bitGenerator = bitGenerator;
  }

  /** A double in [0, 1): 53 random bits, as numpy's next_double. */
  random() {
    return Number(this.bitGenerator.nextUint64() >> 11n) * TWO_TO_MINUS_53;
  }
}

/** `np.random.default_rng(seed)`: the same draws as numpy for the same seed (undefined: fresh entropy). */
export function defaultRng(seed) {
  return new Generator(new PCG64(new SeedSequence(seed)));
}
