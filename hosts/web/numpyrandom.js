/**
 * numpy's default generator, `np.random.default_rng(seed).random()`, in JavaScript, so a seed draws the
 * same numbers in the page as in the Python runtime (runtime/sampling.py) and both sample the same tokens.
 *
 * - SeedSequence (numpy/random/bit_generator.pyx, after M. O'Neill's seed_seq): the seed's 32-bit words
 *   are hashed into a pool of 4 words, which generate_state stretches into the PCG64 state.
 * - PCG64 (numpy/random/src/pcg64): a 128-bit LCG, state = state * M + inc, output XSL-RR: the xor of the
 *   state's halves rotated right by its top 6 bits (O'Neill 2014, "PCG: A Family of Simple Fast
 *   Space-Efficient Statistically Good Algorithms for Random Number Generation").
 * - random(): the top 53 bits of the next 64-bit output over 2^53.
 *
 * BigInt arithmetic throughout: sampling needs one draw per token, so speed does not matter.
 */

const MASK32 = 0xffffffffn;
const MASK64 = (1n << 64n) - 1n;
const MASK128 = (1n << 128n) - 1n;
const POOL_SIZE = 4;
const INIT_A = 0x43b0d7e5n;
const MULT_A = 0x931e8875n;
const INIT_B = 0x8b51f9ddn;
const MULT_B = 0x58f38dedn;
const MIX_MULT_L = 0xca01f9ddn;
const MIX_MULT_R = 0x4973f715n;
const XSHIFT = 16n;
const PCG_MULTIPLIER = (0x2360ed051fc65da4n << 64n) | 0x4385df649fccf645n;

/** A non-negative integer seed as 32-bit words, least significant first (0 is one word). */
function seedWords(seed) {
  let n = BigInt(seed);
  const words = [];
  do {
    words.push(n & MASK32);
    n >>= 32n;
  } while (n > 0n);
  return words;
}

/** SeedSequence(seed).generate_state(words) as uint32 BigInts. */
export function seedSequenceState(seed, words) {
  const entropy = seedWords(seed);
  let hashConst = INIT_A;
  const hashmix = (value) => {
    value = (value ^ hashConst) & MASK32;
    hashConst = (hashConst * MULT_A) & MASK32;
    value = (value * hashConst) & MASK32;
    return value ^ (value >> XSHIFT);
  };
  const mix = (x, y) => {
    let result = (MIX_MULT_L * x - MIX_MULT_R * y) & MASK32;
    return result ^ (result >> XSHIFT);
  };
  const pool = [];
  for (let i = 0; i < POOL_SIZE; i++) pool.push(hashmix(i < entropy.length ? entropy[i] : 0n));
  for (let src = 0; src < POOL_SIZE; src++) {
    for (let dst = 0; dst < POOL_SIZE; dst++) if (src !== dst) pool[dst] = mix(pool[dst], hashmix(pool[src]));
  }
  for (let src = POOL_SIZE; src < entropy.length; src++) {
    for (let dst = 0; dst < POOL_SIZE; dst++) pool[dst] = mix(pool[dst], hashmix(entropy[src]));
  }
  let constB = INIT_B;
  const state = [];
  for (let i = 0; i < words; i++) {
    let value = (pool[i % POOL_SIZE] ^ constB) & MASK32;
    constB = (constB * MULT_B) & MASK32;
    value = (value * constB) & MASK32;
    state.push(value ^ (value >> XSHIFT));
  }
  return state;
}

/** `np.random.default_rng(seed)`: an object whose `random()` gives numpy's doubles in [0, 1). */
export function defaultRng(seed) {
  if (!Number.isSafeInteger(seed) || seed < 0)
    throw new RangeError(`seed must be an integer >= 0, got ${seed}`);
  const words = seedSequenceState(seed, 8); // generate_state(4, uint64), little-endian word pairs
  const u64 = [0, 1, 2, 3].map((i) => words[2 * i] | (words[2 * i + 1] << 32n));
  const initState = (u64[0] << 64n) | u64[1];
  const initSeq = (u64[2] << 64n) | u64[3];
  const inc = ((initSeq << 1n) | 1n) & MASK128;
  let state = 0n;
  const step = () => {
    state = (state * PCG_MULTIPLIER + inc) & MASK128;
  };
  step();
  state = (state + initState) & MASK128;
  step();
  const next64 = () => {
    step();
    const xored = ((state >> 64n) ^ state) & MASK64;
    const rot = state >> 122n;
    return ((xored >> rot) | (xored << ((64n - rot) & 63n))) & MASK64;
  };
  return { random: () => Number(next64() >> 11n) / 9007199254740992 };
}
