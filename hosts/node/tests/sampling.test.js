// Sampling as the Python runtime samples: the options, the sampler on fixed logits against tokens
// Python's Sampler chose when this test was written, and seeded generations on the reference exports
// (batches equal one by one, defaults from the manifest). tests/test_node_sampling.py compares with a
// live Python side by side.

import assert from "node:assert/strict";
import { after, before, test } from "node:test";

import { InputError, loadEngine, ManifestError, openExport, Sampler, samplingConfig } from "../src/index.js";
import { exportDir } from "./helpers.js";

const models = {};

before(async () => {
  const engine = await loadEngine("native", { threads: 1 });
  for (const family of ["gpt", "t5"]) models[family] = await openExport(exportDir(family), { engine });
});

after(async () => {
  for (const model of Object.values(models)) await model.close();
});

// (0, 0.5, 1, 1.5, 2) repeated over 12 ids: ties everywhere, so the order of equal logits matters too.
const LOGITS = Float32Array.from({ length: 12 }, (_, index) => (index % 5) * 0.5);
const REVERSED = LOGITS.slice().reverse();

test("the sampler picks the tokens Python's Sampler picked on the same logits", () => {
  const cases = [
    [
      { temperature: 0.9, topK: 20, topP: 0.9, seed: 7 },
      [
        [8, 8],
        [1, 0],
        [2, 4],
        [4, 2],
        [9, 7],
        [1, 0],
        [4, 2],
        [7, 9],
      ],
    ],
    [
      { temperature: 2.0, topK: 0, topP: 1.0, seed: 2n ** 64n + 7n },
      [
        [11, 10],
        [8, 8],
        [6, 5],
        [10, 11],
        [11, 10],
        [3, 3],
        [6, 5],
        [6, 5],
      ],
    ],
    [
      { temperature: 1.0, topK: 3, topP: 1.0, seed: 0 },
      [
        [9, 7],
        [4, 2],
        [4, 2],
        [4, 2],
        [3, 3],
        [3, 3],
        [9, 7],
        [9, 7],
      ],
    ],
  ];
  for (const [options, expected] of cases) {
    const sampler = new Sampler(samplingConfig(options), 2);
    const got = expected.map(() => [sampler.choose(LOGITS, 0), sampler.choose(REVERSED, 1)]);
    assert.deepEqual(
      got,
      expected,
      JSON.stringify(options, (_, v) => (typeof v === "bigint" ? `${v}` : v)),
    );
  }
});

test("greedy and topK 1 take the first largest logit; a vanishing temperature the largest", () => {
  for (const options of [{ temperature: 0 }, { temperature: 3, topK: 1, seed: 1 }]) {
    const sampler = new Sampler(samplingConfig(options));
    for (let i = 0; i < 5; i++) assert.equal(sampler.choose(LOGITS), 4, JSON.stringify(options));
  }
  // 1e-310 overflows the division: the shifted path keeps only the maximum (ties would share it).
  const sampler = new Sampler(samplingConfig({ temperature: 1e-310, seed: 2 }));
  const unique = Float32Array.from([0.5, -1, 3, 2.999, 1]);
  for (let i = 0; i < 5; i++) assert.equal(sampler.choose(unique), 2);
});

test("sampling options are checked and unset ones take the defaults", () => {
  assert.deepEqual(samplingConfig({}, { temperature: 0.5, top_k: 3, top_p: 0.9 }), {
    temperature: 0.5,
    topK: 3,
    topP: 0.9,
    seed: undefined,
    greedy: false,
  });
  assert.equal(samplingConfig({ temperature: 0 }, { temperature: 1 }).greedy, true);
  const bad = [
    [{ temperature: -1 }, /temperature must be a number >= 0/],
    [{ temperature: NaN }, /temperature/],
    [{ temperature: "hot" }, /temperature/],
    [{ topK: 1.5 }, /topK must be an integer >= 0/],
    [{ topP: 0 }, /topP must be a number in \(0, 1\]/],
    [{ topP: 1.2 }, /topP/],
    [{ seed: -1 }, /seed must be an integer >= 0/],
    [{ seed: 2 ** 60 }, /pass it as a BigInt/],
  ];
  for (const [options, message] of bad) assert.throws(() => samplingConfig(options), message);
});

test("a seeded GPT generation repeats, and a batch equals its prompts one by one", async () => {
  const gpt = models.gpt;
  const options = { temperature: 0.9, topK: 20, topP: 0.9, seed: 7, maxNewTokens: 16 };
  const prompts = ["The cat", "a dog ran", ""];
  const batch = await gpt.generate(prompts, options);
  assert.equal(batch.length, 3);
  for (const [index, prompt] of prompts.entries()) {
    assert.equal(batch[index], await gpt.generate(prompt, options));
  }
  const rows = prompts.map((prompt) => gpt.frame(prompt));
  const results = await gpt.generateIds(rows, options);
  assert.deepEqual(results[1], await gpt.generateIds(rows[1], options));
  assert.equal(gpt.tokenizer.decode(results[0].tokens), batch[0]);
  // Other seeds give other continuations (all eight alike would mean the seed is ignored).
  const seeds = [0, 1, 2, 3, 4, 5, 6, 7];
  const texts = new Set();
  for (const seed of seeds) texts.add(await gpt.generate("The cat", { ...options, seed, stopTokens: [] }));
  assert.ok(texts.size > 1, `${texts.size} distinct texts for ${seeds.length} seeds`);
});

test("GPT's defaults come from its manifest: temperature 1 samples unless told 0", async () => {
  const gpt = models.gpt;
  assert.equal(gpt.generation.temperature, 1);
  const greedy = await gpt.generate("The cat", { temperature: 0, stopTokens: [], maxNewTokens: 20 });
  const texts = [];
  for (let i = 0; i < 4; i++) texts.push(await gpt.generate("The cat", { stopTokens: [], maxNewTokens: 20 }));
  assert.ok(
    texts.some((text) => text !== greedy),
    "four unseeded generations all greedy",
  );
});

test("T5 samples with a seed, greedy by its manifest's default", async () => {
  const t5 = models.t5;
  const options = { temperature: 1.2, seed: 3, maxNewTokens: 12 };
  const texts = ["The cat chased the dog.", "a bird sang"];
  const batch = await t5.generate(texts, options);
  assert.deepEqual(batch, [await t5.generate(texts[0], options), await t5.generate(texts[1], options)]);
  const { end_to_end: file } = t5.manifest.goldens;
  const item = (await t5.folder.readJson(file)).greedy[0];
  assert.deepEqual((await t5.generateIds(item.input_ids)).tokens, item.output_ids);
  await assert.rejects(
    t5.generate("x", { numBeams: 4, seed: 1 }),
    /beam search chooses tokens deterministically/,
  );
});

test("misspelt and snake_case options are refused, naming the Node name", async () => {
  await assert.rejects(models.gpt.generate("The cat", { max_new_tokens: 3 }), (error) => {
    assert.ok(error instanceof InputError);
    assert.match(
      error.message,
      /no option "max_new_tokens" \(the Node name of max_new_tokens is maxNewTokens\)/,
    );
    return true;
  });
  await assert.rejects(models.gpt.generateIds([1], { stop: ["x"] }), /no option "stop"/);
  await assert.rejects(models.t5.generate("x", { top_k: 3 }), /topK/);
  await assert.rejects(models.gpt.generate("x", { stop: "x" }), /stop must be an array of strings/);
  await assert.rejects(models.gpt.generate([]), /give at least one prompt/);
  await assert.rejects(models.gpt.generate(["ok", 3]), /prompt 1 must be a string/);
});

test("stop strings end the text before them", async () => {
  const gpt = models.gpt;
  const options = { temperature: 0, maxNewTokens: 30, stopTokens: [] };
  const full = await gpt.generate("The cat", options);
  const word = full.trim().split(" ")[1];
  assert.ok(word, `a greedy text of two words or more: ${JSON.stringify(full)}`);
  const stop = ` ${word}`;
  const text = await gpt.generate("The cat", { ...options, stop: [stop] });
  assert.equal(text, full.slice(0, full.indexOf(stop)));
});

test("T5 beam search: one beam is greedy, more carry a score no worse than greedy's", async () => {
  const t5 = models.t5;
  const source = t5.frame("The cat chased the dog.");
  const greedy = await t5.generateIds(source);
  const one = await t5.beamSearchIds(source, { numBeams: 1 });
  assert.deepEqual([one.tokens, one.finishReason], [greedy.tokens, greedy.finishReason]);
  const four = await t5.generateIds(source, { numBeams: 4 });
  assert.ok(Number.isFinite(four.score) && four.score <= 0, `${four.score}`);
  assert.ok(four.score >= one.score - 1e-9, `beam ${four.score} < greedy ${one.score}`);
  assert.deepEqual(await t5.generate(["The cat chased the dog."], { numBeams: 4 }), [
    t5.tokenizer.decode(four.tokens),
  ]);
  await assert.rejects(t5.generateIds(source, { numBeams: 0 }), /numBeams must be an integer >= 1/);
  await assert.rejects(t5.beamSearchIds(source, { numBeams: 1000 }), /at most the vocabulary size 388/);
  await assert.rejects(t5.generateIds(source, { numBeams: 2, lengthPenalty: 11 }), /lengthPenalty must be/);
});

test("the classes carry the Python runtime's names; the old ones are aliases", async () => {
  const api = await import("../src/index.js");
  assert.equal(api.SentenceEncoder, api.TextEncoder);
  assert.equal(api.load, api.openExport);
  assert.deepEqual(Object.fromEntries(Object.entries(api.CLASSES).map(([task, cls]) => [task, cls.name])), {
    generate: "TextGenerator",
    encode: "TextEncoder",
    seq2seq: "TextToText",
  });
});

test("the wasm engine samples the same tokens as the native one", async () => {
  const wasm = await openExport(exportDir("gpt"), { engine: "wasm" });
  try {
    for (const seed of [7, 2n ** 70n]) {
      const options = { temperature: 0.9, topK: 20, topP: 0.9, seed, maxNewTokens: 20, stopTokens: [] };
      const row = models.gpt.frame("The cat");
      assert.deepEqual(await wasm.generateIds(row, options), await models.gpt.generateIds(row, options));
    }
  } finally {
    await wasm.close();
  }
});

test("bad sampling defaults in a manifest are a ManifestError", () => {
  assert.throws(
    () => samplingConfig({}, { temperature: -2 }),
    (error) => {
      assert.ok(error instanceof ManifestError, error.name);
      assert.match(error.message, /generation defaults: temperature must be/);
      return true;
    },
  );
  // With every option given, the defaults go unread.
  assert.equal(samplingConfig({ temperature: 0, topK: 0, topP: 1 }, { temperature: -2 }).greedy, true);
});
