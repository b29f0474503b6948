/**
 * Running an export's golden test vectors (docs/goldens.md) on one engine.
 *
 * Graph goldens: each case's `input_i.pb` are fed to the graph and every `output_i.pb` is compared; a case
 * passes when each output has the golden's shape and max |got - golden| is within its allowance: the case's
 * own `allowed[i]` (derived from the float64 figures at export), or else atol + rtol * max |golden|. The
 * decoder of an in-place KV cache (`onnxformer optimize`) is fed its goldens' pasts with room for the step.
 * End-to-end goldens (model exports): tokenizer ids must be equal, greedy generations must give exactly the
 * golden tokens and finish reason, sentence embeddings must be within the listed tolerance.
 * Every file is read through the folder, so its size and sha256 are checked before use.
 */

import { Engine, loadEngine } from "./engine.js";
import { GoldenError } from "./errors.js";
import { ExportFolder } from "./folder.js";
import { CacheLayout, isInPlace, refuseCrossInPlace, withRoom } from "./kvcache.js";
import { TASKS } from "./manifest.js";
import { openFolder } from "./open.js";
import { decodeTensorProto } from "./tensorproto.js";

/**
 * Check every file of `dir`, then run all its goldens on `engine`.
 * @returns {Promise<{dir: string, engine: string, family: string|null, results: object[], ok: boolean}>}
 *   one result per graph output per case, per tokenizer text, per greedy prompt, per embedding
 */
export async function verifyExport(dir, { engine = "native", threads } = {}) {
  return verifyFolder(await ExportFolder.open(dir), { engine, threads });
}

/** `verifyExport` on an opened folder, on an engine named or given (an Engine, as a web page makes). */
export async function verifyFolder(folder, { engine = "native", threads } = {}) {
  const manifest = folder.manifest;
  refuseCrossInPlace(manifest.kv_cache, { cross: TASKS[manifest.task]?.cross === true });
  for (const entry of folder.manifest.files) await folder.read(entry.path);
  const goldens = folder.manifest.goldens;
  if (goldens == null || !Array.isArray(goldens.graphs)) {
    throw new GoldenError(
      `${folder.root}/manifest.json has no goldens; re-export with an onnxformer that writes golden test data`,
    );
  }
  const runner = engine instanceof Engine ? engine : await loadEngine(engine, { threads });
  const results = [];
  for (const graph of goldens.graphs) results.push(...(await runGraphGoldens(folder, runner, graph)));
  if (goldens.end_to_end != null) results.push(...(await runEndToEnd(folder, runner, goldens.end_to_end)));
  return {
    dir: folder.root,
    engine: runner.name,
    family: folder.manifest.family ?? null,
    results,
    ok: results.every((result) => result.ok),
  };
}

/**
 * max |got - golden| and the allowed diff, or a shape mismatch; `allowed` (the case's own allowance for
 * this output) wins over the graph's atol + rtol * max |golden| when given.
 */
export function compare(got, golden, { atol, rtol, allowed: own = null }) {
  const allowed = own ?? atol + rtol * maxAbs(golden.data);
  if (got.dims.join(",") !== golden.dims.join(",")) {
    return { ok: false, maxAbsDiff: null, allowed, detail: `shape [${got.dims}], golden [${golden.dims}]` };
  }
  let diff = 0;
  for (let i = 0; i < golden.data.length; i++) {
    const delta = Math.abs(Number(got.data[i]) - Number(golden.data[i]));
    if (!(delta <= diff)) diff = delta; // NaN wins, and then fails
  }
  return { ok: diff <= allowed, maxAbsDiff: diff, allowed };
}

function maxAbs(values) {
  let largest = 0;
  for (const value of values) largest = Math.max(largest, Math.abs(Number(value)));
  return largest;
}

/** Every case of one graph file: one result per output. */
async function runGraphGoldens(folder, engine, graph) {
  const checked = await folder.graph(graph.file);
  const session = await engine.createSession(checked.bytes, folder.entry(graph.file), checked.externalData);
  const pasts = inPlacePasts(folder.manifest, graph.file);
  const results = [];
  try {
    for (const golden of graph.cases) {
      const where = { check: "graph", file: graph.file, label: golden.label, dir: golden.dir };
      const inputs = {};
      for (const [index, name] of golden.inputs.entries()) {
        inputs[name] = await readTensor(folder, `${golden.dir}/input_${index}.pb`, name);
      }
      let outputs;
      try {
        outputs =
          pasts === null
            ? await session.run(feedsOf(engine, inputs), golden.outputs)
            : await runInPlace(session, engine, inputs, pasts, golden.outputs);
      } catch (error) {
        results.push({ ...where, output: null, ok: false, detail: error.message });
        continue;
      }
      for (const [index, name] of golden.outputs.entries()) {
        const expected = await readTensor(folder, `${golden.dir}/output_${index}.pb`, name);
        const own = Array.isArray(golden.allowed) ? golden.allowed[index] : null;
        const allowed = typeof own === "number" && own >= 0 ? own : null;
        const comparison = compare(outputs[name], expected, { atol: graph.atol, rtol: graph.rtol, allowed });
        results.push({ ...where, output: name, ...comparison });
      }
    }
  } finally {
    await session.release();
  }
  return results;
}

/** name -> engine tensor of decoded tensors. */
function feedsOf(engine, tensors) {
  return Object.fromEntries(
    Object.entries(tensors).map(([name, { dtype, data, dims }]) => [name, engine.tensor(dtype, data, dims)]),
  );
}

/** The past names of the in-place decoder when `file` is it (its goldens are fed with room), else null. */
function inPlacePasts(manifest, file) {
  if (!isInPlace(manifest.kv_cache) || manifest.graphs?.decoder !== file) return null;
  return new CacheLayout(manifest.kv_cache, { cross: false }).pastNames;
}

/**
 * A golden case (past (B, H, P, Dh) in, past + new out) on an in-place decoder, as the Python runtime
 * runs it (runtime/goldens.py run_case): each past with room for the step's T tokens, so the presents have
 * the goldens' shape; a step with a past and several new tokens one row at a time, since ONNX Runtime's
 * GroupQueryAttention takes batch 1 there (the runtime's own steps never do: the prompt has no past, and
 * later steps add one token).
 */
async function runInPlace(session, engine, inputs, pasts, names) {
  const [batch, room] = inputs.input_ids.dims;
  const padded = withRoom(inputs, pasts, room);
  const past = inputs[pasts[0]].dims[2];
  if (room === 1 || past === 0 || batch === 1) return session.run(feedsOf(engine, padded), names);
  const rows = [];
  for (let row = 0; row < batch; row++) {
    rows.push(await session.run(feedsOf(engine, batchRow(padded, row)), names));
  }
  return Object.fromEntries(names.map((name) => [name, joinRows(rows.map((outputs) => outputs[name]))]));
}

/** Row `row` of every tensor (batch first) as a batch of one. */
function batchRow(tensors, row) {
  return Object.fromEntries(
    Object.entries(tensors).map(([name, { dtype, data, dims }]) => {
      const size = data.length / dims[0];
      const part = data.subarray(row * size, (row + 1) * size);
      return [name, { dtype, data: part, dims: [1, ...dims.slice(1)] }];
    }),
  );
}

/** Batches of one (engine tensors) stacked on the batch axis. */
function joinRows(tensors) {
  const data = new tensors[0].data.constructor(tensors.reduce((sum, tensor) => sum + tensor.data.length, 0));
  let offset = 0;
  for (const tensor of tensors) {
    data.set(tensor.data, offset);
    offset += tensor.data.length;
  }
  return { data, dims: [tensors.length, ...tensors[0].dims.slice(1)] };
}

async function readTensor(folder, file, name) {
  const tensor = decodeTensorProto(await folder.read(file), file);
  if (tensor.name !== "" && tensor.name !== name) {
    throw new GoldenError(
      `${file} holds tensor ${JSON.stringify(tensor.name)}, the manifest says ${name}; re-export`,
    );
  }
  return tensor;
}

/** Tokenizer ids, greedy generations and embeddings of goldens/end_to_end.json. */
async function runEndToEnd(folder, engine, file) {
  const golden = await folder.readJson(file);
  const model = await openFolder(folder, { engine });
  const results = [];
  try {
    for (const item of golden.tokenizer ?? []) {
      const got = model.tokenizer.encode(item.text);
      results.push({
        check: "tokenizer",
        text: item.text,
        ok: sameIds(got, item.ids),
        got,
        expected: item.ids,
      });
    }
    for (const item of golden.greedy ?? []) {
      const framed = model.frame(item.prompt);
      const { tokens, finishReason } = await model.generateIds(item.input_ids, {
        maxNewTokens: item.max_new_tokens,
        stopTokens: item.stop_tokens,
        temperature: 0, // greedy goldens; an export's default may sample (GPT's temperature 1)
      });
      const ok =
        sameIds(framed, item.input_ids) &&
        sameIds(tokens, item.output_ids) &&
        finishReason === item.finish_reason;
      const detail = ok ? undefined : greedyDetail(framed, tokens, finishReason, item);
      results.push({ check: "greedy", prompt: item.prompt, ok, got: tokens, finishReason, detail });
    }
    const embeddings = golden.embeddings;
    for (const item of embeddings?.items ?? []) {
      const framed = model.frame(item.text);
      const got = await model.embedIds(item.input_ids, { output: embeddings.output });
      const comparison = compare(
        { data: got, dims: [got.length] },
        { data: item.embedding, dims: [item.embedding.length] },
        embeddings,
      );
      if (!sameIds(framed, item.input_ids)) {
        Object.assign(comparison, {
          ok: false,
          detail: `framed ids [${framed}], golden [${item.input_ids}]`,
        });
      }
      results.push({ check: "embedding", text: item.text, output: embeddings.output, ...comparison });
    }
  } finally {
    await model.close();
  }
  return results;
}

function sameIds(a, b) {
  return a.length === b.length && a.every((value, index) => value === b[index]);
}

function greedyDetail(framed, tokens, finishReason, item) {
  if (!sameIds(framed, item.input_ids)) return `framed ids [${framed}], golden [${item.input_ids}]`;
  let first = 0;
  while (first < tokens.length && tokens[first] === item.output_ids[first]) first++;
  return (
    `first difference at new token ${first}: got [${tokens.slice(first, first + 5)}...] (${finishReason}), ` +
    `golden [${item.output_ids.slice(first, first + 5)}...] (${item.finish_reason})`
  );
}
