/**
 * Where a model looks, in the page: the attention weights of one sentence from the export's
 * `attentions.onnx` (graph role "attentions"), as the Python runtime's onnxformer.runtime.attention reads
 * them. The text is framed as the task's other graphs frame it (manifest `framing`); manifest
 * `io.attentions` names the inputs and the `self_attentions` outputs ("{i}" = layer, each (1, H, Q, K)).
 * A T5 export's graph also reads the decoder: for encoder self-attention it is fed the start token; for
 * cross-attention the model's own greedy output is decoded first, then fed after the start token, so the
 * query labelled "cat" is the decoder step that wrote "cat", and its row says which source tokens the
 * model looked at while writing it.
 *
 * Shape legend: L layers, H heads, Q query tokens, K key tokens (self-attention: K == Q; cross: K is the
 * source length).
 */

import { checkIds } from "../node/src/decoding.js";
import { InputError, ManifestError } from "../node/src/errors.js";
import { pick } from "../node/src/manifest.js";

const ROW_SUM_TOLERANCE = 1e-4; // softmax rows in fp32 sum to 1 within a few ulps per key
const OUTPUT_KEYS = { self: "self_attentions", cross: "cross_attentions" }; // io.attentions.outputs keys

export class AttentionReader {
  constructor(model, graph) {
    this.model = model;
    this.graph = graph;
    this.io = model.manifest.io?.attentions;
    if (typeof this.io?.outputs?.self_attentions !== "string") {
      throw new ManifestError("manifest.json: io.attentions names no self_attentions output; re-export");
    }
  }

  /** The attentions graph of an opened model (its bytes checked against the manifest first). */
  static async load(model) {
    const file = model.manifest.graphs?.attentions;
    if (typeof file !== "string") {
      throw new ManifestError(
        `${model.folder.root} has no attentions graph; re-export the checkpoint with \`onnxformer export\``,
      );
    }
    const checked = await model.folder.graph(file); // its bytes and external weights, sha256-checked
    const graph = await model.engine.createSession(
      checked.bytes,
      model.folder.entry(file),
      checked.externalData,
    );
    return new AttentionReader(model, graph);
  }

  /** The kinds of map the export gives: "self", and "cross" for an encoder-decoder. */
  get kinds() {
    return Object.keys(OUTPUT_KEYS).filter((kind) => typeof this.io.outputs[OUTPUT_KEYS[kind]] === "string");
  }

  /**
   * The attention map of `text`: self-attention, or for an encoder-decoder `kind: "cross"` the decoder's
   * attention over the source while it writes its greedy output (as `onnxformer attention --cross`).
   */
  async map(text, { kind = "self" } = {}) {
    if (!this.kinds.includes(kind)) {
      throw new InputError(
        `this ${this.model.family} export has no ${kind} attention (it has ${this.kinds})`,
      );
    }
    const model = this.model;
    const source = checkIds(model.frame(text), {
      vocabSize: model.vocabSize,
      limit: model.maxLen,
      what: "text",
    });
    const start = model.manifest.generation?.decoder_start_token_id;
    // Encoder self-attention does not depend on the decoder: its start token feeds it.
    let decoderInput = Number.isInteger(start) ? [start] : [];
    let queries = source;
    if (kind === "cross") [decoderInput, queries] = await this.#decoderOutput(source, start);
    const engine = model.engine;
    const feeds = pick(this.io, {
      input_ids: engine.ids(source),
      attention_mask: engine.ones(source.length),
      token_type_ids: engine.tensor("int64", new BigInt64Array(source.length), [1, source.length]),
      decoder_input_ids: decoderInput.length > 0 ? engine.ids(decoderInput) : undefined,
    });
    const names = layerNames(this.io.outputs[OUTPUT_KEYS[kind]], this.graph.outputNames);
    if (names.length === 0) {
      throw new ManifestError(
        `${this.graph.file} returns no ${kind}-attention outputs; re-export the checkpoint`,
      );
    }
    const outputs = await this.graph.run(feeds, names);
    const layers = names.map((name) => outputs[name]); // L x (1, H, Q, K)
    const [, heads, rows, keys] = layers[0].dims;
    const weights = layers.map((tensor) => tensor.data.slice()); // L x (H * Q * K)
    for (const data of weights) {
      for (let row = 0; row < heads * rows; row++) {
        let sum = 0;
        for (let k = 0; k < keys; k++) sum += data[row * keys + k];
        if (Math.abs(sum - 1) > ROW_SUM_TOLERANCE) {
          throw new ManifestError(
            `${this.graph.file} rows sum to ${sum}, not 1: it does not return softmax weights; re-export`,
          );
        }
      }
    }
    const special = new Map(Object.entries(model.special).map(([name, id]) => [id, name]));
    // A special token as its own text ("</s>"), every other one as it reads in the text (" sat").
    const ownText = (id) => model.tokenizer.tokenizer.decode([id], { skip_special_tokens: false });
    const shown = (id) =>
      special.has(id) ? ownText(id) || `<${special.get(id)}>` : model.tokenizer.decode([id]);
    return new AttentionMap({
      kind,
      text,
      ids: queries,
      keyIds: source,
      tokens: queries.map(shown),
      keyTokens: source.map(shown),
      weights,
      heads,
      queries: rows,
      keys,
      special: new Set(special.keys()),
    });
  }

  /** The decoder input (<start> + the greedy output) and the tokens its steps wrote (the output + </s>). */
  async #decoderOutput(source, start) {
    const model = this.model;
    const { tokens, finishReason } = await model.generateIds(source);
    const stop = finishReason === "stop" ? model.generation.stop_tokens.slice(0, 1) : [];
    const written = [...tokens, ...stop].slice(0, model.maxLen);
    return [[start, ...written.slice(0, -1)], written];
  }

  async release() {
    await this.graph.release();
  }
}

export class AttentionMap {
  /** `ids` / `tokens` are the queries (Q), `keyIds` / `keyTokens` the keys (K); self-attention: the same. */
  constructor({ kind, text, ids, keyIds, tokens, keyTokens, weights, heads, queries, keys, special }) {
    Object.assign(this, {
      kind,
      text,
      ids,
      keyIds,
      tokens,
      keyTokens,
      weights,
      heads,
      queries,
      keys,
      special,
    });
    this.layers = weights.length;
  }

  /** The weight query `q` gives key `k` in (layer, head). */
  at(layer, head, q, k) {
    return this.weights[layer][(head * this.queries + q) * this.keys + k];
  }

  /** The weights (K,) query `q` gives every key; `layer` / `head` null averages that axis. */
  row(q, { layer = null, head = null } = {}) {
    const layers = layer === null ? [...Array(this.layers).keys()] : [layer];
    const heads = head === null ? [...Array(this.heads).keys()] : [head];
    const row = new Float32Array(this.keys);
    for (const l of layers)
      for (const h of heads) for (let k = 0; k < this.keys; k++) row[k] += this.at(l, h, q, k);
    return row.map((value) => value / (layers.length * heads.length));
  }
}

/** The names among `names` that fit `pattern` ("attentions.{i}"), ordered by layer. */
export function layerNames(pattern, names) {
  const [head, tail] = pattern.split("{i}");
  const escape = (text) => text.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
  const form = new RegExp(`^${escape(head)}(\\d+)${escape(tail ?? "")}$`);
  return names
    .map((name) => [form.exec(name), name])
    .filter(([match]) => match !== null)
    .sort(([a], [b]) => Number(a[1]) - Number(b[1]))
    .map(([, name]) => name);
}
