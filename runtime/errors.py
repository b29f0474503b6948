"""Typed errors shared by every part of onnxformer.

Each message names the problem and the fix. The builder raises these too (it may import the runtime;
the runtime never imports the builder), so a caller catches one family of exceptions whatever it uses.
"""


class OnnxformerError(Exception):
    """Base class of every error onnxformer raises on purpose."""


class ConfigError(OnnxformerError, ValueError):
    """A configuration value is invalid (for example d_model not divisible by n_heads)."""


class InputError(OnnxformerError, ValueError):
    """A tensor, text or option given at call time is invalid (wrong rank, width, length, range).

    `field` names what the error is about in a request's terms, when it is about one thing: an option's
    name ("top_p", a `GenerationOptions` field), "texts", or "texts[i]" for the i-th text (prompt, source)
    of a call. The HTTP server reports it as the error's field; None when no one field is at fault.
    """

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field  # kept by pickling (BaseException pickles __dict__): Ray hands errors back


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
