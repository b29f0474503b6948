"""`onnxformer generate DIR "prompt"`: continue text with a GPT export (torch-free)."""

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
from onnxformer.runtime.errors import InputError
from onnxformer.runtime.generation_options import GenerationOptions


@generation_options("generate")
def generate_command(
    ctx: typer.Context,
    folder: Annotated[Path, typer.Argument(help="A GPT export folder (from `onnxformer export`).")],
    prompts: Annotated[
        list[str] | None, typer.Argument(help="One or more prompts; each is continued separately.")
    ] = None,
    file: TextFile = None,
    options: GenerationOptions = FROM_FLAGS,  # one flag per field: --max-new-tokens, ...
    stream: Annotated[
        bool, typer.Option("--stream", help="Print text as it is produced, prompt by prompt.")
    ] = False,
    device: Device = "auto",
    threads: Threads = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print prompts and outputs as JSON.")] = False,
) -> None:
    """Continue each prompt with a GPT export using ONNX Runtime (no torch needed)."""
    with user_errors(ctx):
        prompts = gather_texts(prompts, file, what="prompt")
        if stream and as_json:
            raise InputError(
                "--stream prints text as it comes and --json prints it when done; use one of them"
            )
        model = load_model(folder, "generate", device, threads)
        if stream:
            for prompt in prompts:
                typer.echo(prompt, nl=False)
                for piece in model.stream(prompt, options):
                    typer.echo(piece, nl=False)
                typer.echo()
            return
        outputs = model.generate(list(prompts), options)
    if as_json:
        rows = [{"prompt": p, "output": o} for p, o in zip(prompts, outputs, strict=True)]
        echo_json({"provider": model.provider, "results": rows})
        return
    for prompt, output in zip(prompts, outputs, strict=True):
        console.print(f"[bold]{prompt}[/]{output}", markup=True)
