// The KV-cache layer (src/kvcache.js) on its own: both manifest layouts, what a step asks ONNX Runtime for
// (an in-place cache bound as pre-allocated outputs only on an engine that writes them), and the room the
// goldens of an in-place decoder are given. A real in-place decoder (`onnxformer optimize`) runs in
// tests/test_node_optimized.py, which makes one with Python.

import assert from "node:assert/strict";
import { readFile } from "node:fs/promises";
import path from "node:path";
import { test } from "node:test";

import { CacheLayout, withRoom } from "../src/kvcache.js";
import { IN_PLACE_LAYOUT } from "../src/manifest.js";
import { ManifestError } from "../src/index.js";
import { exportDir } from "./helpers.js";

const GPT_CACHE = JSON.parse(await readFile(path.join(exportDir("gpt"), "manifest.json"), "utf-8")).kv_cache;
const T5_CACHE = JSON.parse(await readFile(path.join(exportDir("t5"), "manifest.json"), "utf-8")).kv_cache;
const IN_PLACE = { ...GPT_CACHE, layout: IN_PLACE_LAYOUT };

/** An engine stand-in: tensors are plain objects; `bindsOutputs` as asked. */
const fakeEngine = (bindsOutputs) => ({
  bindsOutputs,
  tensor: (dtype, data, dims) => ({ dtype, data, dims }),
});

/** A graph stand-in that records what each run was asked and answers a tensor per output asked for. */
function fakeGraph(engine) {
  const calls = [];
  return {
    engine,
    calls,
    async run(feeds, fetches) {
      calls.push({ feeds, fetches });
      const names = Array.isArray(fetches) ? fetches : Object.keys(fetches);
      const bound = (name) => !Array.isArray(fetches) && fetches[name] !== null;
      return Object.fromEntries(names.map((name) => [name, bound(name) ? fetches[name] : { name }]));
    },
  };
}

test("the plain layout: an empty cache (1, H, 0, Dh), presents asked for and fed back as pasts", async () => {
  const layout = new CacheLayout(GPT_CACHE, { cross: false });
  assert.equal(layout.inPlace, false);
  const engine = fakeEngine(true); // a binding engine binds nothing for this layout
  const cache = layout.empty(engine, 99);
  assert.deepEqual(cache[layout.pastNames[0]].dims, [1, GPT_CACHE.kv_heads, 0, GPT_CACHE.head_dim]);
  const graph = fakeGraph(engine);
  const step = await layout.run(graph, { input_ids: "ids" }, cache, ["logits"]);
  assert.deepEqual(graph.calls[0].fetches, ["logits", ...layout.presentNames]);
  assert.deepEqual(step.cache[layout.pastNames[1]], { name: layout.presentNames[1] });
});

test("an in-place cache is bound on an engine that writes pre-allocated outputs", async () => {
  const layout = new CacheLayout(IN_PLACE, { cross: false });
  assert.equal(layout.inPlace, true);
  const engine = fakeEngine(true);
  const cache = layout.empty(engine, 7);
  const { kv_heads: heads, head_dim: headDim } = GPT_CACHE;
  for (const name of layout.pastNames) {
    assert.deepEqual(cache[name].dims, [1, heads, 7, headDim]);
    assert.ok(cache[name].data.length === heads * 7 * headDim && cache[name].data.every((v) => v === 0));
  }
  const graph = fakeGraph(engine);
  const step = await layout.run(graph, { input_ids: "ids" }, cache, ["logits"]);
  const { feeds, fetches } = graph.calls[0];
  assert.equal(fetches.logits, null);
  layout.presentNames.forEach((name, index) => {
    const buffer = cache[layout.pastNames[index]];
    assert.equal(fetches[name], buffer, `${name} is bound to the buffer fed as its past`);
    assert.equal(feeds[layout.pastNames[index]], buffer);
  });
  assert.equal(step.cache, cache, "the next step gets the same buffers");
  assert.deepEqual(step.outputs.logits, { name: "logits" });
});

test("an in-place cache on an engine that does not write pre-allocated outputs runs unbound", async () => {
  const layout = new CacheLayout(IN_PLACE, { cross: false });
  const engine = fakeEngine(false); // onnxruntime-web: copies in, would not copy a bound output back
  const graph = fakeGraph(engine);
  const cache = layout.empty(engine, 5);
  const step = await layout.run(graph, {}, cache, ["logits"]);
  assert.deepEqual(graph.calls[0].fetches, ["logits", ...layout.presentNames]);
  assert.deepEqual(
    layout.pastNames.map((name) => step.cache[name].name),
    layout.presentNames,
  );
});

test("an in-place cache is refused for an encoder-decoder, and other layouts by name", () => {
  assert.throws(
    () => new CacheLayout({ ...T5_CACHE, layout: IN_PLACE_LAYOUT }, { cross: true }),
    (error) => error instanceof ManifestError && /decoders without an encoder/.test(error.message),
  );
  const transposed = { ...GPT_CACHE, layout: ["batch", "max_sequence", "heads", "head_dim"] };
  assert.throws(
    () => new CacheLayout(transposed, { cross: false }),
    (error) => error instanceof ManifestError && /layout must be .* or .*max_sequence/.test(error.message),
  );
});

test("withRoom gives each past `room` zeroed positions after its own, other inputs unchanged", () => {
  const [batch, heads, past, headDim, room] = [2, 3, 2, 4, 3];
  const data = Float32Array.from({ length: batch * heads * past * headDim }, (_, i) => i + 1);
  const ids = { dtype: "int64", data: new BigInt64Array(batch * room), dims: [batch, room] };
  const tensors = { input_ids: ids, past: { dtype: "float32", data, dims: [batch, heads, past, headDim] } };
  const padded = withRoom(tensors, ["past"], room);
  assert.equal(padded.input_ids, ids);
  assert.deepEqual(padded.past.dims, [batch, heads, past + room, headDim]);
  const [before, after] = [past * headDim, (past + room) * headDim];
  for (let row = 0; row < batch * heads; row++) {
    const grown = padded.past.data.subarray(row * after, (row + 1) * after);
    assert.deepEqual(grown.subarray(0, before), data.subarray(row * before, (row + 1) * before));
    assert.ok(grown.subarray(before).every((value) => value === 0));
  }
});
