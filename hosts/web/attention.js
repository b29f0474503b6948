/**
 * Where a model looks, in the page: the attention weights of one sentence from the export's
 * `attentions.onnx` (graph role "attentions"), as the Python runtime's onnxformer.runtime.attention reads
 * them. The text is framed as the task's other graphs frame it (manifest `framing`); manifest
 * `io.attentions` names the inputs and the `self_attentions` outputs ("{i}" = layer, each (1, H, Q, K)).
 * A T5 export's graph also reads the decoder: for encoder self-attention it is fed the start token.
 *
 * Shape legend: L layers, H heads, Q query tokens, K key tokens (self-attention: K == Q).
 */

import { checkIds } from "../node/src/decoding.js";
import { ManifestError } from "../node/src/errors.js";
import { pick } from "../node/src/manifest.js";

const ROW_SUM_TOLERANCE = 1e-4; // softmax rows in fp32 sum to 1 within a few ulps per key

export class AttentionReader {
  constructor(model, graph) {
    this.model = model;
    this.graph = graph;
    this.io = model.manifest.io?.attentions;
    const pattern = this.io?.outputs?.self_attentions;
    if (typeof pattern !== "string") {
      throw new ManifestError("manifest.json: io.attentions names no self_attentions output; re-export");
    }
    this.names = layerNames(pattern, graph.outputNames);
    if (this.names.length === 0) {
      throw new ManifestError(`${graph.file} returns no ${pattern} outputs; re-export the checkpoint`);
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
    const graph = await model.engine.createSession(await model.folder.read(file), model.folder.entry(file));
    return new AttentionReader(model, graph);
  }

  /** The self-attention map of `text`. */
  async map(text) {
    const model = this.model;
    const ids = checkIds(model.frame(text), {
      vocabSize: model.vocabSize,
      limit: model.maxLen,
      what: "text",
    });
    const engine = model.engine;
    const start = model.manifest.generation?.decoder_start_token_id;
    const feeds = pick(this.io, {
      input_ids: engine.ids(ids),
      attention_mask: engine.ones(ids.length),
      token_type_ids: engine.tensor("int64", new BigInt64Array(ids.length), [1, ids.length]),
      decoder_input_ids: Number.isInteger(start) ? engine.ids([start]) : undefined,
    });
    const outputs = await this.graph.run(feeds, this.names);
    const layers = this.names.map((name) => outputs[name]); // L x (1, H, Q, K)
    const [, heads, queries, keys] = layers[0].dims;
    const weights = layers.map((tensor) => tensor.data.slice()); // L x (H * Q * K)
    for (const data of weights) {
      for (let row = 0; row < heads * queries; row++) {
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
    const tokens = ids.map((id) => (special.has(id) ? `<${special.get(id)}>` : model.tokenizer.decode([id])));
    return new AttentionMap({
      text,
      ids,
      tokens,
      weights,
      heads,
      queries,
      keys,
      special: new Set(special.keys()),
    });
  }

  async release() {
    await this.graph.release();
  }
}

export class AttentionMap {
  constructor({ text, ids, tokens, weights, heads, queries, keys, special }) {
    Object.assign(this, { text, ids, tokens, weights, heads, queries, keys, special });
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
