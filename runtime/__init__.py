"""The torch-free runtime: numpy, ONNX Runtime and tokenizers only.

Nothing under `onnxformer.runtime` imports torch or the builder, not even lazily.

    from onnxformer.runtime import load
    model = load("exported/gpt")          # TextGenerator, TextEncoder or TextToText, by family
    model.generate("The cat", max_new_tokens=20)
"""

from onnxformer.runtime.decoding import Generation
from onnxformer.runtime.encoder import Classification, TextEncoder
from onnxformer.runtime.errors import (
    ConfigError,
    ExportError,
    InferenceError,
    InputError,
    ManifestError,
    OnnxformerError,
    ParityError,
)
from onnxformer.runtime.generator import TextGenerator
from onnxformer.runtime.loader import load
from onnxformer.runtime.sampling import SamplingConfig
from onnxformer.runtime.seq2seq import TextToText

__all__ = [
    "Classification",
    "ConfigError",
    "ExportError",
    "Generation",
    "InferenceError",
    "InputError",
    "ManifestError",
    "OnnxformerError",
    "ParityError",
    "SamplingConfig",
    "TextEncoder",
    "TextGenerator",
    "TextToText",
    "load",
]
