/**
 * The model part of the manifest contract (format 2), as the Python runtime's
 * onnxformer.runtime.manifest defines it: `task` picks the class, `framing` frames a text, `io` names what
 * each graph is fed and returns, `kv_cache` names the cache tensors, `generation` holds the defaults.
 * Nothing here knows a family.
 */

import { ManifestError } from "./errors.js";

/** Per task: the graph roles it runs, the framing key of its text, whether it decodes with a cache. */
export const TASKS = {
  generate: { roles: ["decoder"], text: "prompt", cached: true, cross: false },
  encode: { roles: ["encoder"], text: "text", cached: false, cross: false },
  seq2seq: { roles: ["encoder", "decoder"], text: "source", cached: true, cross: true },
};

/** The graph inputs a runtime can feed (besides the KV cache). */
export const INPUT_NAMES = [
  "input_ids",
  "attention_mask",
  "token_type_ids",
  "decoder_input_ids",
  "decoder_attention_mask",
  "encoder_attention_mask",
];

export const CACHE_LAYOUT = ["batch", "heads", "sequence", "head_dim"];
// The in-place cache of an optimised decoder (`onnxformer optimize`): past and present are one buffer of
// max_sequence >= past + new positions, the step's keys and values written after the past ones.
export const IN_PLACE_LAYOUT = ["batch", "heads", "max_sequence", "head_dim"];

function fail(where, problem) {
  return new ManifestError(`manifest.json: ${where} ${problem}; re-export the folder with onnxformer`);
}

const isObject = (value) => value !== null && typeof value === "object" && !Array.isArray(value);
const isNames = (value) =>
  Array.isArray(value) && value.every((item) => typeof item === "string" && item !== "");

/** The task's spec, or a ManifestError naming the tasks this host runs. */
export function taskSpec(manifest) {
  if (!Object.hasOwn(TASKS, manifest.task)) {
    const tasks = Object.keys(TASKS).join(", ");
    throw fail("task", `must be one of ${tasks} for a model export, got ${JSON.stringify(manifest.task)}`);
  }
  return TASKS[manifest.task];
}

/**
 * The framing of the task's text: { prefix, suffix } as token ids, resolved through special_tokens.
 */
export function textFraming(manifest) {
  const spec = taskSpec(manifest);
  const framing = manifest.framing?.[spec.text];
  if (!isObject(framing) || !isNames(framing.prefix) || !isNames(framing.suffix)) {
    throw fail(
      `framing.${spec.text}`,
      `must hold prefix and suffix lists of special-token names (the ${manifest.task} task reads it)`,
    );
  }
  const special = manifest.special_tokens ?? {};
  const ids = (names) =>
    names.map((name) => {
      if (!Number.isInteger(special[name])) {
        throw fail(`framing.${spec.text}`, `names ${JSON.stringify(name)}, which special_tokens lacks`);
      }
      return special[name];
    });
  // The most ids a framed text is read as (a sentence-transformers folder's max_seq_length); optional.
  const maxLength = framing.max_length ?? null;
  const size = framing.prefix.length + framing.suffix.length;
  if (maxLength !== null && (!Number.isInteger(maxLength) || maxLength <= size)) {
    throw fail(`framing.${spec.text}.max_length`, `must be an integer > ${size} (the framing's own ids)`);
  }
  return { prefix: ids(framing.prefix), suffix: ids(framing.suffix), maxLength, names: framing };
}

/** The io of one graph role ({ inputs: string[], outputs: {key: name} }); inputs must be `feedable`. */
export function graphIO(manifest, role, feedable) {
  const io = manifest.io?.[role];
  if (!isObject(io) || !isNames(io.inputs) || !isObject(io.outputs)) {
    throw fail(`io.${role}`, "must hold the inputs list and outputs object of the graph");
  }
  const unknown = io.inputs.filter((name) => !feedable.includes(name));
  if (unknown.length > 0) {
    throw fail(
      `io.${role}.inputs`,
      `names ${JSON.stringify(unknown)}, which this task does not feed (it feeds ${feedable.join(", ")})`,
    );
  }
  return io;
}

/** The feeds of one graph: of the values the caller has (input name -> tensor), those its io lists. */
export function pick(io, available) {
  return Object.fromEntries(io.inputs.map((name) => [name, available[name]]));
}

/** The decoding defaults of a cached task. */
export function generationDefaults(manifest) {
  const generation = manifest.generation;
  if (!isObject(generation)) {
    throw fail("generation", `is missing; the ${manifest.task} task decodes with its defaults`);
  }
  if (!Number.isInteger(generation.max_new_tokens) || generation.max_new_tokens < 0) {
    throw fail("generation.max_new_tokens", "must be an integer >= 0");
  }
  const stops = generation.stop_tokens;
  if (!Array.isArray(stops) || !stops.every((id) => Number.isInteger(id) && id >= 0)) {
    throw fail("generation.stop_tokens", "must be token ids >= 0");
  }
  return generation;
}
