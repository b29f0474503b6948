"""`onnxformer generate DIR "prompt"`: continue text with a GPT export (torch-free)."""

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from onnxformer.cli.errors import user_errors
from onnxformer.cli.options import Device, Seed, load_model

console = Console(highlight=False)


def generate_command(
    ctx: typer.Context,
    folder: Annotated[Path, typer.Argument(help="A GPT export folder (from `onnxformer export`).")],
    prompts: Annotated[list[str], typer.Argument(help="One or more prompts; each is continued separately.")],
    max_new_tokens: Annotated[
        int | None, typer.Option("--max-new-tokens", help="Most tokens to add (default: the export's).")
    ] = None,
    temperature: Annotated[
        float | None, typer.Option(help="0 = greedy; higher = more random (default: the export's).")
    ] = None,
    top_k: Annotated[
        int | None, typer.Option("--top-k", help="Sample from the k likeliest tokens (0 = all).")
    ] = None,
    top_p: Annotated[
        float | None, typer.Option("--top-p", help="Sample from the smallest set reaching this probability.")
    ] = None,
    seed: Seed = None,
    stop: Annotated[list[str] | None, typer.Option("--stop", help="End the text before this string.")] = None,
    stream: Annotated[
        bool, typer.Option("--stream", help="Print text as it is produced (one prompt).")
    ] = False,
    device: Device = "auto",
    as_json: Annotated[bool, typer.Option("--json", help="Print prompts and outputs as JSON.")] = False,
) -> None:
    """Continue each prompt with a GPT export using ONNX Runtime (no torch needed)."""
    options = {
        "max_new_tokens": max_new_tokens,
        "temperature": temperature,
        "top_k": top_k,
        "top_p": top_p,
        "seed": seed,
        "stop": stop,
    }
    with user_errors(ctx):
        model = load_model(folder, "generate", device)
        if stream and len(prompts) == 1 and not as_json:
            typer.echo(prompts[0], nl=False)
            for piece in model.stream(prompts[0], **options):
                typer.echo(piece, nl=False)
            typer.echo()
            return
        outputs = model.generate(list(prompts), **options)
    if as_json:
        rows = [{"prompt": p, "output": o} for p, o in zip(prompts, outputs, strict=True)]
        typer.echo(json.dumps({"provider": model.provider, "results": rows}, indent=2, ensure_ascii=False))
        return
    for prompt, output in zip(prompts, outputs, strict=True):
        console.print(f"[bold]{prompt}[/]{output}", markup=True)
