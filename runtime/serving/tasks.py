"""What an export does to a column of texts, chosen by the class `onnxformer.runtime.load` returns for its
manifest's family: a BERT export embeds, a GPT export generates, a T5 export transforms text to text.

The table is keyed by model class, so no call site names a family; batch inference, the HTTP server and
the command line all go through it. The options each task takes are the `GenerationOptions` fields of its
model class's task (`onnxformer.runtime.generation_options`), so no list of them is kept here.
"""

import importlib.util
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from onnxformer.runtime.encoder import TextEncoder
from onnxformer.runtime.errors import ConfigError, InputError
from onnxformer.runtime.generation_options import GenerationOptions, names_for
from onnxformer.runtime.generator import TextGenerator
from onnxformer.runtime.seq2seq import TextToText

Model = TextEncoder | TextGenerator | TextToText

__all__ = ["TASKS", "GenerationOptions", "Model", "Task", "require", "task_for", "texts_of"]


@dataclass(frozen=True)
class Task:
    """One model class's job on a list of texts."""

    name: str  # "embed", "generate", "seq2seq": also the HTTP endpoint
    output: str  # the output column / JSON field: "embedding", "generation", "output"
    model_task: str  # the manifest task of the model class, whose GenerationOptions fields it takes
    run: Callable[[Any, list[str], GenerationOptions], np.ndarray | list[str]]
    stream: Callable[[Any, str, GenerationOptions], Iterator[str]] | None = None  # pieces of one text

    @property
    def options(self) -> tuple[str, ...]:
        """The GenerationOptions fields it takes."""
        return names_for(self.model_task)

    def check(self, options: GenerationOptions) -> None:
        """Refuse options this task does not take, saying why (before any model call)."""
        options.check(self.model_task, what=self.name)

    def __call__(self, model: Model, texts: list[str], options: GenerationOptions) -> np.ndarray | list[str]:
        return self.run(model, texts, options)


def _embed(model: TextEncoder, texts: list[str], options: GenerationOptions) -> np.ndarray:
    # (N, D): one model batch, as the caller chunked it
    return model.embed(texts, batch_size=len(texts), truncate=options.truncate)


def _generate(model: TextGenerator | TextToText, texts: list[str], options: GenerationOptions) -> list[str]:
    return model.generate(texts, options)


def _stream(model: TextGenerator, text: str, options: GenerationOptions) -> Iterator[str]:
    return model.stream(text, options)


TASKS: dict[type, Task] = {
    TextEncoder: Task("embed", "embedding", TextEncoder.task, _embed),
    TextGenerator: Task("generate", "generation", TextGenerator.task, _generate, _stream),
    TextToText: Task("seq2seq", "output", TextToText.task, _generate),
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
            raise InputError(
                f"{what} {index} must be a str, got {type(value).__name__}", field=f"texts[{index}]"
            )
        texts.append(value)
    return texts


def require(module: str, extra: str) -> None:
    """Fail with one clear line when an optional dependency is missing."""
    if importlib.util.find_spec(module) is None:
        raise ConfigError(f'this needs {module}, which is not installed: pip install "onnxformer[{extra}]"')
