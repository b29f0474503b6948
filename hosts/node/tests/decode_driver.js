// The Node side of tests/test_node_optimized.py and benchmarks/hosts_decode.py: reads one JSON request on
// stdin, writes one JSON answer.
//   {"op": "steps", "bound": DIR, "plain": DIR, "engine": E, "ids": [...], "steps": N}
//     N greedy steps of the in-place folder `bound` beside its plain export `plain`, step by step:
//     -> {"engine", "bindsOutputs", "steps": [{"logits", "cache", "sameBuffers", "untouched"}]}
//     (max |diff| of the logits and of the written cache positions to the plain graph's, whether each cache
//     tensor is still the buffer made before the first step, whether the positions not yet written are 0)
//   {"op": "time", "folders": {NAME: DIR}, "engines": [E, ...], "prompt": [...], "newTokens": N,
//    "repeats": R, "threads": T}
//     -> {"rows": [{"folder", "engine", "prefill": [R ms], "step": [R * N ms], "tokens"}]}
//     greedy generateIds of N + 1 tokens, the prompt's step and each decode step timed; the models
//     alternate, the order reversed every other repetition, after one warm-up run each

import { performance } from "node:perf_hooks";

import { argmax, lastPosition } from "../src/decoding.js";
import { openExport } from "../src/index.js";

const chunks = [];
for await (const chunk of process.stdin) chunks.push(chunk);
const request = JSON.parse(Buffer.concat(chunks).toString("utf-8"));

function maxDiff(a, b) {
  let diff = 0;
  for (let i = 0; i < a.length; i++) diff = Math.max(diff, Math.abs(a[i] - b[i]));
  return diff;
}

/** One step of `model` through its public parts: the cache layout and the decoder graph. */
async function step(model, ids, cache, total) {
  const feeds = { input_ids: model.engine.ids(ids), attention_mask: model.engine.ones(total) };
  return model.cache.run(model.graphs.decoder, feeds, cache, [model.logits]);
}

async function steps() {
  const options = { engine: request.engine, threads: 1 };
  const [bound, plain] = [await openExport(request.bound, options), await openExport(request.plain, options)];
  try {
    let ids = request.ids;
    const length = ids.length + request.steps;
    const first = bound.cache.empty(bound.engine, length);
    let [cache, plainCache] = [first, plain.cache.empty(plain.engine)];
    let total = ids.length;
    const report = [];
    for (let index = 0; index < request.steps; index++) {
      const got = await step(bound, ids, cache, total);
      const want = await step(plain, ids, plainCache, total);
      const logits = lastPosition(got.outputs[bound.logits]);
      let cacheDiff = 0;
      let untouched = true;
      for (const name of bound.cache.pastNames) {
        const buffer = got.cache[name].data; // (1, H, length, Dh)
        const written = want.cache[name].data; // (1, H, total, Dh)
        const [, heads, , headDim] = want.cache[name].dims;
        for (let head = 0; head < heads; head++) {
          const row = buffer.subarray(head * length * headDim, (head + 1) * length * headDim);
          const part = written.subarray(head * total * headDim, (head + 1) * total * headDim);
          cacheDiff = Math.max(cacheDiff, maxDiff(row.subarray(0, total * headDim), part));
          untouched &&= row.subarray(total * headDim).every((value) => value === 0);
        }
      }
      report.push({
        logits: maxDiff(logits, lastPosition(want.outputs[plain.logits])),
        cache: cacheDiff,
        sameBuffers: bound.cache.pastNames.every((name) => got.cache[name].data === first[name].data),
        untouched,
      });
      [cache, plainCache] = [got.cache, want.cache];
      ids = [argmax(logits)];
      total += ids.length;
    }
    return { engine: bound.engine.name, bindsOutputs: bound.engine.bindsOutputs, steps: report };
  } finally {
    await Promise.all([bound.close(), plain.close()]);
  }
}

/**
 * Per (folder, engine): greedy generateIds of `newTokens` + 1 tokens from `prompt`, the decoder's runs
 * timed where they start: each interval between two starts is one decode step as the loop runs it
 * (feeds made, the graph run, the token chosen), the first run (the prompt) left out.
 */
async function time() {
  const { prompt, newTokens, repeats, threads } = request;
  const runs = [];
  for (const [folder, dir] of Object.entries(request.folders)) {
    for (const engine of request.engines) {
      const model = await openExport(dir, { engine, threads });
      const graph = model.graphs.decoder;
      const starts = [];
      const run = graph.run.bind(graph);
      graph.run = (...args) => {
        starts.push(performance.now());
        return run(...args);
      };
      runs.push({ folder, engine, model, starts, prefill: [], step: [] });
    }
  }
  const generate = async ({ model, starts }) => {
    starts.length = 0;
    const options = { maxNewTokens: newTokens + 1, temperature: 0, stopTokens: [] };
    const { tokens } = await model.generateIds(prompt, options);
    starts.push(performance.now()); // the end of the last step
    return { tokens, intervals: starts.slice(1).map((start, index) => start - starts[index]) };
  };
  try {
    for (const run of runs) run.tokens = (await generate(run)).tokens; // warm-up
    for (let repeat = 0; repeat < repeats; repeat++) {
      for (const run of repeat % 2 === 0 ? runs : [...runs].reverse()) {
        const [prefill, ...steps] = (await generate(run)).intervals;
        run.prefill.push(prefill);
        run.step.push(...steps);
      }
    }
    return {
      rows: runs.map(({ folder, engine, prefill, step, tokens }) => ({ folder, engine, prefill, step, tokens })),
    };
  } finally {
    await Promise.all(runs.map((run) => run.model.close()));
  }
}

const ops = { steps, time };
if (!Object.hasOwn(ops, request.op)) throw new Error(`unknown op ${request.op}`);
process.stdout.write(JSON.stringify(await ops[request.op]()));
