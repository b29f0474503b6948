// numpy's default_rng in JavaScript: SeedSequence's pool and state words, PCG64's state and increment,
// and the first draws, against values numpy 2.4 printed when this test was written (the side-by-side
// comparison with a live numpy is tests/test_node_sampling.py).

import assert from "node:assert/strict";
import { test } from "node:test";

import { defaultRng, InputError, PCG64, SeedSequence } from "../src/index.js";

test("SeedSequence mixes a seed into numpy's pool and state words", () => {
  const sequence = new SeedSequence(42);
  assert.deepEqual(sequence.pool, [1662858758, 128880814, 1875164712, 753753205]);
  assert.deepEqual(sequence.generateState(4), [3444837047, 2669555309, 2046530742, 3581440988]);
  // A seed of five 32-bit words stirs the words past the pool's four in.
  assert.deepEqual(
    new SeedSequence(2n ** 128n + 12345n).generateState(4),
    [1457248422, 358904087, 711457119, 482272698],
  );
});

test("PCG64 starts from numpy's state and increment", () => {
  const generator = new PCG64(new SeedSequence(42));
  assert.equal(generator.state, 274674114334540486603088602300644985544n);
  assert.equal(generator.inc, 332724090758049132448979897138935081983n);
});

test("default_rng(seed).random() gives numpy's doubles", () => {
  const expected = {
    // keys are decimal strings: a number key past 2**53 would lose its digits
    0: [0.6369616873214543, 0.2697867137638703, 0.04097352393619469],
    1: [0.5118216247002567, 0.9504636963259353, 0.14415961271963373],
    7: [0.625095466604667, 0.8972138009695755, 0.7756856902451935],
    42: [0.7739560485559633, 0.4388784397520523, 0.8585979199113825],
    4294967301: [0.7742041803738812, 0.47072268318809307, 0.6958803443421149],
    "340282366920938463463374607431768223801": [0.37707540876459267, 0.6895475248090975, 0.7434723509594571],
  };
  for (const [seed, draws] of Object.entries(expected)) {
    const rng = defaultRng(BigInt(seed));
    assert.deepEqual([rng.random(), rng.random(), rng.random()], draws, `seed ${seed}`);
  }
  // A safe-integer number and the same BigInt are one seed.
  assert.equal(defaultRng(4294967301).random(), defaultRng(4294967301n).random());
});

test("draws lie in [0, 1); no seed means fresh entropy", () => {
  const rng = defaultRng(3);
  for (let i = 0; i < 1000; i++) {
    const value = rng.random();
    assert.ok(value >= 0 && value < 1, `${value}`);
  }
  assert.notEqual(defaultRng().random(), defaultRng().random());
});

test("bad seeds are refused with InputError", () => {
  for (const seed of [-1, 1.5, "7", -3n, true]) {
    assert.throws(() => defaultRng(seed), InputError, `${String(seed)}`);
  }
  assert.throws(() => defaultRng(2 ** 64), /past 2\*\*53 .* pass it as a BigInt/);
});
