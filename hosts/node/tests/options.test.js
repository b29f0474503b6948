// The option table (src/options.js, the Python GenerationOptions by name: tests/test_node_options.py)
// is what the model classes take: each class takes its task's options and refuses another task's, saying
// why; every option of a task reaches its model.

import assert from "node:assert/strict";
import { after, before, test } from "node:test";

import { InputError, loadEngine, openExport, OPTIONS, optionNames } from "../src/index.js";
import { exportDir } from "./helpers.js";

const models = {};
const TASKS = { gpt: "generate", t5: "seq2seq", bert: "encode" };
// A valid value of every option (a new option needs one here).
const SAMPLES = {
  maxNewTokens: 3,
  temperature: 0,
  topK: 5,
  topP: 0.9,
  seed: 2,
  stop: ["."],
  stopTokens: [],
  numBeams: 2,
  lengthPenalty: 0.5,
  truncate: false,
};

/** The call that takes a family's options. */
function run(family, options) {
  return family === "bert"
    ? models.bert.embed("The cat sat.", options)
    : models[family].generate("The cat sat.", options);
}

before(async () => {
  const engine = await loadEngine("native", { threads: 1 });
  for (const family of Object.keys(TASKS)) models[family] = await openExport(exportDir(family), { engine });
});

after(async () => {
  for (const model of Object.values(models)) await model.close();
});

test("every option has a sample and a camelCase name", () => {
  assert.deepEqual(Object.values(OPTIONS).map((option) => option.node).sort(), Object.keys(SAMPLES).sort());
  for (const [name, option] of Object.entries(OPTIONS)) {
    assert.equal(option.node, name.replace(/_([a-z])/g, (_, letter) => letter.toUpperCase()));
  }
});

test("each class takes its task's options and refuses the others, saying why", async () => {
  for (const [family, task] of Object.entries(TASKS)) {
    const names = optionNames(task);
    for (const option of Object.values(OPTIONS)) {
      const options = { [option.node]: SAMPLES[option.node] };
      if (names.includes(option.node)) {
        await run(family, options); // taken
        continue;
      }
      await assert.rejects(
        run(family, options),
        (error) =>
          error instanceof InputError &&
          error.message.includes(`has no option "${option.node}" (${option.whyNot})`),
        `${family} ${option.node}`,
      );
    }
  }
});

test("lengthPenalty reaches beam search: it changes which beam wins here", async () => {
  const short = await models.t5.generate("While.", { numBeams: 6, lengthPenalty: -10 });
  const long = await models.t5.generate("While.", { numBeams: 6, lengthPenalty: 10 });
  assert.notEqual(short, long);
  assert.ok(short.length < long.length, `${short} | ${long}`);
});
