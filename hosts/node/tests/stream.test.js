// TextGenerator.stream: an async iterator of text pieces that join to generate's text, holding back a
// character split across byte-level tokens and a tail that may begin a stop string (Python's stream).

import assert from "node:assert/strict";
import { after, before, test } from "node:test";

import { InputError, loadEngine, openExport } from "../src/index.js";
import { exportDir } from "./helpers.js";

let gpt;

before(async () => {
  gpt = await openExport(exportDir("gpt"), { engine: await loadEngine("native", { threads: 1 }) });
});

after(() => gpt.close());

async function pieces(prompt, options) {
  const out = [];
  for await (const piece of gpt.stream(prompt, options)) out.push(piece);
  return out;
}

test("the pieces join to generate's text, greedy and seeded", async () => {
  for (const options of [
    { temperature: 0, maxNewTokens: 20 },
    { temperature: 0.9, topK: 20, topP: 0.9, seed: 7, maxNewTokens: 20 },
  ]) {
    const got = await pieces("The cat", options);
    assert.ok(got.length > 1, `${got.length} pieces`);
    assert.equal(got.join(""), await gpt.generate("The cat", options));
  }
});

test("a character split across tokens waits for its last byte", async () => {
  // Hot sampling draws lone bytes: parts of a character, and bytes that never complete one.
  let multiByte = 0;
  for (const seed of [0, 1, 2, 3]) {
    const options = { temperature: 4, seed, stopTokens: [], maxNewTokens: 40 };
    const got = await pieces("The cat", options);
    const text = await gpt.generate("The cat", options);
    assert.equal(got.join(""), text);
    // Only the last piece may end in U+FFFD: before the end, an incomplete character is held back.
    for (const piece of got.slice(0, -1)) assert.ok(!piece.endsWith("\ufffd"), JSON.stringify(got));
    multiByte += /[^\x00-\x7f]/.test(text) ? 1 : 0;
  }
  assert.ok(multiByte >= 2, `${multiByte} of 4 texts had characters past ASCII`);
});

test("stop strings end the stream and are never partly shown", async () => {
  const options = { temperature: 1, seed: 11, maxNewTokens: 30, stop: [" the", "."] };
  const got = await pieces("a dog", options);
  assert.equal(got.join(""), await gpt.generate("a dog", options));
  for (const piece of got) assert.ok(!piece.includes(" the") && !piece.includes("."), JSON.stringify(got));
});

test("stream checks its prompt and options at the call, before the model runs", async () => {
  assert.throws(() => gpt.stream(["The cat"]), InputError);
  assert.throws(() => gpt.stream("The cat", { topP: 2 }), /topP/);
  assert.throws(() => gpt.stream("The cat", { maxNewTokens: -1 }), /maxNewTokens/);
  assert.throws(() => gpt.stream("the ".repeat(100)), /the model's context is 64; shorten it/);
  assert.deepEqual(await pieces("The cat", { maxNewTokens: 0 }), []);
});
