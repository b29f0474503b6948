/**
 * onnxformer exports in Node.js.
 *
 *   import { openExport } from "./src/index.js";
 *   const gpt = await openExport("exported/gpt");            // checks every file, loads the graphs
 *   const text = await gpt.generate("the cat", { maxNewTokens: 20 });
 *
 * `openExport` picks the model class from the manifest's task (generate, encode, seq2seq) and runs it on
 * the engine asked for: "native" (onnxruntime-node) or "wasm" (onnxruntime-web's WebAssembly backend).
 * The classes and options are the Python runtime's (TextGenerator, TextEncoder, TextToText; `load` as in
 * `onnxformer.runtime.load`), options in camelCase (README.md: the table).
 */

export { Engine, ENGINES, loadEngine, maxThreads } from "./engine.js";
export { SentenceEncoder, TextEncoder } from "./encoder.js";
export { GoldenError, InputError, ManifestError, OnnxformerError } from "./errors.js";
export { checkRelativePath, ExportFolder } from "./folder.js";
export { TextGenerator } from "./generator.js";
export { compare, verifyExport, verifyFolder } from "./goldens.js";
export { TASKS } from "./manifest.js";
export { CLASSES, openExport as load, openExport, openFolder } from "./open.js";
export { OPTIONS, optionNames } from "./options.js";
export { defaultRng, Generator, PCG64, SeedSequence } from "./rng.js";
export { Sampler, samplingConfig } from "./sampling.js";
export { TextToText } from "./seq2seq.js";
export { decodeTensorProto } from "./tensorproto.js";
