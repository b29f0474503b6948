"""Options and loading shared by the commands that run exports."""

from pathlib import Path
from typing import Annotated

import typer

Device = Annotated[str, typer.Option(help="auto (CUDA when a CUDA session starts, else CPU), cpu or cuda.")]
Seed = Annotated[int | None, typer.Option(help="Seed for sampling; the same seed gives the same text.")]


def load_model(folder: Path, task: str, device: str):
    """The runtime model in `folder`, refusing an export made for another task with a clear error. The
    commands are named after the manifest's tasks (generate, encode, seq2seq)."""
    from onnxformer.runtime.errors import ManifestError
    from onnxformer.runtime.loader import load

    model = load(folder, device=device)
    if model.task != task:
        raise ManifestError(
            f"{folder} is a {model.family} export (task {model.task}); this command needs a {task} export "
            f"(use `onnxformer {model.task}` for {model.family})"
        )
    return model
