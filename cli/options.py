"""Options and loading shared by the commands that run exports."""

from pathlib import Path
from typing import Annotated

import typer

Device = Annotated[str, typer.Option(help="auto (CUDA when a CUDA session starts, else CPU), cpu or cuda.")]
Seed = Annotated[int | None, typer.Option(help="Seed for sampling; the same seed gives the same text.")]


def load_model(folder: Path, family: str, device: str):
    """The runtime model in `folder`, refusing an export of another family with a clear error."""
    from onnxformer.runtime.errors import ManifestError
    from onnxformer.runtime.loader import load

    model = load(folder, device=device)
    if model.family != family:
        commands = {"gpt": "generate", "bert": "encode", "t5": "seq2seq"}
        raise ManifestError(
            f"{folder} is a {model.family} export; this command needs a {family} export "
            f"(use `onnxformer {commands[model.family]}` for {model.family})"
        )
    return model
