/**
 * What every model export shares: the checked folder, the engine, the tokenizer, and one session per
 * graph role the family runs (manifest `graphs`: "decoder", "encoder"), each created from checked bytes.
 */

import { ManifestError } from "./errors.js";
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
  }

  /** Load the tokenizer and the sessions of the family's `roles` (called on a family class). */
  static async load(folder, engine) {
    const manifest = folder.manifest;
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
          throw new ManifestError(
            `manifest.json has no graphs.${role} for a ${manifest.family} export; re-export`,
          );
        }
        graphs[role] = await engine.createSession(await folder.read(file), folder.entry(file));
      }
    } catch (error) {
      await Promise.all(Object.values(graphs).map((graph) => graph.release()));
      throw error;
    }
    return new this({ folder, engine, tokenizer, graphs });
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
