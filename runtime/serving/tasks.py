"""What an export does to a column of texts, chosen by the class `onnxformer.runtime.load` returns for its
manifest's family: a BERT export embeds, a GPT export generates, a T5 export transforms text to text.

The table is keyed by model class, so no call site names a family; batch inference, the HTTP server and
the command line all go through it.
"""

import importlib.util
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from onnxformer.runtime.encoder import TextEncoder
from onnxformer.runtime.errors import ConfigError, InputError
from onnxformer.runtime.generator import TextGenerator
from onnxformer.runtime.seq2seq import TextToText

Model = TextEncoder | TextGenerator | TextToText


@dataclass(frozen=True)
class GenerationOptions:
    """Decoding options for generate and seq2seq, None taking the export's defaults (manifest
    `generation`); and whether embed cuts a text longer than the export reads (else refuses it)."""

    max_new_tokens: int | None = None
    temperature: float | None = None
    top_k: int | None = None
    top_p: float | None = None
    seed: int | None = None
    num_beams: int = 1  # seq2seq only
    stop: tuple[str, ...] | None = None  # generate only: end the text before the first of these
    truncate: bool = True  # embed only: cut texts past the export's max length (TextEncoder.embed)

    def given(self) -> list[str]:
        """The names of the options set to something other than their default."""
        defaults = GenerationOptions()
        return [name for name, value in asdict(self).items() if value != getattr(defaults, name)]


@dataclass(frozen=True)
class Task:
    """One model class's job on a list of texts."""

    name: str  # "embed", "generate", "seq2seq": also the HTTP endpoint
    output: str  # the output column / JSON field: "embedding", "generation", "output"
    options: tuple[str, ...]  # the GenerationOptions fields it takes
    run: Callable[[Any, list[str], GenerationOptions], np.ndarray | list[str]]
    stream: Callable[[Any, str, GenerationOptions], Iterator[str]] | None = None  # pieces of one text

    def check(self, options: GenerationOptions) -> None:
        """Refuse options this task does not take (before any model call)."""
        extra = [name for name in options.given() if name not in self.options]
        if extra:
            takes = ", ".join(self.options) or "none"
            raise InputError(
                f"{', '.join(extra)}: not an option of {self.name} (an export for {self.name} takes: {takes})"
            )

    def __call__(self, model: Model, texts: list[str], options: GenerationOptions) -> np.ndarray | list[str]:
        return self.run(model, texts, options)


def _embed(model: TextEncoder, texts: list[str], options: GenerationOptions) -> np.ndarray:
    # (N, D): one model batch, as the caller chunked it
    return model.embed(texts, batch_size=len(texts), truncate=options.truncate)


def _continuation(options: GenerationOptions) -> dict:
    """The keyword arguments of TextGenerator.generate and .stream."""
    return {
        "max_new_tokens": options.max_new_tokens,
        "temperature": options.temperature,
        "top_k": options.top_k,
        "top_p": options.top_p,
        "seed": options.seed,
        "stop": list(options.stop) if options.stop else None,
    }


def _generate(model: TextGenerator, texts: list[str], options: GenerationOptions) -> list[str]:
    return model.generate(texts, **_continuation(options))


def _stream(model: TextGenerator, text: str, options: GenerationOptions) -> Iterator[str]:
    return model.stream(text, **_continuation(options))


def _seq2seq(model: TextToText, texts: list[str], options: GenerationOptions) -> list[str]:
    return model.generate(
        texts,
        max_new_tokens=options.max_new_tokens,
        num_beams=options.num_beams,
        temperature=options.temperature,
        top_k=options.top_k,
        top_p=options.top_p,
        seed=options.seed,
    )


_SAMPLING = ("max_new_tokens", "temperature", "top_k", "top_p", "seed")
TASKS: dict[type, Task] = {
    TextEncoder: Task("embed", "embedding", ("truncate",), _embed),
    TextGenerator: Task("generate", "generation", (*_SAMPLING, "stop"), _generate, _stream),
    TextToText: Task("seq2seq", "output", (*_SAMPLING, "num_beams"), _seq2seq),
}


def task_for(model: Model) -> Task:
    """The task of a loaded model (by its class)."""
    for cls, task in TASKS.items():
        if isinstance(model, cls):
            return task
    raise InputError(f"{type(model).__name__} has no batch/serving task; load the folder with runtime.load")


def texts_of(values: Sequence[Any], *, what: str = "text") -> list[str]:
    """A column of a batch (numpy array or list) as a list of str, refusing anything else."""
    texts = []
    for index, value in enumerate(values):
        if not isinstance(value, str):
            raise InputError(f"{what} {index} must be a str, got {type(value).__name__}")
        texts.append(value)
    return texts


def require(module: str, extra: str) -> None:
    """Fail with one clear line when an optional dependency is missing."""
    if importlib.util.find_spec(module) is None:
        raise ConfigError(f'this needs {module}, which is not installed: pip install "onnxformer[{extra}]"')
