// The library API a user calls: text in, text or vectors out, options checked, the GPT context limit
// respected. Expected tokens come from the export's goldens/end_to_end.json.

import assert from "node:assert/strict";
import { after, before, test } from "node:test";

import {
  InputError,
  loadEngine,
  maxThreads,
  openExport,
  SentenceEncoder,
  TextGenerator,
  TextToText,
} from "../src/index.js";
import { exportDir } from "./helpers.js";

const models = {};

/** The export's end-to-end goldens, read through its checked folder. */
async function goldens(family) {
  const model = models[family];
  return model.folder.readJson(model.manifest.goldens.end_to_end);
}

before(async () => {
  const engine = await loadEngine("native", { threads: 1 });
  for (const family of ["gpt", "t5", "bert"]) {
    models[family] = await openExport(exportDir(family), { engine });
  }
});

after(async () => {
  for (const model of Object.values(models)) await model.close();
});

test("openExport picks the class of the manifest's family", () => {
  assert.ok(models.gpt instanceof TextGenerator);
  assert.ok(models.t5 instanceof TextToText);
  assert.ok(models.bert instanceof SentenceEncoder);
});

test("GPT generate gives the decoded greedy golden", async () => {
  const item = (await goldens("gpt")).greedy.find((row) => row.prompt !== "");
  const text = await models.gpt.generate(item.prompt, {
    maxNewTokens: item.max_new_tokens,
    temperature: 0,
  });
  assert.equal(text, models.gpt.tokenizer.decode(item.output_ids));
  assert.ok(text.length > 0);
});

test("maxNewTokens cuts a generation with finish reason length", async () => {
  const item = (await goldens("gpt")).greedy.find((row) => row.output_ids.length >= 3);
  const result = await models.gpt.generateIds(item.input_ids, { maxNewTokens: 2, temperature: 0 });
  assert.deepEqual(result, { tokens: item.output_ids.slice(0, 2), finishReason: "length" });
  assert.deepEqual(await models.gpt.generateIds(item.input_ids, { maxNewTokens: 0 }), {
    tokens: [],
    finishReason: "length",
  });
});

test("a GPT row grows at most until the context is full", async () => {
  const maxLen = models.gpt.maxLen;
  const word = models.gpt.tokenizer.encode("the")[0];
  for (const length of [maxLen, maxLen - 2]) {
    const prompt = [models.gpt.prefix[0], ...Array(length - 1).fill(word)];
    const { tokens, finishReason } = await models.gpt.generateIds(prompt, {
      maxNewTokens: 64,
      stopTokens: [],
    });
    assert.deepEqual([tokens.length, finishReason], [maxLen - length + 1, "length"]);
  }
  const tooLong = [models.gpt.prefix[0], ...Array(maxLen).fill(word)];
  await assert.rejects(
    models.gpt.generateIds(tooLong),
    (error) => error instanceof InputError && /context is 64/.test(error.message),
  );
});

test("T5 generate gives the decoded greedy golden", async () => {
  const item = (await goldens("t5")).greedy[0];
  assert.deepEqual(models.t5.frame(item.prompt), item.input_ids);
  assert.equal(await models.t5.generate(item.prompt), models.t5.tokenizer.decode(item.output_ids));
});

test("BERT embed gives the golden embedding of a text", async () => {
  const { embeddings } = await goldens("bert");
  const item = embeddings.items[0];
  const vector = await models.bert.embed(item.text);
  assert.ok(vector instanceof Float32Array);
  assert.equal(vector.length, models.bert.config.d_model);
  const diff = Math.max(...item.embedding.map((value, index) => Math.abs(value - vector[index])));
  assert.ok(diff <= embeddings.atol, `max diff ${diff}`);
});

test("bad inputs and options are refused with InputError", async () => {
  const refused = (promise, pattern) =>
    assert.rejects(promise, (error) => error instanceof InputError && pattern.test(error.message));
  await refused(models.gpt.generateIds([1, 100000]), /outside the vocabulary 0 \.\. 399/);
  await refused(models.gpt.generateIds([]), /non-empty array/);
  await refused(models.gpt.generateIds([1], { maxNewTokens: -1 }), /maxNewTokens must be an integer >= 0/);
  await refused(models.gpt.generateIds([1], { stopTokens: [1.5] }), /stopTokens must be token ids/);
  await refused(models.gpt.generate(42), /prompt must be a string/);
  await refused(models.t5.generate(""), /non-empty string/);
  await refused(loadEngine("cuda"), /engine must be one of native, wasm/);
  await refused(loadEngine("native", { threads: 0 }), /threads must be an integer >= 1/);
  for (const threads of [-1, 1.5, 10 ** 6, true, "2", maxThreads() + 1]) {
    await refused(loadEngine("native", { threads }), /threads must be an integer >= 1 and at most \d+/);
  }
  const most = await loadEngine("native", { threads: maxThreads() });
  assert.equal(most.threads, maxThreads());
});

test("the framing comes from the manifest and is the framing of training", () => {
  const text = "The cat sat.";
  const { gpt, bert, t5 } = models;
  assert.deepEqual(gpt.frame(text), [gpt.special.bos, ...gpt.tokenizer.encode(text)]);
  assert.deepEqual(bert.frame(text), [bert.special.cls, ...bert.tokenizer.encode(text), bert.special.sep]);
  assert.deepEqual(t5.frame(text), [...t5.tokenizer.encode(text), t5.special.eos]);
  assert.deepEqual(
    Object.fromEntries(Object.entries(models).map(([family, model]) => [family, model.task])),
    { gpt: "generate", t5: "seq2seq", bert: "encode" },
  );
});

test("maxNewTokens 0 gives the empty continuation, as the Python runtime does", async () => {
  assert.equal(await models.gpt.generate("The cat", { maxNewTokens: 0 }), "");
  assert.equal(await models.t5.generate("the cat", { maxNewTokens: 0 }), "");
  assert.equal(models.gpt.tokenizer.decode([]), "");
});

test("embed takes one text or an array of texts", async () => {
  const texts = ["The cat sat.", "A dog ran.", ""];
  const vectors = await models.bert.embed(texts);
  assert.ok(Array.isArray(vectors) && vectors.length === texts.length);
  for (const [index, text] of texts.entries()) {
    assert.ok(vectors[index] instanceof Float32Array);
    assert.deepEqual(vectors[index], await models.bert.embed(text));
  }
  assert.notDeepEqual(vectors[0], vectors[1]);
  await assert.rejects(
    models.bert.embed([]),
    (error) => error instanceof InputError && /at least one/.test(error.message),
  );
  await assert.rejects(
    models.bert.embed(["fine", 7]),
    (error) => error instanceof InputError && /text 1 must be a string/.test(error.message),
  );
  await assert.rejects(
    models.bert.embed(["fine", "word ".repeat(100)], { truncate: false }),
    (error) => error instanceof InputError && /text 1 has \d+ tokens but the model reads at most/.test(error.message),
  );
});

test("embed cuts a text past maxLength to its first tokens, as the Python runtime does", async (t) => {
  const bert = models.bert;
  const warn = t.mock.method(console, "warn", () => {});
  const long = "the cat sat on the mat . ".repeat(40);
  const ids = bert.frame(long);
  assert.ok(ids.length > bert.maxLength, `${ids.length} ids`);
  const { prefix, suffix } = bert.framing;
  const room = bert.maxLength - prefix.length - suffix.length;
  const kept = [...prefix, ...ids.slice(prefix.length, prefix.length + room), ...suffix];
  assert.deepEqual(await bert.embed(long), await bert.embedIds(kept));
  assert.equal(warn.mock.callCount(), 1);
  assert.match(warn.mock.calls[0].arguments[0], new RegExp(`text: ${ids.length} tokens`));
  await assert.rejects(
    bert.embed(long, { truncate: false }),
    (error) => error instanceof InputError && /reads at most/.test(error.message),
  );
  await assert.rejects(bert.embed(long, { truncate: "yes" }), /truncate must be true or false/);
});
