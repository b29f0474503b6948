/**
 * Typed errors, one family, each message naming the problem and the fix (as the Python runtime's
 * onnxformer.runtime.errors).
 */

export class OnnxformerError extends Error {
  constructor(message) {
    super(message);
    this.name = new.target.name;
  }
}

/** An export folder or its manifest.json is missing, malformed, altered or of an unknown version. */
export class ManifestError extends OnnxformerError {}

/** A text, token list or option given at call time is invalid. */
export class InputError extends OnnxformerError {}

/** A golden test-data file cannot be read as the format in docs/goldens.md describes. */
export class GoldenError extends OnnxformerError {}
