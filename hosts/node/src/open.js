/**
 * Opening a model export: the folder is checked, the class of the manifest's `task` loads the graphs it
 * runs on the engine asked for.
 */

import { Engine, loadEngine } from "./engine.js";
import { SentenceEncoder } from "./encoder.js";
import { ManifestError } from "./errors.js";
import { ExportFolder } from "./folder.js";
import { TextGenerator } from "./generator.js";
import { refuseCrossInPlace } from "./kvcache.js";
import { TASKS } from "./manifest.js";
import { TextToText } from "./seq2seq.js";

/** Per task (manifest `task`), the class that runs it. */
export const CLASSES = Object.fromEntries(
  [TextGenerator, SentenceEncoder, TextToText].map((cls) => [cls.task, cls]),
);

/**
 * Open a model export folder.
 * @param {string} dir the folder `onnxformer export` wrote
 * @param {{engine?: "native"|"wasm"|Engine, threads?: number}} options
 * @returns {Promise<TextGenerator|TextToText|SentenceEncoder>}
 */
export async function openExport(dir, { engine = "native", threads } = {}) {
  const folder = await ExportFolder.open(dir);
  return openFolder(folder, { engine, threads });
}

/** The model of an already opened folder. */
export async function openFolder(folder, { engine = "native", threads } = {}) {
  const { export_kind: kind, task } = folder.manifest;
  if (kind !== "model") {
    throw new ManifestError(
      `${folder.root} is a ${JSON.stringify(kind)} export, not a model; open the folder \`onnxformer export\` ` +
        "wrote (a blocks export can only be verified: node bin/verify.js DIR)",
    );
  }
  if (!Object.hasOwn(CLASSES, task) || !Object.hasOwn(TASKS, task)) {
    throw new ManifestError(
      `${folder.root} has task ${JSON.stringify(task)}; this host runs ${Object.keys(CLASSES).join(", ")}`,
    );
  }
  refuseCrossInPlace(folder.manifest.kv_cache, TASKS[task]); // before any session
  const runner = engine instanceof Engine ? engine : await loadEngine(engine, { threads });
  return CLASSES[task].load(folder, runner);
}
