// The Node side of tests/test_node_sampling.py: reads one JSON request on stdin, writes one JSON answer.
//   {"op": "rng", "seeds": ["0", "42", ...], "count": N}            -> {"draws": [[N doubles], ...]}
//   {"op": "sample", "vocab": V, "steps": [[base64 float32 (B, V)], ...], "batch": B, "configs": [...]}
//                                                                     -> {"tokens": [per config (steps, B)]}
//   {"op": "beam", "vocab": V, "table": [[base64 float32 (V, V)] per length], "cases": [...]}
//     logits of a fake decoder: table[total - 1] row `last token` -> {"results": [...]}
//   {"op": "generate", "dir": DIR, "engine"?: "native"|"wasm", "calls": [{"method", "input", "options"}]}
//                                                                     -> {"results": [...]}
// Seeds travel as decimal strings (BigInt here), so seeds past 2**53 stay exact.

import { beamSearch } from "../src/beam.js";
import { openExport } from "../src/index.js";
import { defaultRng } from "../src/rng.js";
import { Sampler, samplingConfig } from "../src/sampling.js";

const chunks = [];
for await (const chunk of process.stdin) chunks.push(chunk);
const request = JSON.parse(Buffer.concat(chunks).toString("utf-8"));

const withSeed = (options) =>
  options.seed === undefined || options.seed === null ? options : { ...options, seed: BigInt(options.seed) };

function floats(base64) {
  const bytes = Buffer.from(base64, "base64");
  return new Float32Array(bytes.buffer, bytes.byteOffset, bytes.length / 4);
}

/** Typed arrays (embeddings) as plain arrays, for JSON. */
function plain(value) {
  if (ArrayBuffer.isView(value)) return Array.from(value);
  if (Array.isArray(value)) return value.map(plain);
  return value;
}

async function answer() {
  if (request.op === "rng") {
    return {
      draws: request.seeds.map((seed) => {
        const rng = defaultRng(BigInt(seed));
        return Array.from({ length: request.count }, () => rng.random());
      }),
    };
  }
  if (request.op === "sample") {
    const { vocab, batch } = request;
    const steps = request.steps.map(floats);
    return {
      tokens: request.configs.map((options) => {
        const sampler = new Sampler(samplingConfig(withSeed(options)), batch);
        return steps.map((logits) =>
          Array.from({ length: batch }, (_, row) =>
            sampler.choose(logits.subarray(row * vocab, (row + 1) * vocab), row),
          ),
        );
      }),
    };
  }
  if (request.op === "beam") {
    const { vocab } = request;
    const table = request.table.map(floats);
    const step = async (ids, cache, total) => ({
      logits: table[total - 1].subarray(ids[0] * vocab, (ids[0] + 1) * vocab),
      cache: { length: cache.length + 1 },
    });
    const results = [];
    for (const options of request.cases) results.push(await beamSearch(step, { length: 0 }, options));
    return { results };
  }
  if (request.op === "generate") {
    const model = await openExport(request.dir, { engine: request.engine ?? "native", threads: 1 });
    try {
      const results = [];
      for (const { method, input, options } of request.calls) {
        if (method === "stream") {
          const pieces = [];
          for await (const piece of model.stream(input, withSeed(options))) pieces.push(piece);
          results.push(pieces);
        } else {
          const result = await model[method](
            ...(Array.isArray(input) && method === "similarity" ? input : [input]),
            withSeed(options),
          );
          results.push(plain(result));
        }
      }
      return { results };
    } finally {
      await model.close();
    }
  }
  throw new Error(`unknown op ${request.op}`);
}

process.stdout.write(JSON.stringify(await answer()));
