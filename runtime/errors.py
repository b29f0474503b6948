"""Typed errors shared by every part of onnxformer.

Each message names the problem and the fix. The builder raises these too (it may import the runtime;
the runtime never imports the builder), so a caller catches one family of exceptions whatever it uses.
"""


class OnnxformerError(Exception):
    """Base class of every error onnxformer raises on purpose."""


class ConfigError(OnnxformerError, ValueError):
    """A configuration value is invalid (for example d_model not divisible by n_heads)."""


class InputError(OnnxformerError, ValueError):
    """A tensor, text or option given at call time is invalid (wrong rank, width, length, range)."""


class ManifestError(OnnxformerError):
    """An export folder or its manifest.json is missing, malformed, altered or of an unknown version."""


class ExportError(OnnxformerError):
    """Exporting to ONNX failed, or the exported file does not load."""


class ParityError(ExportError):
    """An exported graph disagrees with PyTorch by more than the tolerance."""


class InferenceError(OnnxformerError):
    """ONNX Runtime failed running a graph that loaded (inputs that do not fit it, or a damaged model)."""


class ModelImportError(OnnxformerError):
    """A Hugging Face model folder that cannot be imported: a missing file, an unsupported architecture or
    option, or a checkpoint tensor that is unknown, missing or of the wrong shape."""
