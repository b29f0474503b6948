/**
 * What every model export shares: the checked folder, the engine, the tokenizer, the framing of the
 * task's text, and one session per graph role the task runs (manifest `graphs`: "decoder", "encoder"),
 * each created from checked bytes. The manifest's `task` picks the class; each class says which inputs
 * it can feed each role (`static feeds`), and the manifest's `io` says which of them a graph takes.
 */

import { InputError, ManifestError } from "./errors.js";
import { graphIO, taskSpec, textFraming } from "./manifest.js";
import { TextTokenizer } from "./tokenizer.js";

export class ExportModel {
  /** @param {{folder, engine, tokenizer, graphs: Object<string, import("./engine.js").Graph>}} parts */
  constructor({ folder, engine, tokenizer, graphs }) {
    this.folder = folder;
    this.manifest = folder.manifest;
    this.engine = engine;
    this.tokenizer = tokenizer;
    this.graphs = graphs;
    this.config = this.manifest.config ?? {};
    this.special = this.manifest.special_tokens ?? {};
    this.generation = this.manifest.generation ?? {};
    this.maxLen = requireInteger(this.config, "max_len");
    this.vocabSize = requireInteger(this.config, "vocab_size");
    this.framing = textFraming(this.manifest);
    this.io = {};
    for (const role of this.constructor.roles) {
      this.io[role] = graphIO(this.manifest, role, this.constructor.feeds[role]);
    }
  }

  /** The graph roles the class's task runs. */
  static get roles() {
    return taskSpec({ task: this.task }).roles;
  }

  /** The manifest's family (informational: the host goes by `task`). */
  get family() {
    return this.manifest.family;
  }

  get task() {
    return this.manifest.task;
  }

  /** The ids the model reads for `text`: the manifest's framing (e.g. <cls> + tokens + <sep>). */
  frame(text, { what = "text" } = {}) {
    if (typeof text !== "string") throw new InputError(`${what} must be a string, got ${typeof text}`);
    return [...this.framing.prefix, ...this.tokenizer.encode(text), ...this.framing.suffix];
  }

  /** Load the tokenizer and the sessions of the task's `roles` (called on a model class). */
  static async load(folder, engine) {
    const manifest = folder.manifest;
    if (manifest.task !== this.task) {
      throw new ManifestError(
        `${folder.root} holds a ${manifest.family} export (task ${JSON.stringify(manifest.task)}), which ` +
          `${this.name} cannot run; open it with openExport`,
      );
    }
    if (typeof manifest.tokenizer !== "string") {
      throw new ManifestError(
        "manifest.json names no tokenizer; re-export the folder with `onnxformer export`",
      );
    }
    const tokenizer = new TextTokenizer(
      await folder.read(manifest.tokenizer),
      manifest.special_tokens ?? {},
      {
        name: manifest.tokenizer,
      },
    );
    const graphs = {};
    try {
      for (const role of this.roles) {
        const file = manifest.graphs?.[role];
        if (typeof file !== "string") {
          const kind = `${article(manifest.task)} ${manifest.task} export`;
          throw new ManifestError(`manifest.json has no graphs.${role} for ${kind}; re-export`);
        }
        const graph = await folder.graph(file); // bytes and external weights, sha256-checked
        graphs[role] = await engine.createSession(graph.bytes, folder.entry(file), graph.externalData);
      }
      return new this({ folder, engine, tokenizer, graphs });
    } catch (error) {
      await Promise.all(Object.values(graphs).map((graph) => graph.release()));
      throw error;
    }
  }

  /** Release the engine sessions. */
  async close() {
    await Promise.all(Object.values(this.graphs).map((graph) => graph.release()));
  }
}

function requireInteger(config, key) {
  if (!Number.isInteger(config[key]) || config[key] <= 0) {
    throw new ManifestError(`manifest.json: config.${key} must be a positive integer; re-export`);
  }
  return config[key];
}

/** The indefinite article of `word`: "an" encode, "a" generate. */
function article(word) {
  return /^[aeiou]/.test(String(word)) ? "an" : "a";
}
