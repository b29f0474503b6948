"""The torch-free runtime: numpy, ONNX Runtime and tokenizers only.

Nothing under `onnxformer.runtime` imports torch or the builder, not even lazily.
"""

from onnxformer.runtime.errors import (
    ConfigError,
    ExportError,
    InputError,
    ManifestError,
    OnnxformerError,
    ParityError,
)

__all__ = [
    "ConfigError",
    "ExportError",
    "InputError",
    "ManifestError",
    "OnnxformerError",
    "ParityError",
]
