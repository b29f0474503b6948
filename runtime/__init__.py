"""The torch-free runtime: numpy, ONNX Runtime and tokenizers only.

Nothing under `onnxformer.runtime` imports torch or the builder, not even lazily.

    from onnxformer.runtime import load
    model = load("exported/gpt")          # TextGenerator, TextEncoder or TextToText, by the manifest's task
    model.generate("The cat", max_new_tokens=20)   # or model.generate("The cat", GenerationOptions(...))

The names below are imported on first use (PEP 562), so `import onnxformer.runtime.errors`, which every
builder layer does, loads no numpy, tokenizers or ONNX Runtime.
"""

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
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
    from onnxformer.runtime.generation_options import GenerationOptions
    from onnxformer.runtime.generator import TextGenerator
    from onnxformer.runtime.loader import load
    from onnxformer.runtime.sampling import SamplingConfig
    from onnxformer.runtime.seq2seq import TextToText
    from onnxformer.runtime.session import check_threads

# name -> the module that defines it
_EXPORTS = {
    "Classification": "encoder",
    "ConfigError": "errors",
    "ExportError": "errors",
    "Generation": "decoding",
    "GenerationOptions": "generation_options",
    "InferenceError": "errors",
    "InputError": "errors",
    "ManifestError": "errors",
    "OnnxformerError": "errors",
    "ParityError": "errors",
    "SamplingConfig": "sampling",
    "TextEncoder": "encoder",
    "TextGenerator": "generator",
    "TextToText": "seq2seq",
    "check_threads": "session",
    "load": "loader",
}

__all__ = [
    "Classification",
    "ConfigError",
    "ExportError",
    "Generation",
    "GenerationOptions",
    "InferenceError",
    "InputError",
    "ManifestError",
    "OnnxformerError",
    "ParityError",
    "SamplingConfig",
    "TextEncoder",
    "TextGenerator",
    "TextToText",
    "check_threads",
    "load",
]


def __getattr__(name: str) -> object:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value  # later look-ups skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})
