/**
 * The generation options, named once for this host: the Python runtime's GenerationOptions
 * (runtime/generation_options.py) field by field and in its order, each with its Node name (camelCase),
 * its default (null: the export's, from manifest `generation`, or none), the tasks that take it and why
 * the other tasks refuse it. tests/test_node_options.py holds this table equal to the Python fields, so a
 * new or renamed option fails the tests until it is here too; the model classes take their option names
 * and defaults from it.
 */

const NO_TOKENS = "an encode export embeds texts and generates no tokens";
const BEAMS = "beam search runs on seq2seq exports only";
const DECODING = ["generate", "seq2seq"];

export const OPTIONS = {
  max_new_tokens: { node: "maxNewTokens", default: null, tasks: DECODING, whyNot: NO_TOKENS },
  temperature: { node: "temperature", default: null, tasks: DECODING, whyNot: NO_TOKENS },
  top_k: { node: "topK", default: null, tasks: DECODING, whyNot: NO_TOKENS },
  top_p: { node: "topP", default: null, tasks: DECODING, whyNot: NO_TOKENS },
  seed: { node: "seed", default: null, tasks: DECODING, whyNot: NO_TOKENS },
  stop: {
    node: "stop",
    default: null,
    tasks: ["generate"],
    whyNot: "stop strings cut a generated continuation; a seq2seq output ends at its stop tokens",
  },
  stop_tokens: { node: "stopTokens", default: null, tasks: DECODING, whyNot: NO_TOKENS },
  num_beams: { node: "numBeams", default: 1, tasks: ["seq2seq"], whyNot: BEAMS },
  length_penalty: { node: "lengthPenalty", default: 1.0, tasks: ["seq2seq"], whyNot: BEAMS },
  truncate: {
    node: "truncate",
    default: true,
    tasks: ["encode"],
    whyNot: "generate and seq2seq refuse a text longer than the model's context",
  },
};

/** The Node names of the options `task` (a manifest task: generate, encode, seq2seq) takes, in order. */
export function optionNames(task) {
  return Object.values(OPTIONS)
    .filter((option) => option.tasks.includes(task))
    .map((option) => option.node);
}

/** The option whose Node name is `name`, or undefined. */
export function optionByNode(name) {
  return Object.values(OPTIONS).find((option) => option.node === name);
}
