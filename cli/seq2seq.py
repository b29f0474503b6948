"""`onnxformer seq2seq DIR "input"`: text to text with a T5 export (torch-free)."""

from pathlib import Path
from typing import Annotated

import typer

from onnxformer.cli.errors import user_errors
from onnxformer.cli.options import Device, Seed, TextFile, Threads, gather_texts, load_model
from onnxformer.cli.printing import console, echo_json


def seq2seq_command(
    ctx: typer.Context,
    folder: Annotated[Path, typer.Argument(help="A T5 export folder (from `onnxformer export`).")],
    inputs: Annotated[list[str] | None, typer.Argument(help="One or more input texts.")] = None,
    file: TextFile = None,
    max_new_tokens: Annotated[
        int | None, typer.Option("--max-new-tokens", help="Most output tokens (default: the export's).")
    ] = None,
    num_beams: Annotated[int, typer.Option("--num-beams", help="Beam search width (1 = greedy).")] = 1,
    length_penalty: Annotated[
        float, typer.Option("--length-penalty", help="Beam score = log-prob / length ** this.")
    ] = 1.0,
    temperature: Annotated[float | None, typer.Option(help="0 = greedy (the default for T5).")] = None,
    top_k: Annotated[int | None, typer.Option("--top-k", help="Sample from the k likeliest tokens.")] = None,
    top_p: Annotated[float | None, typer.Option("--top-p", help="Nucleus sampling threshold.")] = None,
    seed: Seed = None,
    device: Device = "auto",
    threads: Threads = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print inputs and outputs as JSON.")] = False,
) -> None:
    """Turn each input into its output text with a T5 export (built-in task: active to passive voice)."""
    with user_errors(ctx):
        inputs = gather_texts(inputs, file, what="input text")
        model = load_model(folder, "seq2seq", device, threads)
        outputs = model.generate(
            list(inputs),
            max_new_tokens=max_new_tokens,
            num_beams=num_beams,
            length_penalty=length_penalty,
            temperature=temperature,
            top_k=top_k,
            top_p=top_p,
            seed=seed,
        )
    if as_json:
        rows = [{"input": i, "output": o} for i, o in zip(inputs, outputs, strict=True)]
        echo_json({"provider": model.provider, "results": rows})
        return
    for text, output in zip(inputs, outputs, strict=True):
        console.print(f"{text}\n  -> [bold]{output}[/]")
