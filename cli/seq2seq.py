"""`onnxformer seq2seq DIR "input"`: text to text with a T5 export (torch-free)."""

from pathlib import Path
from typing import Annotated

import typer

from onnxformer.cli.errors import user_errors
from onnxformer.cli.options import (
    FROM_FLAGS,
    Device,
    TextFile,
    Threads,
    gather_texts,
    generation_options,
    load_model,
)
from onnxformer.cli.printing import console, echo_json
from onnxformer.runtime.generation_options import GenerationOptions


@generation_options("seq2seq")
def seq2seq_command(
    ctx: typer.Context,
    folder: Annotated[Path, typer.Argument(help="A T5 export folder (from `onnxformer export`).")],
    inputs: Annotated[list[str] | None, typer.Argument(help="One or more input texts.")] = None,
    file: TextFile = None,
    options: GenerationOptions = FROM_FLAGS,  # one flag per field: --num-beams, ...
    device: Device = "auto",
    threads: Threads = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print inputs and outputs as JSON.")] = False,
) -> None:
    """Turn each input into its output text with a T5 export (built-in task: active to passive voice)."""
    with user_errors(ctx):
        inputs = gather_texts(inputs, file, what="input text")
        model = load_model(folder, "seq2seq", device, threads)
        outputs = model.generate(list(inputs), options)
    if as_json:
        rows = [{"input": i, "output": o} for i, o in zip(inputs, outputs, strict=True)]
        echo_json({"provider": model.provider, "results": rows})
        return
    for text, output in zip(inputs, outputs, strict=True):
        console.print(f"{text}\n  -> [bold]{output}[/]")
